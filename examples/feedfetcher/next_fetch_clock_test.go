package feedfetcher

import (
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace/noop"
)

// TestNextFetchOnTheDatabaseClock: the next fetch a fetch chooses is on
// the database's clock (braid_now()), which decides when the feed's job is
// due, not on the worker's. Here the database's clock runs two days ahead
// of the worker's: a next fetch an hour after the worker's time would be
// long past, and the feed would be fetched again and again.
func TestNextFetchOnTheDatabaseClock(t *testing.T) {
	t.Parallel()
	pool := testDB(t)
	ctx := ctxTimeout(t, 30*time.Second)
	for _, sql := range []string{
		`CREATE OR REPLACE FUNCTION braid_now() RETURNS timestamptz LANGUAGE sql STABLE AS $$ SELECT now() + interval '48 hours' $$`,
		`CREATE OR REPLACE FUNCTION braid_clock() RETURNS timestamptz LANGUAGE sql VOLATILE AS $$ SELECT clock_timestamp() + interval '48 hours' $$`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	srv := startServer(t)
	cfg := testConfig(noop.NewTracerProvider())
	cfg.Fetcher.MinInterval, cfg.Fetcher.MaxInterval = time.Hour, time.Hour
	app := startApp(t, pool, cfg)
	sub, err := app.Subscribe(ctx, user(t, app, "alice").ID, srv.FeedURL("cycling-dispatch"))
	if err != nil {
		t.Fatal(err)
	}
	var ahead time.Duration
	eventually(t, 20*time.Second, "the first fetch to be recorded", func() bool {
		var done bool
		err := pool.QueryRow(ctx, `SELECT running_since IS NULL AND last_run_at IS NOT NULL, next_run_at - braid_now()
FROM braid_recurring WHERE kind = $1 AND key = $2`, FetchFeedKind, feedKey(sub.FeedID)).Scan(&done, &ahead)
		if err != nil {
			t.Fatal(err)
		}
		return done
	})
	if ahead < 30*time.Minute {
		t.Errorf("after a fetch the feed's job is due in %s on the database's clock, want about the fetch interval, 1h", ahead)
	}
	if m := mirror(t, pool, sub.FeedID); m == nil || m.Before(time.Now().Add(48*time.Hour)) {
		t.Errorf("next_fetch_at = %v, want it an hour after the database's time", m)
	}
}
