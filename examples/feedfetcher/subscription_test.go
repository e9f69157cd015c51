package feedfetcher

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/scheduler"
)

// fetchJob returns the fetch_feed recurring job of a feed.
func fetchJob(t *testing.T, app *App, feedID int64) *scheduler.Recurring {
	t.Helper()
	r, err := app.sched.GetRecurring(context.Background(), FetchFeedKind, feedKey(feedID))
	if err != nil {
		t.Fatalf("GetRecurring(feed %d): %v", feedID, err)
	}
	return r
}

// mirror returns feeds.next_fetch_at of a feed.
func mirror(t *testing.T, pool *pgxpool.Pool, feedID int64) *time.Time {
	t.Helper()
	var next *time.Time
	if err := pool.QueryRow(context.Background(), `SELECT next_fetch_at FROM feeds WHERE id = $1`, feedID).Scan(&next); err != nil {
		t.Fatal(err)
	}
	return next
}

// TestSubscribeLifecycle follows one feed's job through the life cycle of
// its subscriptions: created with the first subscriber, kept enabled while
// a subscriber is left, disabled when the last one leaves, enabled again,
// with the same next run, on the next subscription.
func TestSubscribeLifecycle(t *testing.T) {
	t.Parallel()
	pool := testDB(t)
	ctx := ctxTimeout(t, 30*time.Second)
	app := newApp(t, pool, &Config{Logger: quietLogger()})
	alice, bob := user(t, app, "alice"), user(t, app, "bob")
	const url = "https://example.org/feed.xml"

	// The first subscriber creates the feed, its job (due now) and the
	// subscription.
	first, err := app.Subscribe(ctx, alice.ID, url)
	if err != nil {
		t.Fatal(err)
	}
	job := fetchJob(t, app, first.FeedID)
	if !first.NewFeed || first.AlreadySubscribed || !first.FetchEnabled || !job.Enabled ||
		!first.NextFetchAt.Equal(job.NextRunAt) || time.Since(job.NextRunAt) > time.Minute {
		t.Fatalf("first subscription %+v, job %+v; want a new feed with an enabled job due now", first, job)
	}
	if m := mirror(t, pool, first.FeedID); m == nil || !m.Equal(job.NextRunAt) {
		t.Errorf("next_fetch_at = %v, want the job's next_run_at %v", m, job.NextRunAt)
	}
	var args FetchFeedArgs
	if err := json.Unmarshal(job.Args, &args); err != nil || args.FeedID != first.FeedID {
		t.Errorf("job args %s, want feed %d", job.Args, first.FeedID)
	}

	// Subscribing twice changes nothing.
	again, err := app.Subscribe(ctx, alice.ID, url)
	if err != nil || !again.AlreadySubscribed || again.ID != first.ID {
		t.Fatalf("subscribing twice = %+v, %v; want subscription %d again", again, err, first.ID)
	}

	// A second subscriber finds the feed.
	second, err := app.Subscribe(ctx, bob.ID, url)
	if err != nil || second.NewFeed || second.FeedID != first.FeedID {
		t.Fatalf("second subscriber = %+v, %v; want the existing feed", second, err)
	}

	// The first to leave keeps the job enabled.
	left, err := app.Unsubscribe(ctx, alice.ID, first.FeedID)
	if err != nil {
		t.Fatal(err)
	}
	if !left.FetchEnabled || left.UnsubscribedAt == nil || !fetchJob(t, app, first.FeedID).Enabled || mirror(t, pool, first.FeedID) == nil {
		t.Fatalf("after one of two left: %+v; want the job enabled and mirrored", left)
	}

	// Move the job's next run into the future, as a fetch would.
	planned := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	if _, err := pool.Exec(ctx, `UPDATE braid_recurring SET next_run_at = $1 WHERE kind = $2 AND key = $3`,
		planned, FetchFeedKind, feedKey(first.FeedID)); err != nil {
		t.Fatal(err)
	}

	// The last to leave disables the job, which keeps its next run, and
	// clears the mirror.
	last, err := app.Unsubscribe(ctx, bob.ID, first.FeedID)
	if err != nil {
		t.Fatal(err)
	}
	job = fetchJob(t, app, first.FeedID)
	if last.FetchEnabled || job.Enabled || !job.NextRunAt.Equal(planned) || mirror(t, pool, first.FeedID) != nil {
		t.Fatalf("after the last left: %+v, job %+v, mirror %v; want the job disabled at its planned time, no mirror",
			last, job, mirror(t, pool, first.FeedID))
	}
	if _, err := app.Unsubscribe(ctx, bob.ID, first.FeedID); !errors.Is(err, ErrNotSubscribed) {
		t.Errorf("unsubscribing twice = %v, want ErrNotSubscribed", err)
	}

	// Subscribing again enables the same job and mirrors its kept next run.
	back, err := app.Subscribe(ctx, bob.ID, url)
	if err != nil {
		t.Fatal(err)
	}
	job = fetchJob(t, app, first.FeedID)
	if back.NewFeed || back.ID == second.ID || !job.Enabled || !job.NextRunAt.Equal(planned) || !back.NextFetchAt.Equal(planned) {
		t.Fatalf("resubscribed: %+v, job %+v; want a new subscription and the job enabled at %v", back, job, planned)
	}
	if m := mirror(t, pool, first.FeedID); m == nil || !m.Equal(planned) {
		t.Errorf("next_fetch_at after resubscribing = %v, want %v", m, planned)
	}

	subs, err := app.Subscriptions(ctx, bob.ID)
	if err != nil || len(subs) != 1 || subs[0].ID != back.ID {
		t.Errorf("bob's subscriptions = %+v, %v; want only %d", subs, err, back.ID)
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM subscriptions WHERE feed_id = $1`, first.FeedID).Scan(&rows); err != nil || rows != 3 {
		t.Errorf("subscriptions of the feed: %d rows (%v); want 3, soft-deleted ones kept", rows, err)
	}
	var recurring int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM braid_recurring WHERE kind = $1`, FetchFeedKind).Scan(&recurring); err != nil || recurring != 1 {
		t.Errorf("fetch_feed jobs: %d (%v); want exactly one per feed", recurring, err)
	}
}

func TestSubscribeErrors(t *testing.T) {
	t.Parallel()
	pool := testDB(t)
	ctx := ctxTimeout(t, 30*time.Second)
	app := newApp(t, pool, &Config{Logger: quietLogger()})
	alice := user(t, app, "alice")

	if _, err := app.Subscribe(ctx, alice.ID, "not a url"); err == nil || !strings.Contains(err.Error(), "absolute http or https") {
		t.Errorf("subscribing to a bad URL = %v", err)
	}
	if _, err := app.Subscribe(ctx, alice.ID+1000, "https://example.org/feed"); !errors.Is(err, ErrUserNotFound) {
		t.Errorf("subscribing a missing user = %v, want ErrUserNotFound", err)
	}
	var feeds int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM feeds`).Scan(&feeds); err != nil || feeds != 0 {
		t.Errorf("failed subscriptions left %d feeds (%v)", feeds, err)
	}
	if _, err := app.Unsubscribe(ctx, alice.ID, 12345); !errors.Is(err, ErrNotSubscribed) {
		t.Errorf("unsubscribing from an unknown feed = %v, want ErrNotSubscribed", err)
	}

	// A subscription rolled back with the caller's transaction leaves
	// neither feed nor job.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := app.SubscribeTx(ctx, tx, alice.ID, "https://example.org/rolled-back"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := app.sched.GetRecurring(ctx, FetchFeedKind, "1"); !errors.Is(err, scheduler.ErrRecurringNotFound) {
		t.Errorf("after rollback the job exists: %v", err)
	}
}

// TestUnsubscribeRacesSubscribe has the last subscriber leave while another
// user arrives, many times: the job must end enabled exactly when a
// subscription is left.
func TestUnsubscribeRacesSubscribe(t *testing.T) {
	t.Parallel()
	pool := testDB(t)
	ctx := ctxTimeout(t, 60*time.Second)
	app := newApp(t, pool, &Config{Logger: quietLogger()})
	leaver, arriver := user(t, app, "leaver"), user(t, app, "arriver")
	const url = "https://example.org/contended"

	for i := range 20 {
		sub, err := app.Subscribe(ctx, leaver.ID, url)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		wg.Go(func() { _, errs[0] = app.Unsubscribe(ctx, leaver.ID, sub.FeedID) })
		wg.Go(func() { _, errs[1] = app.Subscribe(ctx, arriver.ID, url) })
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		if !fetchJob(t, app, sub.FeedID).Enabled || mirror(t, pool, sub.FeedID) == nil {
			t.Fatalf("round %d: a subscriber is left but the job is disabled or not mirrored", i)
		}
		if _, err := app.Unsubscribe(ctx, arriver.ID, sub.FeedID); err != nil {
			t.Fatal(err)
		}
		if fetchJob(t, app, sub.FeedID).Enabled {
			t.Fatalf("round %d: nobody is left but the job is enabled", i)
		}
	}
}

// TestSubscribeToParkedFeed: subscribing to a feed whose fetch_feed job is
// parked as a dead letter succeeds, but says the feed is not fetched
// (FetchParked) and mirrors no next fetch, since the job's next run does
// not come until it is revived.
func TestSubscribeToParkedFeed(t *testing.T) {
	t.Parallel()
	pool := testDB(t)
	ctx := ctxTimeout(t, 30*time.Second)
	app := newApp(t, pool, &Config{Logger: quietLogger()})
	alice, bob := user(t, app, "alice"), user(t, app, "bob")
	first, err := app.Subscribe(ctx, alice.ID, "https://example.org/broken.xml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE braid_recurring SET dead_at = now(), consecutive_failures = 10,
    last_error = 'HTTP 500', next_run_at = now() + interval '1 hour'`); err != nil {
		t.Fatal(err)
	}
	sub, err := app.Subscribe(ctx, bob.ID, "https://example.org/broken.xml")
	if err != nil {
		t.Fatalf("Subscribe to a feed whose job is parked: %v", err)
	}
	if !sub.FetchParked || sub.NextFetchAt != nil || sub.FeedID != first.FeedID || sub.AlreadySubscribed {
		t.Errorf("subscription to a parked feed: %+v; want FetchParked and no next fetch", sub)
	}
	if m := mirror(t, pool, first.FeedID); m != nil {
		t.Errorf("next_fetch_at of a parked feed = %v, want NULL", m)
	}
	if job := fetchJob(t, app, first.FeedID); job.DeadAt == nil || !job.Enabled {
		t.Errorf("job after the subscription: %+v; want still parked, enabled", job)
	}
}

// TestResubscribeRacesUnsubscribe: a user who unsubscribes from a feed and
// subscribes to it again at the same moment gets no deadlock: Subscribe
// takes the subscription's row before the job's, in Unsubscribe's order.
func TestResubscribeRacesUnsubscribe(t *testing.T) {
	t.Parallel()
	pool := testDB(t)
	ctx := ctxTimeout(t, 60*time.Second)
	app := newApp(t, pool, &Config{Logger: quietLogger()})
	u := user(t, app, "fickle")
	const url = "https://example.org/fickle"

	for i := range 30 {
		sub, err := app.Subscribe(ctx, u.ID, url)
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		wg.Go(func() { _, errs[0] = app.Unsubscribe(ctx, u.ID, sub.FeedID) })
		wg.Go(func() { _, errs[1] = app.Subscribe(ctx, u.ID, url) })
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if _, err := app.Unsubscribe(ctx, u.ID, sub.FeedID); err != nil && !errors.Is(err, ErrNotSubscribed) {
			t.Fatalf("round %d: %v", i, err)
		}
	}
}
