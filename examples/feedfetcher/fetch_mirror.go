package feedfetcher

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// fetchMirror is the River worker middleware that mirrors a feed's
// fetch_feed recurring row into the feed after each run of it:
// feeds.next_fetch_at becomes the row's next_run_at (NULL while the row is
// disabled or parked as a dead letter, or the feed has no subscriber left)
// and feeds.consecutive_failures the row's count. It sits outside the
// scheduler's recurring middleware, so it reads the row once the outcome
// is recorded there: the mirror follows every outcome, those the handler
// never sees too (a timeout, a failure before the fetch, a run the
// recurring middleware refused). A row still running (a run interrupted
// by a stop) is left to the run that finishes it.
type fetchMirror struct {
	river.MiddlewareDefaults

	pool   *pgxpool.Pool
	logger *slog.Logger
}

var _ rivertype.WorkerMiddleware = (*fetchMirror)(nil)

// mirrorFetchSQL copies the state of feed $1's recurring row (kind $2, key
// $3) into the feed.
const mirrorFetchSQL = `
UPDATE feeds SET
    next_fetch_at = CASE WHEN r.enabled AND r.dead_at IS NULL AND ` + activeSubscribersSQL + ` THEN r.next_run_at END,
    consecutive_failures = r.consecutive_failures, updated_at = now()
FROM braid_recurring r
WHERE feeds.id = $1 AND r.kind = $2 AND r.key = $3 AND r.running_since IS NULL`

// Work implements rivertype.WorkerMiddleware.
func (m *fetchMirror) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	err := doInner(ctx)
	if job.Kind != FetchFeedKind {
		return err
	}
	var args FetchFeedArgs
	if json.Unmarshal(job.EncodedArgs, &args) != nil {
		return err
	}
	// The run's outcome is recorded even when its context has ended; so
	// is its mirror.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, mErr := m.pool.Exec(wctx, mirrorFetchSQL, args.FeedID, FetchFeedKind, feedKey(args.FeedID)); mErr != nil {
		m.logger.WarnContext(ctx, "mirroring the fetch_feed job into its feed failed; the next run mirrors it again",
			slog.Int64("feed_id", args.FeedID), slog.String("error", mErr.Error()))
	}
	return err
}
