package workflow_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// TestDAGTraceOfADiamond reads the trace of a diamond a → b, c → d: one
// trace for the whole run; every node's turn span names its DAG and node;
// b's and c's turns link to a's turn, which released them, and d's to the
// turn of c, which finished last and so released it.
func TestDAGTraceOfADiamond(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ctx := ctxTimeout(t, 60*time.Second)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	// c's step waits until b has completed, so that c finishes last.
	mid := workflow.Define("dag_trace_mid", func(t *workflow.Task, _ struct{}) (string, error) {
		return workflow.Step(t, "work", func(ctx context.Context) (string, error) {
			for t.Key() == "c" {
				var status string
				if err := pool.QueryRow(ctx, `
					SELECT status FROM braid_tasks WHERE run_id = $1 AND key = 'b' AND dependents IS NOT NULL`, t.RunID()).Scan(&status); err != nil {
					return "", err
				}
				if status == "completed" {
					break
				}
				select {
				case <-ctx.Done():
					return "", ctx.Err()
				case <-time.After(20 * time.Millisecond):
				}
			}
			return t.Key(), nil
		})
	})
	first := workflow.Define("dag_trace_first", func(t *workflow.Task, _ struct{}) (string, error) {
		return workflow.Step(t, "work", func(ctx context.Context) (string, error) { return "a", nil })
	})
	a := workflow.Node("a", first)
	b := workflow.Node("b", mid, workflow.After("a"))
	c := workflow.Node("c", mid, workflow.After("a"))
	join := workflow.Define("dag_trace_join", func(t *workflow.Task, _ struct{}) (string, error) {
		bv, err := b.Output(t)
		if err != nil {
			return "", err
		}
		cv, err := c.Output(t)
		if err != nil {
			return "", err
		}
		return workflow.Step(t, "work", func(ctx context.Context) (string, error) { return bv + "+" + cv, nil })
	})
	d := workflow.Node("d", join, workflow.After("b", "c"))
	dag := workflow.DAG[struct{}]("dag_traced", a, b, c, d)
	cfg := testConfig(dag, first, mid, join)
	cfg.TracerProvider = tp
	eng := startEngine(t, pool, cfg)

	run, err := dag.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := run.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := d.From(res); err != nil || got != "b+c" {
		t.Fatalf("d = %q, %v; want b+c", got, err)
	}

	// One turn span per node, and the root's one turn once every node is
	// final; the root's span ends just after the run's result commits.
	var spans []sdktrace.ReadOnlySpan
	waitFor(t, "every turn span to end", 20*time.Second, func() bool {
		spans = rec.Ended()
		n := 0
		for _, s := range spans {
			if strings.HasPrefix(s.Name(), "braid.task ") {
				n++
			}
		}
		return n >= 5
	})

	var start sdktrace.ReadOnlySpan
	nodeTurn := map[string]sdktrace.ReadOnlySpan{}
	var rootTurns []sdktrace.ReadOnlySpan
	label := map[trace.SpanID]string{}
	for _, s := range spans {
		switch {
		case s.Name() == "braid.run.start":
			start = s
		case s.Name() == "braid.task dag_traced":
			rootTurns = append(rootTurns, s)
			label[s.SpanContext().SpanID()] = "root"
			if got := attr(s, "dag.node"); got != "" {
				t.Errorf("the root's turn span has dag.node %q; only nodes have one", got)
			}
		case strings.HasPrefix(s.Name(), "braid.task "):
			node := attr(s, "dag.node")
			if _, dup := nodeTurn[node]; dup {
				t.Errorf("node %q has more than one turn span", node)
			}
			nodeTurn[node] = s
			label[s.SpanContext().SpanID()] = node
		}
	}
	if start == nil {
		t.Fatal("no braid.run.start span")
	}
	if len(rootTurns) != 1 {
		t.Errorf("%d turn spans of the root, want 1", len(rootTurns))
	}

	// Every node's turn span is named for its workflow and carries the
	// DAG's name and the node's.
	wantWorkflow := map[string]string{"a": "dag_trace_first", "b": "dag_trace_mid", "c": "dag_trace_mid", "d": "dag_trace_join"}
	if len(nodeTurn) != len(wantWorkflow) {
		var got []string
		for node := range nodeTurn {
			got = append(got, node)
		}
		slices.Sort(got)
		t.Fatalf("turn spans of nodes %q, want a, b, c, d", got)
	}
	for node, wf := range wantWorkflow {
		s, ok := nodeTurn[node]
		if !ok {
			t.Fatalf("no turn span with dag.node %q", node)
		}
		if s.Name() != "braid.task "+wf {
			t.Errorf("node %s's turn span is %q, want %q", node, s.Name(), "braid.task "+wf)
		}
		if got := attr(s, "dag"); got != "dag_traced" {
			t.Errorf("node %s's turn span has dag %q, want dag_traced", node, got)
		}
		if got := attr(s, "task.key"); got != node {
			t.Errorf("node %s's turn span has task.key %q", node, got)
		}
	}

	// Every span of the run is in the run's trace: those that name the
	// run, and the spans under them (the steps).
	traceID := start.SpanContext().TraceID()
	ofRun := map[trace.SpanID]bool{}
	for grew := true; grew; {
		grew = false
		for _, s := range spans {
			id := s.SpanContext().SpanID()
			if !ofRun[id] && (attr(s, "run.id") == run.ID || ofRun[s.Parent().SpanID()]) {
				ofRun[id], grew = true, true
			}
		}
	}
	steps := 0
	for _, s := range spans {
		if !ofRun[s.SpanContext().SpanID()] {
			continue
		}
		if s.SpanContext().TraceID() != traceID {
			t.Errorf("span %s is in trace %s, want the run's %s", s.Name(), s.SpanContext().TraceID(), traceID)
		}
		if s.Name() == "braid.step work" {
			steps++
		}
	}
	if !ofRun[start.SpanContext().SpanID()] {
		t.Errorf("braid.run.start does not name the run %s", run.ID)
	}
	if steps != 4 {
		t.Errorf("%d step spans in the run, want 4", steps)
	}

	// c finished after b, so c's finish released d.
	if n := count(t, pool, `
		SELECT count(*) FROM braid_tasks b JOIN braid_tasks c ON c.parent_task_id = b.parent_task_id AND c.key = 'c'
		 WHERE b.run_id = $1 AND b.key = 'b' AND c.finished_at > b.finished_at`, run.ID); n != 1 {
		t.Fatal("c did not finish after b")
	}

	// Links: b's and c's turns to a's, which released them; d's to c's;
	// the root's turn to d's, the last node to finish.
	want := map[string][]string{
		"a":    nil,
		"b":    {"releasing node -> a"},
		"c":    {"releasing node -> a"},
		"d":    {"releasing node -> c"},
		"root": {"releasing child -> d"},
	}
	got := map[string][]string{}
	for _, s := range append(slices.Clone(rootTurns), nodeTurn["a"], nodeTurn["b"], nodeTurn["c"], nodeTurn["d"]) {
		var links []string
		for _, l := range s.Links() {
			kind := ""
			for _, kv := range l.Attributes {
				if kv.Key == workflow.LinkAttribute {
					kind = kv.Value.AsString()
				}
			}
			target, ok := label[l.SpanContext.SpanID()]
			if !ok {
				target = "unknown span " + l.SpanContext.SpanID().String()
			}
			if l.SpanContext.TraceID() != traceID {
				t.Errorf("turn %s links to a span of trace %s, want the run's", label[s.SpanContext().SpanID()], l.SpanContext.TraceID())
			}
			links = append(links, kind+" -> "+target)
		}
		slices.Sort(links)
		got[label[s.SpanContext().SpanID()]] = links
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("links of the turn spans (-want +got):\n%s", diff)
	}
}
