package admin

import (
	"context"
	"testing"
	"time"

	"github.com/braidflow/braid/workflow"
)

// TestRunDetailHoldsAtMostRunDetailTasksMaxTasks shows a fan-out of more
// children than RunDetailTasksMax: the detail holds the first ones, the
// root first, and says how many the run has.
func TestRunDetailHoldsAtMostRunDetailTasksMaxTasks(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	leaf := workflow.Define("detail_leaf", func(t *workflow.Task, i int) (int, error) { return i, nil })
	fan := workflow.Define("detail_fan", func(t *workflow.Task, n int) (int, error) {
		outs, err := workflow.Map(t, "leaves", leaf, make([]int, n))
		return len(outs), err
	})
	eng := f.startEngine(20, leaf, fan)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	run, err := fan.Start(ctx, eng, RunDetailTasksMax+5, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Result(ctx); err != nil {
		t.Fatal(err)
	}
	var d RunDetail
	f.call("GET", "/api/runs/"+run.ID, nil, 200, &d)
	if len(d.Tasks) != RunDetailTasksMax || d.Run.TaskCount != RunDetailTasksMax+6 {
		t.Errorf("the detail holds %d tasks of %d, want %d of %d", len(d.Tasks), d.Run.TaskCount, RunDetailTasksMax, RunDetailTasksMax+6)
	}
	if len(d.Tasks) > 0 && d.Tasks[0].ParentID != "" {
		t.Errorf("the detail's first task is %s, want the root", d.Tasks[0].Key)
	}
}
