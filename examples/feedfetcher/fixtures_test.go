package feedfetcher

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/trace"

	"github.com/braidflow/braid/examples/feedfetcher/feedserver"
	"github.com/braidflow/braid/leases"
	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/scheduler"
	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// quietLogger drops everything; the tests assert on the database.
func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// testDB returns a pool on a fresh database with the feed reader's schema.
func testDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := testutil.DB(t)
	if err := Migrate(ctxTimeout(t, 30*time.Second), pool); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return pool
}

// ctxTimeout returns a context that ends after d or with the test.
func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// testConfig is a configuration with short timings: fetches 300 ms to 1 s
// apart, a 300 ms digest window, fast polling.
func testConfig(tp trace.TracerProvider) *Config {
	return &Config{
		Fetcher: FetcherConfig{
			MinInterval: 300 * time.Millisecond,
			MaxInterval: time.Second,
			Timeout:     2 * time.Second,
		},
		DigestWindow:     300 * time.Millisecond,
		ArticleRetryBase: 100 * time.Millisecond,
		Engine: &workflow.Config{
			DelayPollInterval:  100 * time.Millisecond,
			ResultPollInterval: 100 * time.Millisecond,
			Leases:             &leases.Config{TTL: 2 * time.Second, Heartbeat: 300 * time.Millisecond},
			Queue: &queue.Config{
				Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 20}},
				FetchPollInterval: 50 * time.Millisecond,
				RetryPolicy:       queue.Backoff{Strategy: queue.Fixed, Base: 100 * time.Millisecond},
			},
			TracerProvider: tp,
			Logger:         quietLogger(),
		},
		Scheduler: &scheduler.Config{PollInterval: 100 * time.Millisecond},
		Logger:    quietLogger(),
	}
}

// newApp builds an App on pool that is not started.
func newApp(t *testing.T, pool *pgxpool.Pool, cfg *Config) *App {
	t.Helper()
	app, err := New(pool, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(app.fetcher.CloseIdleConnections)
	return app
}

// startApp builds and starts an App, stopped when the test ends.
func startApp(t *testing.T, pool *pgxpool.Pool, cfg *Config) *App {
	t.Helper()
	app := newApp(t, pool, cfg)
	if err := app.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := app.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return app
}

// startServer starts a feed server that publishes only on demand.
func startServer(t *testing.T) *feedserver.Server {
	t.Helper()
	srv, err := feedserver.Start(context.Background(), feedserver.Config{
		PublishInterval: -1,
		SlowDelay:       100 * time.Millisecond,
		Logger:          quietLogger(),
	})
	if err != nil {
		t.Fatalf("feedserver.Start: %v", err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

// user creates a user.
func user(t *testing.T, app *App, name string) *User {
	t.Helper()
	u, err := app.EnsureUser(context.Background(), name, name+"@example.org")
	if err != nil {
		t.Fatalf("EnsureUser(%q): %v", name, err)
	}
	return u
}

// eventually polls cond every 50 ms until it returns true, failing the
// test with what's description after timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
