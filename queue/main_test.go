package queue

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/braidflow/braid/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// waitTimeout bounds every wait in these tests. Waits end as soon as their
// condition holds; the bound only turns a hang into a failure.
const waitTimeout = 30 * time.Second

// testConfig fills in what every test Queue shares: River's test mode (no
// start-up jitter), quiet logs, no global telemetry.
func testConfig(cfg *Config) *Config {
	c := Config{}
	if cfg != nil {
		c = *cfg
	}
	if c.River == nil {
		c.River = &river.Config{TestOnly: true}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.TracerProvider == nil {
		c.TracerProvider = tracenoop.NewTracerProvider()
	}
	if c.MeterProvider == nil {
		c.MeterProvider = noop.NewMeterProvider()
	}
	return &c
}

// newQueue builds a Queue with testConfig defaults.
func newQueue(t *testing.T, pool *pgxpool.Pool, cfg *Config) *Queue {
	t.Helper()
	q, err := New(pool, testConfig(cfg))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return q
}

// startQueue builds and starts a Queue, stopped when the test ends.
func startQueue(t *testing.T, pool *pgxpool.Pool, cfg *Config) *Queue {
	t.Helper()
	q := newQueue(t, pool, cfg)
	if err := q.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if err := q.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return q
}

// eventually polls cond until it reports true, failing the test after
// waitTimeout.
func eventually(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitState waits until job id is in one of states and returns it.
func waitState(t *testing.T, q *Queue, id int64, states ...rivertype.JobState) *rivertype.JobRow {
	t.Helper()
	var job *rivertype.JobRow
	eventually(t, "job to reach "+stateList(states), func() (bool, error) {
		var err error
		job, err = q.River().JobGet(context.Background(), id)
		if err != nil {
			return false, err
		}
		for _, s := range states {
			if job.State == s {
				return true, nil
			}
		}
		return false, nil
	})
	return job
}

func stateList(states []rivertype.JobState) string {
	s := ""
	for i, st := range states {
		if i > 0 {
			s += "|"
		}
		s += string(st)
	}
	return s
}

// recv receives from ch, failing the test after waitTimeout.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("gave up waiting for %s", what)
		var zero T
		return zero
	}
}
