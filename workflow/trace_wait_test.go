package workflow_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/braidflow/braid/internal/telemetry"
	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// TestTraceWaitsAndLinks reads the trace of a run with a delay, a fan-out
// and another delay as a person would in a trace viewer: every wait is a
// span of its own under the run, covering the gap between the turn that
// suspended and the turn that resumed; each child's turn links to the turn
// that spawned it; the turn after the join links to the child that
// released it; and the resource names the host and the process.
func TestTraceWaitsAndLinks(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ctx := ctxTimeout(t, 60*time.Second)
	res, err := telemetry.Resource(ctx, telemetry.Config{ServiceName: "braid-trace-test"})
	if err != nil {
		t.Fatal(err)
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithResource(res))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	const pause, cooldown = 200 * time.Millisecond, 50 * time.Millisecond
	child := workflow.Define("wait_traced_child", func(t *workflow.Task, n int) (int, error) {
		return workflow.Step(t, "square", func(ctx context.Context) (int, error) { return n * n, nil })
	})
	parent := workflow.Define("wait_traced", func(t *workflow.Task, _ struct{}) (int, error) {
		if _, err := workflow.Step(t, "prepare", func(ctx context.Context) (int, error) { return 0, nil }); err != nil {
			return 0, err
		}
		if err := t.Delay("pause", pause); err != nil {
			return 0, err
		}
		outs, err := workflow.Map(t, "kids", child, []int{1, 2, 3})
		if err != nil {
			return 0, err
		}
		if err := t.Delay("cooldown", cooldown); err != nil {
			return 0, err
		}
		return outs[0] + outs[1] + outs[2], nil
	})
	cfg := testConfig(parent, child)
	cfg.TracerProvider = tp
	eng := startEngine(t, pool, cfg)
	run, err := parent.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := run.Result(ctx); err != nil || out != 14 {
		t.Fatalf("result %d, %v; want 14", out, err)
	}

	// The parent takes four turns (to the pause, to the join, to the
	// cooldown, to the end), each child one; three waits lie between the
	// parent's turns.
	const parentTurns, childTurns, waitSpans = 4, 3, 3
	var spans []sdktrace.ReadOnlySpan
	waitFor(t, "every turn and wait span to end", 20*time.Second, func() bool {
		spans = rec.Ended()
		var p, c, w int
		for _, s := range spans {
			switch {
			case s.Name() == "braid.task wait_traced":
				p++
			case s.Name() == "braid.task wait_traced_child":
				c++
			case strings.HasPrefix(s.Name(), "braid.wait "):
				w++
			}
		}
		return p >= parentTurns && c >= childTurns && w >= waitSpans
	})

	var start sdktrace.ReadOnlySpan
	var parentTurn, childTurn, waits []sdktrace.ReadOnlySpan
	for _, s := range spans {
		switch {
		case s.Name() == "braid.run.start":
			start = s
		case s.Name() == "braid.task wait_traced":
			parentTurn = append(parentTurn, s)
		case s.Name() == "braid.task wait_traced_child":
			childTurn = append(childTurn, s)
		case strings.HasPrefix(s.Name(), "braid.wait "):
			waits = append(waits, s)
		}
	}
	if start == nil {
		t.Fatal("no braid.run.start span")
	}
	if len(parentTurn) != parentTurns || len(childTurn) != childTurns {
		t.Fatalf("%d parent and %d child turn spans, want %d and %d", len(parentTurn), len(childTurn), parentTurns, childTurns)
	}
	byStart := func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) }
	slices.SortFunc(parentTurn, byStart)
	slices.SortFunc(waits, byStart)
	toPause, toJoin, toCooldown, toEnd := parentTurn[0], parentTurn[1], parentTurn[2], parentTurn[3]
	taskID := attr(toPause, "task.id")

	// Three waits, one span each, in order, all children of the run's
	// braid.run.start span in its trace, naming the run and the task.
	var names []string
	for _, w := range waits {
		names = append(names, w.Name())
		if w.SpanContext().TraceID() != start.SpanContext().TraceID() || w.Parent().SpanID() != start.SpanContext().SpanID() {
			t.Errorf("wait span %s is not a child of braid.run.start", w.Name())
		}
		if got := attr(w, "run.id"); got != run.ID {
			t.Errorf("wait span %s has run.id %q, want %q", w.Name(), got, run.ID)
		}
		if got := attr(w, "task.id"); got != taskID {
			t.Errorf("wait span %s has task.id %q, want the parent's %q", w.Name(), got, taskID)
		}
		if got := attr(w, "workflow"); got != "wait_traced" {
			t.Errorf("wait span %s has workflow %q, want wait_traced", w.Name(), got)
		}
	}
	if diff := cmp.Diff([]string{"braid.wait delay pause", "braid.wait children", "braid.wait delay cooldown"}, names); diff != "" {
		t.Fatalf("wait spans (-want +got):\n%s", diff)
	}
	waitPause, waitJoin, waitCooldown := waits[0], waits[1], waits[2]

	// Each wait covers the gap between the turn that suspended and the
	// turn that resumed: it starts as the suspending turn hands in its
	// outcome, and ends before the next turn starts.
	for _, c := range []struct {
		wait, before, after sdktrace.ReadOnlySpan
		atLeast             time.Duration
	}{
		{waitPause, toPause, toJoin, pause},
		{waitJoin, toJoin, toCooldown, 0},
		{waitCooldown, toCooldown, toEnd, cooldown},
	} {
		w := c.wait
		if w.StartTime().Before(c.before.StartTime()) || w.StartTime().After(c.before.EndTime()) {
			t.Errorf("%s starts at %s, outside the suspending turn's %s..%s", w.Name(), w.StartTime(), c.before.StartTime(), c.before.EndTime())
		}
		if w.EndTime().After(c.after.StartTime()) {
			t.Errorf("%s ends at %s, after the resumed turn started at %s", w.Name(), w.EndTime(), c.after.StartTime())
		}
		if d := w.EndTime().Sub(w.StartTime()); d < c.atLeast {
			t.Errorf("%s lasts %s, less than its delay of %s", w.Name(), d, c.atLeast)
		}
	}
	if got := attr(waitPause, "delay"); got != "pause" {
		t.Errorf("the delay's wait span names delay %q, want pause", got)
	}
	if got := attr(waitJoin, "children"); got != "3" {
		t.Errorf("the join's wait span counts %s children, want 3", got)
	}
	for _, c := range childTurn {
		if waitJoin.EndTime().Before(c.StartTime()) {
			t.Errorf("the join's wait ends at %s, before a child's turn started at %s", waitJoin.EndTime(), c.StartTime())
		}
	}

	// Links: every parent turn after the first links to the turn that
	// suspended; each child's turn to the parent's turn that spawned it;
	// the turn after the join also to the child that released it.
	want := map[string][]string{
		"toPause":    nil,
		"toJoin":     {"suspended turn -> toPause"},
		"toCooldown": {"releasing child -> child", "suspended turn -> toJoin"},
		"toEnd":      {"suspended turn -> toCooldown"},
		"child":      {"spawning turn -> toJoin"},
	}
	label := map[trace.SpanID]string{
		toPause.SpanContext().SpanID(): "toPause", toJoin.SpanContext().SpanID(): "toJoin",
		toCooldown.SpanContext().SpanID(): "toCooldown", toEnd.SpanContext().SpanID(): "toEnd",
	}
	for _, c := range childTurn {
		label[c.SpanContext().SpanID()] = "child"
	}
	for _, s := range append(slices.Clone(parentTurn), childTurn...) {
		var got []string
		for _, l := range s.Links() {
			kind := ""
			for _, kv := range l.Attributes {
				if kv.Key == workflow.LinkAttribute {
					kind = kv.Value.AsString()
				} else {
					t.Errorf("a link of %s carries attribute %s; links name their kind under %s only", label[s.SpanContext().SpanID()], kv.Key, workflow.LinkAttribute)
				}
			}
			target, ok := label[l.SpanContext.SpanID()]
			if !ok {
				target = "unknown span " + l.SpanContext.SpanID().String()
			}
			got = append(got, kind+" -> "+target)
		}
		slices.Sort(got)
		if diff := cmp.Diff(want[label[s.SpanContext().SpanID()]], got); diff != "" {
			t.Errorf("links of turn %s (-want +got):\n%s", label[s.SpanContext().SpanID()], diff)
		}
	}

	// The resource names the host and the process, so that a trace viewer
	// tells the processes of a run apart.
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range append(slices.Clone(waits), start, toJoin, childTurn[0]) {
		set := s.Resource().Set()
		if v, _ := set.Value("host.name"); v.AsString() != host {
			t.Errorf("span %s: resource host.name = %q, want %q", s.Name(), v.AsString(), host)
		}
		if v, _ := set.Value("process.pid"); v.AsInt64() != int64(os.Getpid()) {
			t.Errorf("span %s: resource process.pid = %d, want %d", s.Name(), v.AsInt64(), os.Getpid())
		}
		if v, _ := set.Value("service.instance.id"); v.AsString() == "" {
			t.Errorf("span %s: the resource has no service.instance.id", s.Name())
		}
		if v, _ := set.Value("service.name"); v.AsString() != "braid-trace-test" {
			t.Errorf("span %s: resource service.name = %q, want braid-trace-test", s.Name(), v.AsString())
		}
	}
}

// attr returns the value of the span's attribute key as text, or "".
func attr(s sdktrace.ReadOnlySpan, key attribute.Key) string {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value.Emit()
		}
	}
	return ""
}
