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
	// Early is true when the digest was sent before its window passed,
	// because a reader asked for it (App.SendDigestNow); RequestedBy names
	// that reader. Otherwise the digest went out when its window passed.
	Early       bool   `json:"early,omitempty"`
	RequestedBy string `json:"requested_by,omitempty"`
}

// SendNowSignal is the name of the signal that asks a digest run waiting
// out its window to send the digest at once (App.SendDigestNow). The wait
// is recorded as the step "signal:send-now" of the run's root task.
const SendNowSignal = "send-now"

// SendNow is the payload of the send-now signal: who asked for the digest
// before its window passed.
type SendNow struct {
	// By names the reader who asked.
	By string `json:"by"`
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
// fetch_article child task each (workflow.Map), then waits for the
// send-now signal for at most the digest window, and sends the digest in
// a step whose idempotency key makes it send at most once: when the window
// passes, or at once when a reader asks for it (App.SendDigestNow),
// whichever comes first. The wait costs nothing while it lasts: the task
// has no turn until the signal or the window's end wakes it.
func (a *App) sendDigest(t *workflow.Task, in DigestInput) (DigestOutput, error) {
	articles, err := workflow.Map(t, "fetch", a.article, in.Entries)
	if err != nil {
		return DigestOutput{}, err
	}
	var early *SendNow
	if in.Window > 0 {
		req, ok, err := workflow.WaitSignal[SendNow](t, SendNowSignal, in.Window)
		if err != nil {
			return DigestOutput{}, err
		}
		if ok {
			early = &req
		}
	}
	// The key is stable across every turn and retry of this task: a send
	// step that runs again after a crash finds its digest recorded.
	key := t.IdempotencyKey("send")
	return workflow.Step(t, "send", func(ctx context.Context) (DigestOutput, error) {
		return a.send(ctx, t.RunID(), key, in, articles, early)
	})
}

// send writes the digest to the digests table, once per idempotency key,
// and logs it: that is what sending means in this example. early is the
// request of the reader who asked for the digest before its window passed,
// or nil when the window passed.
func (a *App) send(ctx context.Context, runID, key string, in DigestInput, articles []ArticleSummary, early *SendNow) (DigestOutput, error) {
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
	if early != nil {
		fmt.Fprintf(&body, "\nSent early, at the request of %s.\n", early.By)
	}
	d.Body = body.String()
	got, inserted, err := insertDigest(ctx, a.pool, d)
	if err != nil {
		return DigestOutput{}, err
	}
	out := DigestOutput{DigestID: got.ID, Subject: got.Subject, Entries: len(got.EntryIDs), AlreadySent: !inserted}
	attrs := []any{slog.String("user", user), slog.Int64("feed_id", in.FeedID), slog.String("subject", got.Subject),
		slog.Int64("digest_id", got.ID), slog.String("run_id", runID)}
	if early != nil {
		out.Early, out.RequestedBy = true, early.By
		attrs = append(attrs, slog.Bool("early", true), slog.String("requested_by", early.By))
	}
	switch {
	case inserted && early != nil:
		a.logger.InfoContext(ctx, "digest sent early at a reader's request", attrs...)
	case inserted:
		a.logger.InfoContext(ctx, "digest sent", attrs...)
	default:
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

// ErrNoPendingDigest is the error of App.SendDigestNow when the user has
// no digest waiting to be sent.
var ErrNoPendingDigest = errors.New("feedfetcher: no pending digest")

// PendingDigest is a digest run that has not sent its digest yet: it is
// fetching its articles or waiting out its window.
type PendingDigest struct {
	RunID string `json:"run_id"`
	// IdempotencyKey is the run's key, digest:<user>:<feed>:<first entry>.
	IdempotencyKey string    `json:"idempotency_key"`
	FeedID         int64     `json:"feed_id"`
	Entries        int       `json:"entries"`
	Status         string    `json:"status"`
	CreatedAt      time.Time `json:"created_at"`
}

// PendingDigests returns the digest runs of a user that have not finished,
// oldest first.
func (a *App) PendingDigests(ctx context.Context, userID int64) ([]PendingDigest, error) {
	rows, err := a.pool.Query(ctx, `
SELECT id::text, coalesce(idempotency_key, ''), (input->>'feed_id')::bigint,
    coalesce(jsonb_array_length(input->'entries'), 0), status, created_at
FROM braid_runs
WHERE workflow = $1 AND status IN ('pending', 'running', 'waiting') AND (input->>'user_id')::bigint = $2
ORDER BY created_at, id`, DigestWorkflow, userID)
	if err != nil {
		return nil, fmt.Errorf("feedfetcher: listing the pending digests of user %d: %w", userID, err)
	}
	ds, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (PendingDigest, error) {
		var d PendingDigest
		return d, row.Scan(&d.RunID, &d.IdempotencyKey, &d.FeedID, &d.Entries, &d.Status, &d.CreatedAt)
	})
	if err != nil {
		return nil, fmt.Errorf("feedfetcher: listing the pending digests of user %d: %w", userID, err)
	}
	return ds, nil
}

// SendDigestNow asks every pending digest of a user (PendingDigests) to be
// sent now rather than when its window passes, on behalf of the reader
// named by (the user's own name when by is empty). It sends each run the
// send-now signal, found by the run's idempotency key, and returns how many
// it asked. A digest still fetching its articles is sent as soon as they
// are fetched; its output says Early, with RequestedBy.
//
// Asking again is harmless: a run takes the signal once (the send carries
// an idempotency key), and a digest that was sent is no longer pending.
// When no digest of the user is pending, the error matches
// ErrNoPendingDigest and names the user; an unknown user's matches
// ErrUserNotFound.
func (a *App) SendDigestNow(ctx context.Context, userID int64, by string) (int, error) {
	name, err := userName(ctx, a.pool, userID)
	if err != nil {
		return 0, fmt.Errorf("feedfetcher: sending the digests of user %d now: %w", userID, err)
	}
	by = cmp.Or(strings.TrimSpace(by), name)
	pending, err := a.PendingDigests(ctx, userID)
	if err != nil {
		return 0, err
	}
	asked := 0
	for _, d := range pending {
		if d.IdempotencyKey == "" {
			continue
		}
		err := a.engine.SignalByKey(ctx, d.IdempotencyKey, SendNowSignal, SendNow{By: by},
			&workflow.SignalOpts{IdempotencyKey: SendNowSignal})
		if errors.Is(err, workflow.ErrRunFinished) {
			continue // sent in the meantime
		}
		if err != nil {
			return asked, fmt.Errorf("feedfetcher: asking digest %s of user %q to be sent now: %w", d.IdempotencyKey, name, err)
		}
		asked++
		a.logger.InfoContext(ctx, "digest asked for now", slog.String("user", name), slog.Int64("feed_id", d.FeedID),
			slog.String("requested_by", by), slog.String("run_id", d.RunID))
	}
	if asked == 0 {
		return 0, fmt.Errorf("%w for user %q (id %d)", ErrNoPendingDigest, name, userID)
	}
	return asked, nil
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
