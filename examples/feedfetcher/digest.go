package feedfetcher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

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
