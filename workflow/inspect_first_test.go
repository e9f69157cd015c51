package workflow_test

import (
	"context"
	"testing"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// TestInspectFirstReadsOnlyTheFirstTasks inspects a fan-out of 30
// children, each with a step, bounded to 10 tasks: the root and the first
// 9 children come back, with their own steps and turns only, and the
// count of all 31.
func TestInspectFirstReadsOnlyTheFirstTasks(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ctx := context.Background()
	leaf := workflow.Define("inspect_leaf", func(t *workflow.Task, i int) (int, error) {
		return workflow.Step(t, "double", func(context.Context) (int, error) { return 2 * i, nil })
	})
	fan := workflow.Define("inspect_fan", func(t *workflow.Task, n int) (int, error) {
		items := make([]int, n)
		for i := range items {
			items[i] = i
		}
		outs, err := workflow.Map(t, "leaves", leaf, items)
		return len(outs), err
	})
	eng := startEngine(t, pool, testConfig(leaf, fan))
	run, err := fan.Start(ctx, eng, 30, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Result(ctx); err != nil {
		t.Fatal(err)
	}

	all, err := workflow.Inspect(ctx, pool, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Tasks) != 31 || all.TaskCount != 31 {
		t.Fatalf("Inspect: %d tasks, count %d; want 31 of 31", len(all.Tasks), all.TaskCount)
	}
	first, err := workflow.InspectFirst(ctx, pool, run.ID, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Tasks) != 10 || first.TaskCount != 31 {
		t.Fatalf("InspectFirst(10): %d tasks, count %d; want 10 of 31", len(first.Tasks), first.TaskCount)
	}
	if first.Tasks[0].ParentID != "" || first.Tasks[0].ID != all.Tasks[0].ID {
		t.Errorf("the first task is %+v, want the root", first.Tasks[0])
	}
	for i, ti := range first.Tasks {
		want := all.Tasks[i]
		if ti.ID != want.ID || len(ti.Steps) != len(want.Steps) || len(ti.TurnJobs) != len(want.TurnJobs) {
			t.Errorf("task %d: %s with %d steps and %d turns, want %s with %d and %d",
				i, ti.ID, len(ti.Steps), len(ti.TurnJobs), want.ID, len(want.Steps), len(want.TurnJobs))
		}
		if i > 0 && len(ti.Steps) != 1 {
			t.Errorf("child %s has %d steps, want its own one", ti.Key, len(ti.Steps))
		}
	}
	if again, err := workflow.InspectFirst(ctx, pool, run.ID, 31); err != nil || len(again.Tasks) != 31 || again.TaskCount != 31 {
		t.Errorf("InspectFirst(31): %d tasks, count %d, %v; want all 31", len(again.Tasks), again.TaskCount, err)
	}
}
