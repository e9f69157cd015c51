package workflow_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// TestInspectShowsOutputsTurnsAndWaits runs a workflow with a step, a
// delay, a fan-out whose child fails its first attempt, and a step that
// panics, then checks what Inspect shows of each.
func TestInspectShowsOutputsTurnsAndWaits(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	var childTries atomic.Int32
	child := workflow.Define("insp_child", func(t *workflow.Task, n int) (int, error) {
		if n == 2 && childTries.Add(1) == 1 {
			return 0, errors.New("flaky child: first attempt fails")
		}
		return n * 10, nil
	}, workflow.WithMaxAttempts(2), workflow.WithRetry(fast))
	parent := workflow.Define("insp_parent", func(t *workflow.Task, in int) (int, error) {
		doubled, err := workflow.Step(t, "double", func(ctx context.Context) (int, error) { return in * 2, nil })
		if err != nil {
			return 0, err
		}
		if err := t.Delay("nap", 300*time.Millisecond); err != nil {
			return 0, err
		}
		outs, err := workflow.Map(t, "kids", child, []int{1, 2})
		if err != nil {
			return 0, err
		}
		// A failed step with its own retry policy is recorded; the
		// workflow goes on without it.
		_, stepErr := workflow.Step(t, "explode", func(ctx context.Context) (int, error) {
			var m map[string]int
			m["boom"] = 1
			return 0, nil
		}, workflow.Retry{MaxAttempts: 1, Backoff: fast})
		if stepErr == nil {
			return 0, errors.New("the exploding step succeeded")
		}
		return doubled + outs[0] + outs[1], nil
	})
	eng := startEngine(t, pool, testConfig(child, parent))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := parent.Start(ctx, eng, 5, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := run.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if out != 40 {
		t.Fatalf("output %d, want 40", out)
	}
	// River records a turn's completion just after the turn returns.
	waitFor(t, "every turn job to be finalized", 10*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM river_job WHERE kind = 'braid_task' AND finalized_at IS NULL`) == 0
	})
	info, err := workflow.Inspect(ctx, pool, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Tasks) != 3 {
		t.Fatalf("%d tasks, want 3", len(info.Tasks))
	}
	root := info.Tasks[0]
	if string(root.Input) != "5" || string(root.Output) != "40" || root.MaxAttempts < 1 {
		t.Errorf("root input %s, output %s, max attempts %d; want 5, 40", root.Input, root.Output, root.MaxAttempts)
	}

	// Steps: outputs, the delay's times, the panic's full stack.
	type step struct{ Name, Kind, Status, Output string }
	var steps []step
	for _, s := range root.Steps {
		steps = append(steps, step{s.Name, s.Kind, s.Status, string(s.Output)})
	}
	want := []step{{"double", "step", "completed", "10"}, {"nap", "delay", "fired", ""}, {"explode", "step", "failed", ""}}
	if diff := cmp.Diff(want, steps); diff != "" {
		t.Fatalf("steps (-want +got):\n%s", diff)
	}
	nap, explode := root.Steps[1], root.Steps[2]
	if nap.ResumeAt == nil || nap.ResumeAt.Sub(nap.CreatedAt) != 300*time.Millisecond || nap.FinishedAt == nil || nap.FinishedAt.Before(*nap.ResumeAt) {
		t.Errorf("delay: created %s, resume_at %v, finished %v; want resume_at 300ms after creation and finished after it", nap.CreatedAt, nap.ResumeAt, nap.FinishedAt)
	}
	if explode.ErrorKind != "panic" || !strings.Contains(explode.Error, "assignment to entry in nil map") ||
		!strings.Contains(explode.Error, "goroutine") || !strings.Contains(explode.Error, "inspect_test.go") {
		t.Errorf("failed step: kind %q, error %q; want a panic with its full stack", explode.ErrorKind, explode.Error)
	}

	// Turns: the root suspended twice (delay, children) and then finished.
	var states []string
	for _, tu := range root.TurnJobs {
		states = append(states, tu.State)
		if tu.AttemptedAt == nil || tu.FinalizedAt == nil || tu.FinalizedAt.Before(*tu.AttemptedAt) || tu.Attempt != 1 {
			t.Errorf("root turn %+v: want one attempt, attempted then finalized", tu)
		}
	}
	if diff := cmp.Diff([]string{"completed", "completed", "completed"}, states); diff != "" {
		t.Errorf("root turn states (-want +got):\n%s", diff)
	}
	var flaky *workflow.TaskInfo
	for i := range info.Tasks {
		if info.Tasks[i].Key == "kids/1" {
			flaky = &info.Tasks[i]
		}
	}
	if flaky == nil || flaky.ParentID != root.ID || len(flaky.TurnJobs) != 1 {
		t.Fatalf("child kids/1: %+v; want one turn job under the root", flaky)
	}
	tu := flaky.TurnJobs[0]
	if tu.Attempt != 2 || tu.State != "completed" || len(tu.Errors) != 1 || tu.Errors[0].Attempt != 1 ||
		!strings.Contains(tu.Errors[0].Error, "flaky child: first attempt fails") {
		t.Errorf("flaky child's turn: %+v; want attempt 2, completed, with the first attempt's error", tu)
	}

	// Waits: the delay, then the children.
	if len(root.Waits) != 2 {
		t.Fatalf("root waits: %+v; want the delay and the children", root.Waits)
	}
	d, c := root.Waits[0], root.Waits[1]
	if d.Kind != workflow.WaitDelay || d.Name != "nap" || d.Status != "fired" || !d.Start.Equal(nap.CreatedAt) ||
		d.End == nil || !d.End.Equal(*nap.FinishedAt) || d.ResumeAt == nil || !d.ResumeAt.Equal(*nap.ResumeAt) {
		t.Errorf("delay wait %+v; want the nap from its creation to its firing", d)
	}
	if c.Kind != workflow.WaitChildren || c.Status != "done" || c.End == nil || !c.End.After(c.Start) ||
		!c.Start.Equal(*root.TurnJobs[1].FinalizedAt) || !c.End.Equal(root.TurnJobs[2].CreatedAt) {
		t.Errorf("children wait %+v; want from the second turn's end to the third turn's insertion", c)
	}
	for _, task := range info.Tasks[1:] {
		if len(task.Waits) != 0 {
			t.Errorf("child %s waits %+v; want none", task.Key, task.Waits)
		}
	}
}

// TestInspectShowsAWaitInProgress: a parent awaiting a child asleep on a
// long delay shows an open wait on children, and the child a waiting delay.
func TestInspectShowsAWaitInProgress(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	sleeper := workflow.Define("insp_sleeper", func(t *workflow.Task, _ struct{}) (int, error) {
		if err := t.Delay("long", time.Hour); err != nil {
			return 0, err
		}
		return 1, nil
	})
	waiter := workflow.Define("insp_waiter", func(t *workflow.Task, _ struct{}) (int, error) {
		return workflow.Go(t, "sleep", sleeper, struct{}{}).Get()
	})
	eng := startEngine(t, pool, testConfig(sleeper, waiter))
	ctx := ctxTimeout(t, 30*time.Second)
	run, err := waiter.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var info *workflow.RunInfo
	waitFor(t, "the parent and its child to wait", 20*time.Second, func() bool {
		info, err = workflow.Inspect(ctx, pool, run.ID)
		if err != nil {
			t.Fatal(err)
		}
		return len(info.Tasks) == 2 && info.Tasks[0].Status == "waiting" && info.Tasks[1].Status == "waiting" && info.Status == "waiting"
	})
	root, kid := info.Tasks[0], info.Tasks[1]
	if len(root.Waits) != 1 || root.Waits[0].Kind != workflow.WaitChildren || root.Waits[0].Status != "waiting" || root.Waits[0].End != nil {
		t.Errorf("parent waits %+v; want one open wait on children", root.Waits)
	}
	if len(kid.Waits) != 1 || kid.Waits[0].Kind != workflow.WaitDelay || kid.Waits[0].Status != "waiting" || kid.Waits[0].End != nil ||
		kid.Waits[0].ResumeAt == nil || kid.Waits[0].ResumeAt.Sub(kid.Waits[0].Start) != time.Hour {
		t.Errorf("child waits %+v; want one waiting delay due an hour after it began", kid.Waits)
	}
	if err := eng.Cancel(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	info, err = workflow.Inspect(ctx, pool, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if w := info.Tasks[1].Waits; len(w) != 1 || w[0].Status != "cancelled" || w[0].End == nil {
		t.Errorf("child waits after cancel %+v; want the delay cancelled, with an end", w)
	}
}

// TestListRunsFilters pages and filters runs by workflow, status, creation
// time and idempotency key, and rejects invalid filters.
func TestListRunsFilters(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	a := workflow.Define("list_a", func(t *workflow.Task, n int) (int, error) { return n, nil })
	b := workflow.Define("list_b", func(t *workflow.Task, n int) (int, error) { return n, nil })
	eng := newEngine(t, pool, testConfig(a, b))
	ctx := ctxTimeout(t, 30*time.Second)
	var ids []string // oldest first
	for i := range 5 {
		w := a
		if i%2 == 1 {
			w = b
		}
		run, err := w.Start(ctx, eng, i, &workflow.StartOpts{IdempotencyKey: "key-" + string(rune('a'+i))})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, run.ID)
	}
	created := func(id string) time.Time {
		var at time.Time
		if err := pool.QueryRow(ctx, `SELECT created_at FROM braid_runs WHERE id = $1`, id).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	list := func(f workflow.RunFilter) []string {
		t.Helper()
		runs, err := workflow.ListRuns(ctx, pool, f)
		if err != nil {
			t.Fatalf("ListRuns(%+v): %v", f, err)
		}
		n, err := workflow.CountRuns(ctx, pool, f)
		if err != nil {
			t.Fatalf("CountRuns(%+v): %v", f, err)
		}
		got := []string{}
		for _, r := range runs {
			got = append(got, r.ID)
		}
		if f.Offset == 0 && f.Limit == 0 && int(n) != len(got) {
			t.Errorf("CountRuns(%+v) = %d, ListRuns listed %d", f, n, len(got))
		}
		return got
	}
	tests := []struct {
		name string
		f    workflow.RunFilter
		want []string
	}{
		{"all, newest first", workflow.RunFilter{}, []string{ids[4], ids[3], ids[2], ids[1], ids[0]}},
		{"a page", workflow.RunFilter{Limit: 2, Offset: 1}, []string{ids[3], ids[2]}},
		{"past the end", workflow.RunFilter{Offset: 5}, []string{}},
		{"workflow", workflow.RunFilter{Workflow: "list_b"}, []string{ids[3], ids[1]}},
		{"status", workflow.RunFilter{Status: "pending", Workflow: "list_a"}, []string{ids[4], ids[2], ids[0]}},
		{"no such status", workflow.RunFilter{Status: "completed"}, []string{}},
		{"idempotency key", workflow.RunFilter{IdempotencyKey: "key-c"}, []string{ids[2]}},
		{"unknown key", workflow.RunFilter{IdempotencyKey: "key-z' OR 1=1 --"}, []string{}},
		{"created after", workflow.RunFilter{CreatedAfter: created(ids[3])}, []string{ids[4], ids[3]}},
		{"created before", workflow.RunFilter{CreatedBefore: created(ids[1])}, []string{ids[0]}},
		{"created between", workflow.RunFilter{CreatedAfter: created(ids[1]), CreatedBefore: created(ids[3])}, []string{ids[2], ids[1]}},
		{"before, kept for paging", workflow.RunFilter{Before: created(ids[2]), Limit: 1}, []string{ids[1]}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, list(tt.f)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
	}
	if n, err := workflow.CountRuns(ctx, pool, workflow.RunFilter{Workflow: "list_a", Limit: 1, Offset: 2}); err != nil || n != 3 {
		t.Errorf("CountRuns ignoring paging = %d, %v; want 3", n, err)
	}

	st, err := workflow.CollectRunStats(ctx, pool, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	wantStats := &workflow.RunStats{ByStatus: map[string]int64{"pending": 5, "running": 0, "waiting": 0, "completed": 0, "failed": 0, "cancelled": 0}}
	if diff := cmp.Diff(wantStats, st); diff != "" {
		t.Errorf("run stats (-want +got):\n%s", diff)
	}

	now := time.Now()
	bad := []struct {
		f    workflow.RunFilter
		want string
	}{
		{workflow.RunFilter{Offset: -1}, "offset -1"},
		{workflow.RunFilter{Limit: -5}, "limit -5"},
		{workflow.RunFilter{Limit: 10_001}, "limit 10001"},
		{workflow.RunFilter{Status: "done"}, `status "done"`},
		{workflow.RunFilter{CreatedAfter: now, CreatedBefore: now.Add(-time.Hour)}, "created after"},
	}
	for _, tt := range bad {
		_, err := workflow.ListRuns(ctx, pool, tt.f)
		if !errors.Is(err, workflow.ErrInvalidRunFilter) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ListRuns(%+v) = %v; want ErrInvalidRunFilter naming %q", tt.f, err, tt.want)
		}
	}
}
