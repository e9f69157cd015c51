package scheduler

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/braidflow/braid/internal/testdb"
	"github.com/braidflow/braid/queue"
)

func TestMain(m *testing.M) {
	testdb.Main(m)
}

// quietLogger drops everything; tests assert on the database instead.
func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// insertOnlyQueue returns a queue that only inserts.
func insertOnlyQueue(t *testing.T, pool *pgxpool.Pool) *queue.Queue {
	t.Helper()
	q, err := queue.New(pool, &queue.Config{Logger: quietLogger()})
	if err != nil {
		t.Fatalf("queue.New: %v", err)
	}
	return q
}

// workingQueue starts a queue that works jobs with workers and middleware,
// stopped when the test ends.
func workingQueue(t *testing.T, pool *pgxpool.Pool, workers *river.Workers, middleware ...rivertype.Middleware) *queue.Queue {
	t.Helper()
	q, err := queue.New(pool, &queue.Config{
		Logger:              quietLogger(),
		Workers:             workers,
		Middleware:          middleware,
		FetchCooldown:       5 * time.Millisecond,
		FetchPollInterval:   50 * time.Millisecond,
		MaintenanceDisabled: true,
		River:               &river.Config{TestOnly: true},
	})
	if err != nil {
		t.Fatalf("queue.New: %v", err)
	}
	if err := q.Start(context.Background()); err != nil {
		t.Fatalf("starting the queue: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := q.Stop(ctx); err != nil {
			t.Errorf("stopping the queue: %v", err)
		}
	})
	return q
}

// newScheduler returns a Scheduler on pool with a quiet logger.
func newScheduler(t *testing.T, pool *pgxpool.Pool, cfg *Config) *Scheduler {
	t.Helper()
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.Logger == nil {
		c.Logger = quietLogger()
	}
	s, err := New(pool, &c)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

// tick runs one leader tick without a lease.
func tick(t *testing.T, s *Scheduler) {
	t.Helper()
	if err := s.tick(context.Background(), context.Background(), nil); err != nil {
		t.Fatalf("tick: %v", err)
	}
}

// exec runs SQL for test setup.
func exec(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// queryValue returns the single value of a query.
func queryValue[T any](t *testing.T, pool *pgxpool.Pool, sql string, args ...any) T {
	t.Helper()
	var v T
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

// waitFor polls cond until it holds, failing the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// firedJob is a River job inserted by a schedule.
type firedJob struct {
	ID          int64
	Kind        string
	Args        string
	Queue       string
	Priority    int
	MaxAttempts int
	Schedule    string
	Slot        string
	FirstSlot   string
}

func firedJobs(t *testing.T, pool *pgxpool.Pool, schedule string) []firedJob {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
SELECT id, kind, args::text, queue, priority, max_attempts, metadata->>'braid_schedule',
       metadata->>'braid_slot', metadata->>'braid_first_slot'
FROM river_job WHERE metadata->>'braid_schedule' = $1 ORDER BY metadata->>'braid_slot', id`, schedule)
	if err != nil {
		t.Fatalf("listing fired jobs: %v", err)
	}
	jobs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (firedJob, error) {
		var j firedJob
		var priority, maxAttempts int16
		err := row.Scan(&j.ID, &j.Kind, &j.Args, &j.Queue, &priority, &maxAttempts, &j.Schedule, &j.Slot, &j.FirstSlot)
		j.Priority, j.MaxAttempts = int(priority), int(maxAttempts)
		return j, err
	})
	if err != nil {
		t.Fatalf("listing fired jobs: %v", err)
	}
	return jobs
}

func slotString(t time.Time) string { return t.UTC().Format(slotFormat) }

// testWorker works pingArgs jobs with a function the test sets.
type pingArgs struct {
	N int `json:"n"`
}

func (pingArgs) Kind() string { return "ping" }

type pingWorker struct {
	river.WorkerDefaults[pingArgs]
	fn func(ctx context.Context, job *river.Job[pingArgs]) error
}

func (w *pingWorker) Work(ctx context.Context, job *river.Job[pingArgs]) error { return w.fn(ctx, job) }

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
