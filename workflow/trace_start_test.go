package workflow_test

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// A start whose idempotency key finds its run starts none: the span of
// that start names the run it found, not an ID that no run has.
func TestStartSpanOfAnExistingRunNamesThatRun(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	wf := workflow.Define("start_traced_once", func(t *workflow.Task, n int) (int, error) { return n, nil })
	cfg := testConfig(wf)
	cfg.TracerProvider = tp
	eng := newEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 30*time.Second)

	first, err := wf.Start(ctx, eng, 1, &workflow.StartOpts{IdempotencyKey: "once"})
	if err != nil {
		t.Fatal(err)
	}
	again, err := wf.Start(ctx, eng, 1, &workflow.StartOpts{IdempotencyKey: "once"})
	if err != nil {
		t.Fatal(err)
	}
	if !again.Existing || again.ID != first.ID {
		t.Fatalf("the second start returned run %s (existing %v), want run %s", again.ID, again.Existing, first.ID)
	}
	for _, s := range rec.Ended() {
		if s.Name() != "braid.run.start" {
			continue
		}
		if id := attr(s, "run.id"); id != first.ID {
			t.Errorf("a braid.run.start span names run %s; the only run is %s", id, first.ID)
		}
	}
}
