package workflow_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// A step whose body succeeds but whose record fails (the statement is
// refused: here by a trigger, in production a lost connection, a full
// disk, a statement timeout) returns an error to the code with nothing
// recorded at its position. The code handles the error as a failure and
// compensates in another step. River's next attempt runs the step again,
// it succeeds and is recorded, and the code takes its normal path, which
// must not meet the compensation's record where it records "ship". As for
// a step failure whose record fails (recordHandledFailure), the code must
// not go on from an error that left no record: the turn fails with it, and
// the run completes on a later attempt.
func TestAStepWhoseRecordFailsHaltsTheTurn(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	// The first two writes of reserve's record are refused: the batched
	// statement and the write alone of the first attempt. A sequence
	// counts them, since a refusal rolls back anything else.
	execSQL(t, pool, `
		CREATE SEQUENCE reserve_refusals;
		CREATE FUNCTION refuse_reserve() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		    IF NEW.name = 'reserve' AND nextval('reserve_refusals') <= 2 THEN
		        RAISE EXCEPTION 'refused record of step %', NEW.name;
		    END IF;
		    RETURN NEW;
		END $$;
		CREATE TRIGGER refuse_reserve BEFORE INSERT ON braid_steps
		    FOR EACH ROW EXECUTE FUNCTION refuse_reserve();`)
	var compensated atomic.Int32
	wf := workflow.Define("record_refused_saga", func(t *workflow.Task, _ struct{}) (string, error) {
		_, err := workflow.Step(t, "reserve", func(context.Context) (int, error) { return 1, nil })
		if err != nil {
			if _, cerr := workflow.Step(t, "release", func(context.Context) (int, error) {
				compensated.Add(1)
				return 0, nil
			}); cerr != nil {
				return "", cerr
			}
			return "", err
		}
		return workflow.Step(t, "ship", func(context.Context) (string, error) { return "shipped", nil })
	}, workflow.WithMaxAttempts(4), workflow.WithRetry(fast))
	eng := startEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 60*time.Second)

	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := run.Result(ctx)
	var nd *workflow.NondeterminismError
	if errors.As(err, &nd) {
		t.Fatalf("the run failed with %v: the compensation was recorded where the step's record was missing", err)
	}
	if err != nil || out != "shipped" {
		t.Fatalf("the run's result: %q, %v; want shipped", out, err)
	}
	if n := compensated.Load(); n != 0 {
		t.Errorf("the compensation ran %d times; want 0 (the turn halts at the record's failure)", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_steps s JOIN braid_tasks k ON k.id = s.task_id
		WHERE k.run_id = $1 AND s.name = 'release'`, run.ID); n != 0 {
		t.Errorf("the run records the compensation %d times; want 0", n)
	}
}
