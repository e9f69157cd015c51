package workflow_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// A child started while its queue is paused gets its first turn inserted
// available, for River's fetch once the queue is resumed, rather than
// claimed: that turn's span still links to the parent's turn that spawned
// the child, as any child's first turn does.
func TestChildStartedInAPausedQueueLinksToItsSpawningTurn(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ctx := ctxTimeout(t, 60*time.Second)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	gateStarted, gate := make(chan struct{}), make(chan struct{})
	leaf := workflow.Define("paused_link_leaf", func(t *workflow.Task, n int) (int, error) { return n, nil })
	parent := workflow.Define("paused_link_parent", func(t *workflow.Task, n int) (int, error) {
		if t.Attempt() == 1 {
			select {
			case <-gate:
			default:
				close(gateStarted)
				<-gate
			}
		}
		return workflow.Go(t, "kid", leaf, n).Get()
	})
	cfg := testConfig(parent, leaf)
	cfg.TracerProvider = tp
	eng := startEngine(t, pool, cfg)
	client := eng.Queue().River()
	paused, cancelSub := client.Subscribe(river.EventKindQueuePaused)
	defer cancelSub()

	run, err := parent.Start(ctx, eng, 7, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-gateStarted
	if err := client.QueuePause(ctx, river.QueueDefault, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-paused:
	case <-ctx.Done():
		t.Fatal("River's producer never reported the queue paused")
	}
	close(gate)
	// The parent's turn starts the child and suspends; the child's turn
	// waits in the paused queue.
	waitFor(t, "the child's turn to wait in the paused queue", 10*time.Second, func() bool {
		return count(t, pool, `
			SELECT count(*) FROM river_job j JOIN braid_tasks t ON braid_turn_task(j.unique_key, j.args) = t.id
			 WHERE t.workflow = 'paused_link_leaf' AND j.state = 'available'`) == 1
	})
	if err := client.QueueResume(ctx, river.QueueDefault, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := run.Result(ctx); err != nil || got != 7 {
		t.Fatalf("run: %d, %v; want 7", got, err)
	}

	var spawning, kid sdktrace.ReadOnlySpan
	waitFor(t, "the first parent turn's and the child's spans to end", 10*time.Second, func() bool {
		spawning, kid = nil, nil
		for _, s := range rec.Ended() {
			switch {
			case s.Name() == "braid.task paused_link_parent" && attr(s, "turn.outcome") == "suspended":
				spawning = s
			case s.Name() == "braid.task paused_link_leaf":
				kid = s
			}
		}
		return spawning != nil && kid != nil
	})
	linked := false
	for _, l := range kid.Links() {
		for _, kv := range l.Attributes {
			if kv.Key == workflow.LinkAttribute && kv.Value.AsString() == "spawning turn" && l.SpanContext.SpanID() == spawning.SpanContext().SpanID() {
				linked = true
			}
		}
	}
	if !linked {
		t.Errorf("the child's first turn has links %v; want a %q link to the parent's turn %s", kid.Links(), "spawning turn", spawning.SpanContext().SpanID())
	}
}
