package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/braidflow/braid/internal/testdb"
	"github.com/braidflow/braid/queue"
)

// TestRecurringSpanNamesTheEntity checks that the river.job span of each
// run of a recurring job names its kind, its entity key and its row, so
// that the runs of one entity can be told apart in a trace viewer.
func TestRecurringSpanNamesTheEntity(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.DB(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	mw, err := NewRecurringMiddleware(pool, &RecurringConfig{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &pingWorker{fn: func(context.Context, *river.Job[pingArgs]) error { return nil }})
	q, err := queue.New(pool, &queue.Config{
		Logger:              quietLogger(),
		Workers:             workers,
		Middleware:          []rivertype.Middleware{mw},
		TracerProvider:      tp,
		FetchCooldown:       5 * time.Millisecond,
		FetchPollInterval:   50 * time.Millisecond,
		MaintenanceDisabled: true,
		River:               &river.Config{TestOnly: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := q.Stop(sctx); err != nil {
			t.Errorf("stopping the queue: %v", err)
		}
	})
	s := newScheduler(t, pool, &Config{Queue: q})

	ids := map[string]int64{}
	for _, key := range []string{"feed-1", "feed-2"} {
		if _, err := s.Ensure(ctx, "ping", key, pingArgs{N: 1}, time.Time{}); err != nil {
			t.Fatal(err)
		}
		r, err := s.GetRecurring(ctx, "ping", key)
		if err != nil {
			t.Fatal(err)
		}
		ids[key] = r.ID
	}
	exec(t, pool, `UPDATE braid_recurring SET next_run_at = now()`)
	tick(t, s)
	waitFor(t, 10*time.Second, "both runs to be recorded", func() bool {
		return queryValue[int](t, pool, `SELECT count(*) FROM braid_recurring WHERE last_run_at IS NOT NULL AND running_since IS NULL`) == 2
	})

	got := map[string]map[string]string{}
	waitFor(t, 10*time.Second, "both river.job spans to end", func() bool {
		got = map[string]map[string]string{}
		for _, span := range rec.Ended() {
			if span.Name() != "river.job ping" {
				continue
			}
			attrs := map[string]string{}
			for _, kv := range span.Attributes() {
				if k := string(kv.Key); k == AttributeRecurringKind || k == AttributeRecurringKey || k == AttributeRecurringID {
					attrs[k] = kv.Value.Emit()
				}
			}
			got[attrs[AttributeRecurringKey]] = attrs
		}
		return len(got) == 2
	})
	want := map[string]map[string]string{}
	for key, id := range ids {
		want[key] = map[string]string{
			AttributeRecurringKind: "ping",
			AttributeRecurringKey:  key,
			AttributeRecurringID:   attribute.Int64Value(id).Emit(),
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("recurring attributes of the river.job spans by key (-want +got):\n%s", diff)
	}
}
