package workflow_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/braidflow/braid/leases"
	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

func TestMain(m *testing.M) {
	if os.Getenv(envWorker) != "" {
		os.Exit(workerMain())
	}
	testutil.Main(m)
}

// fast is a retry policy for tests: a fixed short pause.
var fast = queue.Backoff{Strategy: queue.Fixed, Base: 50 * time.Millisecond}

// testConfig is an engine configuration with short intervals.
func testConfig(defs ...workflow.Definition) *workflow.Config {
	return &workflow.Config{
		Workflows:         defs,
		DelayPollInterval: 200 * time.Millisecond,
		Leases:            &leases.Config{TTL: 2 * time.Second, Heartbeat: 300 * time.Millisecond},
		Queue: &queue.Config{
			Queues:      map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 50}},
			RetryPolicy: fast,
		},
		ResultPollInterval: 200 * time.Millisecond,
		Logger:             slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
}

// startEngine builds and starts an engine that stops when the test ends.
func startEngine(t *testing.T, pool *pgxpool.Pool, cfg *workflow.Config) *workflow.Engine {
	t.Helper()
	eng, err := workflow.NewEngine(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := eng.Stop(ctx); err != nil {
			t.Errorf("stopping engine: %v", err)
		}
	})
	return eng
}

// newEngine builds an engine that is not started: it can start runs, but
// works nothing.
func newEngine(t *testing.T, pool *pgxpool.Pool, cfg *workflow.Config) *workflow.Engine {
	t.Helper()
	eng, err := workflow.NewEngine(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Stop(context.Background()) })
	return eng
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func execSQL(t *testing.T, pool execer, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// ledger is a side-effect table: step bodies insert into it, so tests can
// count how often each body ran.
func ledger(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	execSQL(t, pool, `CREATE TABLE IF NOT EXISTS ledger (run_id text, step text, pid int, at timestamptz NOT NULL DEFAULT clock_timestamp())`)
}
