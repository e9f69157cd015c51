package feedfetcher

import (
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace/noop"

	"github.com/braidflow/braid/examples/feedfetcher/feedserver"
)

// TestFetchMirrorFollowsTheJob: a fetch that fails where the handler
// records nothing on the feed (here the job's timeout ends it mid-fetch)
// still counts on the feed's recurring row, and the feed mirrors the row:
// the same consecutive failures and the row's next run.
func TestFetchMirrorFollowsTheJob(t *testing.T) {
	t.Parallel()
	pool := testDB(t)
	ctx := ctxTimeout(t, 30*time.Second)
	srv := startServer(t) // the slow feed answers after 100 ms
	cfg := testConfig(noop.NewTracerProvider())
	cfg.Fetcher.MinInterval, cfg.Fetcher.MaxInterval = time.Hour, time.Hour
	qc := *cfg.Engine.Queue
	qc.JobTimeout = 20 * time.Millisecond
	cfg.Engine.Queue = &qc
	app := startApp(t, pool, cfg)
	sub, err := app.Subscribe(ctx, user(t, app, "alice").ID, srv.FeedURL(feedserver.SlugSlow))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the timed-out fetch to be recorded on the row", func() bool {
		job := fetchJob(t, app, sub.FeedID)
		return job.RunningSince == nil && job.ConsecutiveFailures == 1
	})
	job := fetchJob(t, app, sub.FeedID)
	var (
		failures int
		next     *time.Time
	)
	eventually(t, 10*time.Second, "the feed to mirror its job", func() bool {
		if err := pool.QueryRow(ctx, `SELECT consecutive_failures, next_fetch_at FROM feeds WHERE id = $1`, sub.FeedID).Scan(&failures, &next); err != nil {
			t.Fatal(err)
		}
		return failures == job.ConsecutiveFailures && next != nil && next.Equal(job.NextRunAt)
	})
}
