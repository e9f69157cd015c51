package feedfetcher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/workflow"
)

// DigestInput is the input of a digest run: the new entries of one feed for
// one subscriber.
type DigestInput struct {
	UserID  int64          `json:"user_id"`
	FeedID  int64          `json:"feed_id"`
	Entries []ArticleInput `json:"entries"`
	// Window is how long the digest waits before it is sent. It travels in
	// the input so that a run keeps the window it started with.
	Window time.Duration `json:"window"`
}

// DigestOutput is the output of a digest run.
type DigestOutput struct {
	// DigestID is the row of the digest in the digests table.
	DigestID int64 `json:"digest_id"`
	// Subject is the digest's subject line.
	Subject string `json:"subject"`
	// Entries is the number of entries in the digest.
	Entries int `json:"entries"`
	// AlreadySent is true when the send step found the digest recorded
	// under its idempotency key already, and so did not send it again.
	AlreadySent bool `json:"already_sent,omitempty"`
}

// ArticleInput is one entry of a digest, the input of a fetch_article child
// task.
type ArticleInput struct {
	EntryID int64  `json:"entry_id"`
	Title   string `json:"title"`
	Link    string `json:"link"`
}

// ArticleSummary is what a fetch_article child task learned of an entry's
// page. When the page could not be fetched, Error says why and the digest
// lists the entry with its own title.
type ArticleSummary struct {
	EntryID int64  `json:"entry_id"`
	Title   string `json:"title"`
	URL     string `json:"url,omitempty"`
	Excerpt string `json:"excerpt,omitempty"`
	Bytes   int    `json:"bytes,omitempty"`
	Error   string `json:"error,omitempty"`
}

// sendDigest is the digest workflow. It fans out over the new entries, one
// fetch_article child task each (workflow.Map), waits out the digest window
// (a durable delay), and sends the digest in a step whose idempotency key
// makes it send at most once.
func (a *App) sendDigest(t *workflow.Task, in DigestInput) (DigestOutput, error) {
	articles, err := workflow.Map(t, "fetch", a.article, in.Entries)
	if err != nil {
		return DigestOutput{}, err
	}
	if in.Window > 0 {
		if err := t.Delay("window", in.Window); err != nil {
			return DigestOutput{}, err
		}
	}
	// The key is stable across every turn and retry of this task: a send
	// step that runs again after a crash finds its digest recorded.
	key := t.IdempotencyKey("send")
	return workflow.Step(t, "send", func(ctx context.Context) (DigestOutput, error) {
		return a.send(ctx, t.RunID(), key, in, articles)
	})
}

// send writes the digest to the digests table, once per idempotency key,
// and logs it: that is what sending means in this example.
func (a *App) send(ctx context.Context, runID, key string, in DigestInput, articles []ArticleSummary) (DigestOutput, error) {
	user, err := userName(ctx, a.pool, in.UserID)
	if err != nil {
		return DigestOutput{}, err
	}
	feed, err := feedByID(ctx, a.pool, in.FeedID)
	if err != nil {
		return DigestOutput{}, err
	}
	title := cmp.Or(feed.Title, feed.URL)
	noun := "entries"
	if len(articles) == 1 {
		noun = "entry"
	}
	d := &Digest{
		IdempotencyKey: key,
		RunID:          runID,
		UserID:         in.UserID,
		FeedID:         in.FeedID,
		Subject:        fmt.Sprintf("%d new %s in %s", len(articles), noun, title),
	}
	var body strings.Builder
	fmt.Fprintf(&body, "Hello %s,\n\n", user)
	for _, art := range articles {
		d.EntryIDs = append(d.EntryIDs, art.EntryID)
		fmt.Fprintf(&body, "* %s\n", art.Title)
		if art.Excerpt != "" {
			fmt.Fprintf(&body, "  %s\n", art.Excerpt)
		}
		if art.URL != "" {
			fmt.Fprintf(&body, "  %s\n", art.URL)
		}
	}
	d.Body = body.String()
	got, inserted, err := insertDigest(ctx, a.pool, d)
	if err != nil {
		return DigestOutput{}, err
	}
	out := DigestOutput{DigestID: got.ID, Subject: got.Subject, Entries: len(got.EntryIDs), AlreadySent: !inserted}
	attrs := []any{slog.String("user", user), slog.Int64("feed_id", in.FeedID), slog.String("subject", got.Subject),
		slog.Int64("digest_id", got.ID), slog.String("run_id", runID)}
	if inserted {
		a.logger.InfoContext(ctx, "digest sent", attrs...)
	} else {
		a.logger.InfoContext(ctx, "digest already sent; not sending it again", attrs...)
	}
	return out, nil
}

// fetchArticle is the fetch_article workflow, one child task per entry of
// a digest. The page is fetched in a step with its own retry policy; once
// its attempts are spent, the entry goes into the digest without an
// excerpt rather than holding the digest back.
func (a *App) fetchArticle(t *workflow.Task, in ArticleInput) (ArticleSummary, error) {
	sum := ArticleSummary{EntryID: in.EntryID, Title: in.Title, URL: in.Link}
	if in.Link == "" {
		sum.Error = "the entry has no link"
		return sum, nil
	}
	retry := workflow.Retry{
		MaxAttempts: a.cfg.ArticleAttempts,
		Backoff:     queue.Backoff{Base: a.cfg.ArticleRetryBase, Max: 8 * a.cfg.ArticleRetryBase, Jitter: 0.2},
	}
	page, err := workflow.Step(t, "get", func(ctx context.Context) (Article, error) {
		return a.fetcher.FetchArticle(ctx, in.Link)
	}, retry)
	if se, ok := errors.AsType[*workflow.StepError](err); ok {
		sum.Error = se.Message
		return sum, nil
	}
	if err != nil {
		return sum, err
	}
	sum.Title = cmp.Or(in.Title, page.Title)
	sum.URL, sum.Excerpt, sum.Bytes = page.URL, page.Excerpt, page.Bytes
	return sum, nil
}

// Digests returns the digests sent to a user, oldest first.
func (a *App) Digests(ctx context.Context, userID int64) ([]*Digest, error) {
	return listDigests(ctx, a.pool, userID)
}

// Digest is a digest that was sent: one row per idempotency key.
type Digest struct {
	ID             int64     `json:"id"`
	IdempotencyKey string    `json:"idempotency_key"`
	RunID          string    `json:"run_id"`
	UserID         int64     `json:"user_id"`
	FeedID         int64     `json:"feed_id"`
	EntryIDs       []int64   `json:"entry_ids"`
	Subject        string    `json:"subject"`
	Body           string    `json:"body"`
	SentAt         time.Time `json:"sent_at"`
}

const digestColumns = `id, idempotency_key, run_id, user_id, feed_id, entry_ids, subject, body, sent_at`

func scanDigest(row pgx.Row) (*Digest, error) {
	var d Digest
	if err := row.Scan(&d.ID, &d.IdempotencyKey, &d.RunID, &d.UserID, &d.FeedID, &d.EntryIDs, &d.Subject, &d.Body, &d.SentAt); err != nil {
		return nil, err
	}
	return &d, nil
}

// insertDigest records a digest as sent, once per idempotency key. When a
// digest with the key was already sent it returns that one and false.
func insertDigest(ctx context.Context, db dbtx, d *Digest) (*Digest, bool, error) {
	if d.IdempotencyKey == "" {
		return nil, false, errors.New("feedfetcher: a digest needs an idempotency key")
	}
	if d.EntryIDs == nil {
		d.EntryIDs = []int64{}
	}
	got, err := scanDigest(db.QueryRow(ctx, `
INSERT INTO digests (idempotency_key, run_id, user_id, feed_id, entry_ids, subject, body)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING `+digestColumns, d.IdempotencyKey, d.RunID, d.UserID, d.FeedID, d.EntryIDs, d.Subject, d.Body))
	if err == nil {
		return got, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, false, fmt.Errorf("feedfetcher: recording digest %s: %w", d.IdempotencyKey, err)
	}
	got, err = scanDigest(db.QueryRow(ctx, `SELECT `+digestColumns+` FROM digests WHERE idempotency_key = $1`, d.IdempotencyKey))
	if err != nil {
		return nil, false, fmt.Errorf("feedfetcher: reading digest %s: %w", d.IdempotencyKey, err)
	}
	return got, false, nil
}

// listDigests returns the digests sent to a user, oldest first.
func listDigests(ctx context.Context, db dbtx, userID int64) ([]*Digest, error) {
	rows, err := db.Query(ctx, `SELECT `+digestColumns+` FROM digests WHERE user_id = $1 ORDER BY id`, userID)
	if err != nil {
		return nil, fmt.Errorf("feedfetcher: listing digests of user %d: %w", userID, err)
	}
	ds, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*Digest, error) { return scanDigest(row) })
	if err != nil {
		return nil, fmt.Errorf("feedfetcher: listing digests of user %d: %w", userID, err)
	}
	return ds, nil
}
