package admin

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/braidflow/braid/workflow"
)

// A task ignores the failure of an optional step (recorded, as the code
// went on to another call), then fails at "charge", whose error it
// returns. The run's detail names charge as the failed step, not the
// optional step recorded as failed before it.
func TestRunFailureNamesTheStepThatFailedTheTask(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	wf := workflow.Define("failure_blame", func(t *workflow.Task, _ struct{}) (string, error) {
		if _, err := workflow.Step(t, "enrich", func(context.Context) (int, error) {
			return 0, errors.New("enrichment service down")
		}); err != nil {
			t.Logger().Info("no enrichment", "error", err)
		}
		return workflow.Step(t, "charge", func(context.Context) (string, error) {
			return "", errors.New("card declined")
		})
	}, workflow.WithMaxAttempts(1))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	eng := f.startEngine(2, wf)
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Result(ctx); err == nil {
		t.Fatal("the run completed; want it failed at charge")
	}
	var d RunDetail
	f.call("GET", "/api/runs/"+run.ID, nil, 200, &d)
	if d.Failure == nil || d.Failure.Step != "charge" {
		t.Fatalf("the run's failure %+v; want it at step charge (the task's error: card declined)", d.Failure)
	}
}
