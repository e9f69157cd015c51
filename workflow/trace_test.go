package workflow_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

func TestOneTracePerRun(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	child := workflow.Define("traced_child", func(t *workflow.Task, n int) (int, error) {
		return workflow.Step(t, "double", func(ctx context.Context) (int, error) { return 2 * n, nil })
	})
	parent := workflow.Define("traced", func(t *workflow.Task, _ struct{}) (int, error) {
		if _, err := workflow.Step(t, "prepare", func(ctx context.Context) (int, error) { return 0, nil }); err != nil {
			return 0, err
		}
		if err := t.Delay("pause", 100*time.Millisecond); err != nil {
			return 0, err
		}
		outs, err := workflow.Map(t, "kids", child, []int{1, 2})
		if err != nil {
			return 0, err
		}
		return outs[0] + outs[1], nil
	})
	cfg := testConfig(parent, child)
	cfg.TracerProvider = tp
	eng := startEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 30*time.Second)
	// Started inside a caller's span, as a traced service starts runs.
	callerCtx, caller := tp.Tracer("caller").Start(ctx, "caller")
	run, err := parent.Start(callerCtx, eng, struct{}{}, nil)
	caller.End()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := run.Result(ctx); err != nil || out != 6 {
		t.Fatalf("%d, %v", out, err)
	}

	// The last turn's span ends just after the run's result is committed.
	waitFor(t, "every turn span to end", 10*time.Second, func() bool {
		n := 0
		for _, s := range rec.Ended() {
			if s.Name() == "braid.task traced" || s.Name() == "braid.task traced_child" {
				n++
			}
		}
		return n >= 5
	})
	spans := rec.Ended()
	var start sdktrace.ReadOnlySpan
	byID := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byID[s.SpanContext().SpanID().String()] = s
		if s.Name() == "braid.run.start" {
			start = s
		}
	}
	if start == nil {
		t.Fatal("no braid.run.start span")
	}
	traceID := start.SpanContext().TraceID()
	var turns, steps int
	linked := map[string]int{}
	for _, s := range spans {
		switch {
		case s.Name() == "braid.task traced" || s.Name() == "braid.task traced_child":
			turns++
			if s.SpanContext().TraceID() != traceID {
				t.Errorf("turn span %s is in trace %s, want the run's %s", s.Name(), s.SpanContext().TraceID(), traceID)
			}
			if s.Parent().SpanID() != start.SpanContext().SpanID() {
				t.Errorf("turn span %s has parent %s, want braid.run.start", s.Name(), s.Parent().SpanID())
			}
			for _, l := range s.Links() {
				if _, ok := byID[l.SpanContext.SpanID().String()]; !ok {
					t.Errorf("turn span %s links to an unknown span", s.Name())
				}
				for _, kv := range l.Attributes {
					if kv.Key == workflow.LinkAttribute {
						linked[kv.Value.AsString()]++
					}
				}
			}
		case len(s.Name()) > len("braid.step ") && s.Name()[:len("braid.step ")] == "braid.step ":
			steps++
			p, ok := byID[s.Parent().SpanID().String()]
			if !ok || p.Name()[:len("braid.task")] != "braid.task" {
				t.Errorf("step span %s is not a child of a turn span", s.Name())
			}
		}
	}
	// Parent: start, after delay, after join = 3 turns; children: 1 each.
	if turns != 5 {
		t.Errorf("%d turn spans, want 5", turns)
	}
	if steps != 3 {
		t.Errorf("%d step spans, want 3", steps)
	}
	// The parent's turns after the delay and after the join link to the
	// turn that suspended; each child's first turn to the parent's turn
	// that spawned it; the parent's turn after the join to the child that
	// released it.
	if diff := cmp.Diff(map[string]int{"suspended turn": 2, "spawning turn": 2, "releasing child": 1}, linked); diff != "" {
		t.Errorf("links of the turn spans by %s (-want +got):\n%s", workflow.LinkAttribute, diff)
	}
	// The links live on the tasks and the trace on the run: no turn job's
	// metadata, which River indexes for good, holds a value of its own,
	// not even the first turn's, inserted inside the caller's span.
	if n := count(t, pool, `SELECT count(*) FROM river_job WHERE kind = $1 AND metadata <> '{}'::jsonb`, workflow.TaskKind); n != 0 {
		t.Errorf("%d turn jobs have metadata, want none", n)
	}
}
