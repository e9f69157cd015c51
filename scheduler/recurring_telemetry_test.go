package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/braidflow/braid/internal/testdb"
	"github.com/braidflow/braid/queue"
)

// A recurring job's handler that panics fails its run, which the row
// records, and its attempt is a panic to the queue's telemetry as any
// job's: the span's outcome is "panicked", and the failure is counted with
// error.type "panic".
func TestRecurringPanicIsAPanicInTelemetry(t *testing.T) {
	t.Parallel()
	pool := testdb.DB(t)
	ctx := context.Background()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })

	mw, err := NewRecurringMiddleware(pool, &RecurringConfig{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &pingWorker{fn: func(context.Context, *river.Job[pingArgs]) error { panic("handler panicked") }})
	q, err := queue.New(pool, &queue.Config{
		Logger:              quietLogger(),
		Workers:             workers,
		Middleware:          []rivertype.Middleware{mw},
		FetchCooldown:       5 * time.Millisecond,
		FetchPollInterval:   50 * time.Millisecond,
		MaintenanceDisabled: true,
		TracerProvider:      tp,
		MeterProvider:       mp,
		River:               &river.Config{TestOnly: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = q.Stop(ctx)
	})
	s := newScheduler(t, pool, &Config{Queue: q})
	if _, err := s.Ensure(ctx, "ping", "k", nil, time.Time{}); err != nil {
		t.Fatal(err)
	}
	exec(t, pool, `UPDATE braid_recurring SET next_run_at = now() WHERE kind = 'ping' AND key = 'k'`)
	tick(t, s)
	var span sdktrace.ReadOnlySpan
	waitFor(t, 10*time.Second, "the run's span", func() bool {
		for _, sp := range spans.Ended() {
			if sp.Name() == "river.job ping" {
				span = sp
			}
		}
		return span != nil
	})
	r, err := s.GetRecurring(ctx, "ping", "k")
	if err != nil {
		t.Fatal(err)
	}
	if r.ConsecutiveFailures != 1 {
		t.Fatalf("the row counts %d failures, want 1", r.ConsecutiveFailures)
	}
	outcome := ""
	for _, kv := range span.Attributes() {
		if kv.Key == "outcome" {
			outcome = kv.Value.AsString()
		}
	}
	if outcome != "panicked" {
		t.Errorf("the attempt's span has outcome %q, want %q", outcome, "panicked")
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	byType := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != queue.MetricFailures {
				continue
			}
			for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
				v, _ := p.Attributes.Value(attribute.Key("error.type"))
				byType[v.AsString()] += p.Value
			}
		}
	}
	if byType["panic"] != 1 || len(byType) != 1 {
		t.Errorf("%s by error.type: %v; want one panic", queue.MetricFailures, byType)
	}
}
