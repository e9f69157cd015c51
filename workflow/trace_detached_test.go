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

// A detached child is a run of its own, in a trace of its own, linked to
// the turn that started it: a detached DAG as much as a detached function,
// whose first turns (the DAG's first nodes') link to the spawning turn.
func TestDetachedDAGChildLinksToItsSpawningTurn(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ctx := ctxTimeout(t, 60*time.Second)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	leaf := workflow.Define("detached_trace_leaf", func(t *workflow.Task, _ struct{}) (string, error) { return t.Key(), nil })
	dag := workflow.DAG[struct{}]("detached_trace_dag",
		workflow.Node("a", leaf),
		workflow.Node("b", leaf),
		workflow.Node("c", leaf, workflow.After("a", "b")),
	)
	parent := workflow.Define("detached_trace_parent", func(t *workflow.Task, _ struct{}) (string, error) {
		f := workflow.Go(t, "side", dag, struct{}{}, workflow.Detached())
		return f.RunID(), nil
	})
	cfg := testConfig(parent, dag, leaf)
	cfg.TracerProvider = tp
	eng := startEngine(t, pool, cfg)

	run, err := parent.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := run.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Wait(ctx, id); err != nil {
		t.Fatalf("the detached DAG: %v", err)
	}

	var spawning sdktrace.ReadOnlySpan
	var first []sdktrace.ReadOnlySpan
	waitFor(t, "the parent's and the DAG's first nodes' spans to end", 10*time.Second, func() bool {
		spawning, first = nil, nil
		for _, s := range rec.Ended() {
			switch {
			case s.Name() == "braid.task detached_trace_parent":
				spawning = s
			case s.Name() == "braid.task detached_trace_leaf" && (attr(s, "dag.node") == "a" || attr(s, "dag.node") == "b"):
				first = append(first, s)
			}
		}
		return spawning != nil && len(first) == 2
	})
	for _, s := range first {
		if attr(s, "run.id") != id {
			t.Fatalf("node %s's turn is of run %s, want the detached run %s", attr(s, "dag.node"), attr(s, "run.id"), id)
		}
		linked := false
		for _, l := range s.Links() {
			for _, kv := range l.Attributes {
				if kv.Key == workflow.LinkAttribute && kv.Value.AsString() == "spawning turn" && l.SpanContext.SpanID() == spawning.SpanContext().SpanID() {
					linked = true
				}
			}
		}
		if !linked {
			t.Errorf("node %s's first turn has links %v; want a %q link to the turn that started the detached DAG", attr(s, "dag.node"), s.Links(), "spawning turn")
		}
	}
}
