package workflow_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// sagaWorkflow reserves stock in a step without a Retry policy of its own
// and, when that fails, releases what it holds in a compensation step and
// fails. broken says whether the reservation fails, compensated counts the
// compensation's runs.
func sagaWorkflow(name string, broken *atomic.Bool, compensated *atomic.Int32, attempts int) *workflow.Workflow[struct{}, string] {
	return workflow.Define(name, func(t *workflow.Task, _ struct{}) (string, error) {
		_, err := workflow.Step(t, "reserve", func(context.Context) (int, error) {
			if broken.Load() {
				return 0, errors.New("out of stock")
			}
			return 1, nil
		})
		if err != nil {
			if _, cerr := workflow.Step(t, "release", func(context.Context) (int, error) {
				compensated.Add(1)
				return 0, nil
			}); cerr != nil {
				return "", cerr
			}
			return "", err
		}
		if _, err := workflow.Step(t, "ship", func(context.Context) (int, error) { return 2, nil }); err != nil {
			return "", err
		}
		return "shipped", nil
	}, workflow.WithMaxAttempts(attempts), workflow.WithRetry(fast))
}

// A step without a Retry policy of its own fails, and the code handles
// the failure: it compensates in another step, then fails. River retries
// the turn, and the reservation now succeeds. The retry must replay the
// path the code took, not run the reservation again and meet the
// compensation's record where its normal path records "ship": the failure
// the code went on from is part of the history. Once the attempts are
// spent the run fails with the code's own error, not a
// NondeterminismError, and Retry then takes the normal path.
func TestAHandledStepFailureReplaysOnTheTurnsNextAttempt(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	var broken atomic.Bool
	broken.Store(true)
	var compensated atomic.Int32
	wf := sagaWorkflow("saga_unrecorded_failure", &broken, &compensated, 3)
	eng := startEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 60*time.Second)

	// The first attempt fails the reservation; the next ones would not.
	release := make(chan struct{})
	go func() {
		defer close(release)
		waitFor(t, "the compensation to run", 30*time.Second, func() bool { return compensated.Load() > 0 })
		broken.Store(false)
	}()
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = run.Result(ctx)
	<-release
	var nd *workflow.NondeterminismError
	if errors.As(err, &nd) || err == nil || !strings.Contains(err.Error(), "out of stock") {
		t.Fatalf("the run's result: %v; want the code's own failure, out of stock", err)
	}
	if n := compensated.Load(); n != 1 {
		t.Errorf("the compensation ran %d times; want 1 (its record replays)", n)
	}

	if err := eng.Retry(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	out, err := run.Result(ctx)
	if err != nil || out != "shipped" {
		t.Fatalf("after Retry: %q, %v; want shipped", out, err)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_steps s JOIN braid_tasks k ON k.id = s.task_id
		WHERE k.run_id = $1 AND s.name IN ('reserve', 'release')`, run.ID); n != 1 {
		t.Errorf("after Retry the run records %d of reserve and release; want 1 (reserve, completed)", n)
	}
}

// The code goes on from a failed step by waiting (a delay before its
// compensation): the turn suspends, and the next turn must take the same
// path. The step is not run again, though it would now succeed.
func TestAHandledStepFailureReplaysAfterASuspension(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	var runs atomic.Int32
	wf := workflow.Define("saga_wait_then_compensate", func(t *workflow.Task, _ struct{}) (string, error) {
		_, err := workflow.Step(t, "reserve", func(context.Context) (int, error) {
			if runs.Add(1) == 1 {
				return 0, errors.New("out of stock")
			}
			return 1, nil
		})
		if err != nil {
			if err := t.Delay("cool-off", 10*time.Millisecond); err != nil {
				return "", err
			}
			return workflow.Step(t, "release", func(context.Context) (string, error) { return "released", nil })
		}
		return workflow.Step(t, "ship", func(context.Context) (string, error) { return "shipped", nil })
	})
	eng := startEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := run.Result(ctx)
	if err != nil || out != "released" {
		t.Fatalf("the run's result: %q, %v; want released", out, err)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the failed step ran %d times; want 1", n)
	}
}

// The code returns a step's failure at once, making no other call: the
// failure is not recorded, and River's next attempt of the turn runs the
// step again.
func TestAStepFailureReturnedAtOnceIsRunAgain(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	var runs atomic.Int32
	wf := workflow.Define("step_fails_once", func(t *workflow.Task, _ struct{}) (string, error) {
		_, err := workflow.Step(t, "reserve", func(context.Context) (int, error) {
			if runs.Add(1) == 1 {
				return 0, errors.New("out of stock")
			}
			return 1, nil
		})
		if err != nil {
			return "", err
		}
		return workflow.Step(t, "ship", func(context.Context) (string, error) { return "shipped", nil })
	}, workflow.WithMaxAttempts(2), workflow.WithRetry(fast))
	eng := startEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := run.Result(ctx)
	if err != nil || out != "shipped" {
		t.Fatalf("the run's result: %q, %v; want shipped", out, err)
	}
	if n := runs.Load(); n != 2 {
		t.Errorf("the step ran %d times; want 2", n)
	}
}

// A step fails because the run was cancelled while it ran, and the code
// goes on to another call: the failure is not the step's own, so it is not
// recorded, and the call does not run.
func TestAStepFailureAfterTheTurnEndedIsNotRecorded(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	started := make(chan struct{})
	var compensated atomic.Int32
	wf := workflow.Define("saga_cancelled", func(t *workflow.Task, _ struct{}) (string, error) {
		_, err := workflow.Step(t, "reserve", func(ctx context.Context) (int, error) {
			close(started)
			<-ctx.Done()
			return 0, ctx.Err()
		})
		if err != nil {
			if _, cerr := workflow.Step(t, "release", func(context.Context) (int, error) {
				compensated.Add(1)
				return 0, nil
			}); cerr != nil {
				return "", cerr
			}
			return "", err
		}
		return "shipped", nil
	})
	eng := startEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	if err := eng.Cancel(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := run.Result(ctx); !errors.Is(err, workflow.ErrCancelled) {
		t.Fatalf("the run's result: %v; want it cancelled", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_steps s JOIN braid_tasks k ON k.id = s.task_id WHERE k.run_id = $1`, run.ID); n != 0 {
		t.Errorf("the cancelled run recorded %d steps; want none", n)
	}
	if n := compensated.Load(); n != 0 {
		t.Errorf("the compensation ran %d times after the cancel; want 0", n)
	}
}

// The transaction that records a handled failure fails: the call that
// followed the failure does not run, and the turn fails. River's next
// attempt runs the step again, and, with the record possible again, takes
// the handled path once.
func TestAHandledFailureThatCannotBeRecordedFailsTheTurn(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	execSQL(t, pool, `
		CREATE TABLE refuse (on_ bool NOT NULL);
		INSERT INTO refuse VALUES (true);
		CREATE FUNCTION refuse_failed_step() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		    IF NEW.status = 'failed' AND (SELECT on_ FROM refuse) THEN
		        RAISE EXCEPTION 'refused record of failed step %', NEW.name;
		    END IF;
		    RETURN NEW;
		END $$;
		CREATE TRIGGER refuse_failed_step BEFORE INSERT ON braid_steps
		    FOR EACH ROW EXECUTE FUNCTION refuse_failed_step();`)
	var compensated, refused atomic.Int32
	wf := workflow.Define("saga_record_refused", func(t *workflow.Task, _ struct{}) (string, error) {
		_, err := workflow.Step(t, "reserve", func(context.Context) (int, error) { return 0, errors.New("out of stock") })
		if err != nil {
			if _, cerr := workflow.Step(t, "release", func(context.Context) (int, error) {
				compensated.Add(1)
				return 0, nil
			}); cerr != nil {
				// The record was refused: let the next attempt's through.
				refused.Add(1)
				if _, err := pool.Exec(context.Background(), `UPDATE refuse SET on_ = false`); err != nil {
					return "", err
				}
				return "", cerr
			}
			return "", err
		}
		return "shipped", nil
	}, workflow.WithMaxAttempts(3), workflow.WithRetry(fast))
	eng := startEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Result(ctx); err == nil || !strings.Contains(err.Error(), "out of stock") {
		t.Fatalf("the run's result: %v; want the code's own failure, out of stock", err)
	}
	if n := refused.Load(); n != 1 {
		t.Errorf("the call after the failure failed %d times; want 1 (in the attempt whose record was refused)", n)
	}
	if n := compensated.Load(); n != 1 {
		t.Errorf("the compensation ran %d times; want 1 (not in the attempt whose record was refused)", n)
	}
}

// Another attempt of the turn recorded the step as completed first (an
// attempt that was rescued while it ran, say): the failure does not
// overwrite it. The call after the failure fails, and so does the turn;
// its next attempt replays the completed step and takes the normal path.
func TestAHandledFailureLosesToARecordWrittenFirst(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	var compensated atomic.Int32
	wf := workflow.Define("saga_lost_race", func(t *workflow.Task, _ struct{}) (string, error) {
		_, err := workflow.Step(t, "reserve", func(ctx context.Context) (int, error) {
			// Another attempt records the step completed meanwhile.
			if _, err := pool.Exec(ctx, `
				INSERT INTO braid_steps (task_id, name, kind, status, output, attempts, position)
				SELECT id, 'reserve', 'step', 'completed', '1', 1, 0 FROM braid_tasks WHERE workflow = 'saga_lost_race'`); err != nil {
				return 0, err
			}
			return 0, errors.New("out of stock")
		})
		if err != nil {
			if _, cerr := workflow.Step(t, "release", func(context.Context) (int, error) {
				compensated.Add(1)
				return 0, nil
			}); cerr != nil {
				return "", cerr
			}
			return "", err
		}
		return "shipped", nil
	}, workflow.WithMaxAttempts(2), workflow.WithRetry(fast))
	eng := startEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := run.Result(ctx)
	if err != nil || out != "shipped" {
		t.Fatalf("the run's result: %q, %v; want shipped", out, err)
	}
	if n := compensated.Load(); n != 0 {
		t.Errorf("the compensation ran %d times; want 0", n)
	}
}
