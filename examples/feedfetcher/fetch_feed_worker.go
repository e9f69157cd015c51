package feedfetcher

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/braidflow/braid/scheduler"
	"github.com/braidflow/braid/workflow"
)

// FetchFeedArgs are the args of a feed's fetch_feed recurring job.
type FetchFeedArgs struct {
	FeedID int64 `json:"feed_id"`
}

// Kind returns FetchFeedKind.
func (FetchFeedArgs) Kind() string { return FetchFeedKind }

// fetchFeedWorker is the handler of the fetch_feed recurring job: an
// ordinary River worker whose outcome the scheduler's recurring middleware
// records on the job's row.
type fetchFeedWorker struct {
	river.WorkerDefaults[FetchFeedArgs]
	app *App
}

// Work fetches one feed with a conditional GET. On success it stores the
// new entries and, in the same transaction, starts an article pipeline run
// per entry and a digest run per subscriber, and chooses the next run from
// the response's cache headers and the feed's TTL (NextRunAt, on the
// database's clock). On failure it counts the failure on the feed, mirrors the
// backoff into next_fetch_at, and returns the error, so that the recurring
// row counts it too and backs off by the same schedule.
func (w *fetchFeedWorker) Work(ctx context.Context, job *river.Job[FetchFeedArgs]) error {
	a := w.app
	feed, err := feedByID(ctx, a.pool, job.Args.FeedID)
	if err != nil {
		return err
	}
	res, fetchErr := a.fetcher.Fetch(ctx, FetchRequest{URL: feed.URL, ETag: feed.ETag, LastModified: feed.LastModified, TTL: feed.TTL})
	if fetchErr != nil {
		if ctx.Err() != nil {
			// The job was stopped (shutdown or timeout), not the feed's fault.
			return fetchErr
		}
		var failures int
		var next *time.Time
		err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
			var err error
			failures, next, err = recordFetchFailure(ctx, tx, feed.ID, fetchErr, a.fetcher.Backoff)
			return err
		})
		if err != nil {
			return fmt.Errorf("%w (recording it: %w)", fetchErr, err)
		}
		attrs := []any{slog.Int64("feed_id", feed.ID), slog.String("feed", feed.URL),
			slog.Int("consecutive_failures", failures), slog.Duration("backoff", a.fetcher.Backoff(failures)),
			slog.String("error", fetchErr.Error())}
		if next != nil {
			attrs = append(attrs, slog.Time("next_fetch_at", *next))
		}
		a.logger.WarnContext(ctx, "fetch failed; backing off", attrs...)
		return fetchErr
	}

	var digests, pipelines int
	err = pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		// The next fetch is on the database's clock, which decides when the
		// feed's job is due, rather than the fetcher's: it is both mirrored
		// and given to NextRunAt.
		if err := tx.QueryRow(ctx, `SELECT braid_now() + $1::bigint * interval '1 microsecond'`,
			res.Interval.Microseconds()).Scan(&res.NextFetch); err != nil {
			return fmt.Errorf("feedfetcher: reading the next fetch of feed %d: %w", feed.ID, err)
		}
		if err := recordFetchSuccess(ctx, tx, feed.ID, res); err != nil {
			return err
		}
		if res.NotModified {
			return nil
		}
		fresh, err := insertEntries(ctx, tx, feed.ID, res.Entries)
		if err != nil || len(fresh) == 0 {
			return err
		}
		a.logger.InfoContext(ctx, "new entries", slog.Int64("feed_id", feed.ID), slog.String("feed", feed.URL),
			slog.String("title", res.Title), slog.Int("entries", len(fresh)))
		if pipelines, err = a.startPipelinesTx(ctx, tx, feed, fresh); err != nil {
			return err
		}
		digests, err = a.startDigestsTx(ctx, tx, feed.ID, fresh)
		return err
	})
	if err != nil {
		// The fetch failed to be stored: a failed fetch of the feed's,
		// counted and backed off as one, unless the job was stopped.
		if ctx.Err() == nil {
			if rerr := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
				_, _, err := recordFetchFailure(ctx, tx, feed.ID, err, a.fetcher.Backoff)
				return err
			}); rerr != nil {
				return fmt.Errorf("%w (recording it: %w)", err, rerr)
			}
		}
		return err
	}
	a.logger.DebugContext(ctx, "fetched", slog.Int64("feed_id", feed.ID), slog.Int("status", res.Status),
		slog.Int("pipelines", pipelines), slog.Int("digests", digests), slog.Time("next_fetch_at", res.NextFetch))
	return scheduler.NextRunAt(ctx, res.NextFetch)
}

// startDigestsTx starts one digest run per active subscriber of a feed over
// its new entries, inside the transaction that stores them: the runs exist
// exactly when the entries do. Each run starts a trace of its own, linked to
// the fetch that found the entries, so that one digest is one trace.
func (a *App) startDigestsTx(ctx context.Context, tx pgx.Tx, feedID int64, fresh []StoredEntry) (int, error) {
	users, err := subscribers(ctx, tx, feedID)
	if err != nil || len(users) == 0 {
		return 0, err
	}
	if len(fresh) > a.cfg.MaxDigestEntries {
		fresh = fresh[len(fresh)-a.cfg.MaxDigestEntries:]
	}
	in := DigestInput{FeedID: feedID, Window: a.cfg.DigestWindow}
	for _, e := range fresh {
		in.Entries = append(in.Entries, ArticleInput{EntryID: e.ID, Title: e.Title, Link: e.Link})
	}
	link := trace.LinkFromContext(ctx, attribute.String(workflow.LinkAttribute, "fetch that found the entries"))
	for _, userID := range users {
		in.UserID = userID
		spanCtx, span := a.tracer.Start(ctx, "feedfetcher.digest", trace.WithNewRoot(), trace.WithLinks(link),
			trace.WithAttributes(attribute.Int64("user.id", userID), attribute.Int64("feed.id", feedID),
				attribute.Int("entries", len(in.Entries))))
		// The key names the user and the first new entry, so a fetch that is
		// retried after its transaction committed cannot start a second run.
		key := fmt.Sprintf("digest:%d:%d:%d", userID, feedID, fresh[0].ID)
		run, err := a.digest.StartTx(spanCtx, tx, a.engine, in, &workflow.StartOpts{IdempotencyKey: key})
		if err != nil {
			span.RecordError(err)
			span.End()
			return 0, fmt.Errorf("feedfetcher: starting the digest of feed %d for user %d: %w", feedID, userID, err)
		}
		span.SetAttributes(attribute.String("run.id", run.ID))
		span.End()
	}
	return len(users), nil
}
