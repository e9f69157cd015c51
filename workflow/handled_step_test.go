package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
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

// A handled failure whose record is refused (a failed statement here; a
// lost race or a pool timeout alike) halts the turn: the call after it
// fails, and so does every later call, whatever the code makes of the
// error (a best-effort SetEvent whose error it logs, then a delay). Were
// the delay to take the refused call's position and suspend the turn, the
// next turn would run the step again, and its normal path would meet the
// delay's record. The turn fails, and River's next attempt runs the step
// again, which now succeeds.
func TestARefusedFailureRecordHaltsTheTurn(t *testing.T) {
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
	var runs atomic.Int32
	wf := workflow.Define("refused_then_delay", func(t *workflow.Task, _ struct{}) (string, error) {
		_, err := workflow.Step(t, "reserve", func(context.Context) (int, error) {
			if runs.Add(1) == 1 {
				return 0, errors.New("out of stock")
			}
			return 1, nil
		})
		if err != nil {
			// A best-effort status for watchers: its error is logged only.
			if serr := workflow.SetEvent(t, "status", "cooling off"); serr != nil {
				t.Logger().Warn("status not set", "error", serr)
				if _, err := pool.Exec(context.Background(), `UPDATE refuse SET on_ = false`); err != nil {
					return "", err
				}
			}
			if err := t.Delay("cool-off", 10*time.Millisecond); err != nil {
				return "", err
			}
			return workflow.Step(t, "release", func(context.Context) (string, error) { return "released", nil })
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
	var nd *workflow.NondeterminismError
	if errors.As(err, &nd) || err != nil {
		t.Fatalf("the run's result: %q, %v; want it to finish (released or shipped), not diverge", out, err)
	}
}

// The same with the turn's own timeout: the step fails because the turn
// timed out, so its failure is not recorded, and the turn halts rather
// than suspend on the delay that the code goes on to (Delay does not look
// at the context, and the outcome commits on one not cancelled with the
// turn).
func TestAFailureAfterTheTurnTimedOutHaltsTheTurn(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	var runs atomic.Int32
	wf := workflow.Define("timeout_then_delay", func(t *workflow.Task, _ struct{}) (string, error) {
		_, err := workflow.Step(t, "reserve", func(ctx context.Context) (int, error) {
			if runs.Add(1) == 1 {
				<-ctx.Done() // the warehouse is slow this once
				return 0, fmt.Errorf("warehouse: %w", ctx.Err())
			}
			return 1, nil
		})
		if err != nil {
			if serr := workflow.SetEvent(t, "status", "cooling off"); serr != nil {
				t.Logger().Warn("status not set", "error", serr)
			}
			if err := t.Delay("cool-off", 10*time.Millisecond); err != nil {
				return "", err
			}
			return workflow.Step(t, "release", func(context.Context) (string, error) { return "released", nil })
		}
		return workflow.Step(t, "ship", func(context.Context) (string, error) { return "shipped", nil })
	}, workflow.WithMaxAttempts(2), workflow.WithRetry(fast), workflow.WithTimeout(300*time.Millisecond))
	eng := startEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := run.Result(ctx)
	if err != nil {
		t.Fatalf("the run's result: %q, %v; want it to finish (released or shipped), not diverge", out, err)
	}
}

var errAccountNotFound = errors.New("not found")

// Code that branches on a step's error with errors.Is: the first turn gets
// the body's error, every later one the recorded *StepError, which matches
// the sentinel the body's error wrapped, so each turn takes the same path.
func TestAHandledFailureMatchesErrorsIsOnReplay(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	wf := workflow.Define("handled_errors_is", func(t *workflow.Task, _ struct{}) (string, error) {
		_, err := workflow.Step(t, "lookup", func(context.Context) (int, error) {
			return 0, fmt.Errorf("lookup account: %w", errAccountNotFound)
		})
		if errors.Is(err, errAccountNotFound) {
			if err := t.Delay("wait-for-signup", 10*time.Millisecond); err != nil {
				return "", err
			}
			return "signed up later", nil
		}
		if err != nil {
			if _, cerr := workflow.Step(t, "alert", func(context.Context) (int, error) { return 1, nil }); cerr != nil {
				return "", cerr
			}
			return "", err
		}
		return "found", nil
	}, workflow.WithMaxAttempts(2), workflow.WithRetry(fast))
	eng := startEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := run.Result(ctx)
	if err != nil || out != "signed up later" {
		t.Fatalf("the run's result: %q, %v; want signed up later", out, err)
	}
}

// A step's failure that the code ignores (an optional enrichment) is
// recorded, as the code went on from it, and Retry forgets what the task
// recorded after a failure it saw, as it does after an exhausted step's:
// the steps after it run again (under the same idempotency keys), and the
// run completes.
func TestRetryRewindsPastAFailureTheCodeIgnored(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	var charges atomic.Int32
	var broken atomic.Bool
	broken.Store(true)
	wf := workflow.Define("ignored_then_retry", func(t *workflow.Task, _ struct{}) (string, error) {
		if _, err := workflow.Step(t, "enrich", func(context.Context) (int, error) {
			return 0, errors.New("enrichment service down")
		}); err != nil {
			t.Logger().Info("no enrichment", "error", err)
		}
		if _, err := workflow.Step(t, "charge", func(context.Context) (int, error) { return int(charges.Add(1)), nil }); err != nil {
			return "", err
		}
		return workflow.Step(t, "ship", func(context.Context) (string, error) {
			if broken.Load() {
				return "", errors.New("carrier down")
			}
			return "shipped", nil
		})
	}, workflow.WithMaxAttempts(1))
	eng := startEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Result(ctx); err == nil || !strings.Contains(err.Error(), "carrier down") {
		t.Fatalf("the run's result: %v; want carrier down", err)
	}
	broken.Store(false)
	if err := eng.Retry(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	if out, err := run.Result(ctx); err != nil || out != "shipped" {
		t.Fatalf("after Retry: %q, %v", out, err)
	}
	if n := charges.Load(); n != 2 {
		t.Errorf("charge ran %d times; want 2 (Retry forgot it with the ignored failure before it)", n)
	}
}

// A task that falls back on a failed step and completes without another
// durable call records the failure as it completes, so that the replay of
// the completed task takes the same path.
func TestReplayOfACompletedFallbackDoesNotDiverge(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	wf := workflow.Define("fallback_completes", func(t *workflow.Task, _ struct{}) (string, error) {
		v, err := workflow.Step(t, "lookup", func(context.Context) (string, error) { return "", errors.New("cache down") })
		if err != nil {
			return "default", nil
		}
		return v, nil
	})
	eng := startEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := run.Result(ctx); err != nil || out != "default" {
		t.Fatalf("the run's result: %q, %v", out, err)
	}
	h, err := workflow.ExportRun(ctx, pool, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := workflow.Replay(ctx, h, wf)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Divergences) != 0 {
		t.Fatalf("the unchanged code diverges from its own completed run: %v", rep.Divergences[0])
	}
}

// A sentinel that errors.Is matches through an Is method, not by being in
// the chain: os.ReadFile's *fs.PathError wraps syscall.ENOENT, which is
// fs.ErrNotExist only through Errno.Is. The replay of the recorded failure
// matches it too, and takes the path the turn that ran the step took.
func TestAnIsMethodSentinelHoldsOnReplay(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	missing := filepath.Join(t.TempDir(), "config.json")
	wf := workflow.Define("handled_is_method", func(t *workflow.Task, _ struct{}) (string, error) {
		_, err := workflow.Step(t, "lookup", func(context.Context) (string, error) {
			b, err := os.ReadFile(missing)
			if err != nil {
				return "", fmt.Errorf("read config: %w", err)
			}
			return string(b), nil
		})
		if errors.Is(err, fs.ErrNotExist) {
			if err := t.Delay("wait-for-it", 10*time.Millisecond); err != nil {
				return "", err
			}
			return "not found, waited", nil
		}
		if err != nil {
			if _, aerr := workflow.Step(t, "alert", func(context.Context) (int, error) { return 1, nil }); aerr != nil {
				return "", aerr
			}
			return "", err
		}
		return "found", nil
	}, workflow.WithMaxAttempts(2), workflow.WithRetry(fast))
	eng := startEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := run.Result(ctx)
	if err != nil || out != "not found, waited" {
		t.Fatalf("the run's result: %q, %v; want the path the first turn took (not found, waited)", out, err)
	}
}

// A cause whose text equals a sentinel's without being it (an RPC client
// that rebuilds the server's error from its text, say) did not match the
// sentinel in the turn that ran the step, and does not on replay either:
// causes are matched by type and message.
func TestALookalikeOfASentinelDoesNotMatchOnReplay(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	wf := workflow.Define("handled_lookalike", func(t *workflow.Task, _ struct{}) (string, error) {
		_, err := workflow.Step(t, "call", func(context.Context) (int, error) {
			// The server's handler timed out; the client has only its text.
			remote := errors.New("context deadline exceeded")
			return 0, fmt.Errorf("rpc Reserve: %w", remote)
		})
		if errors.Is(err, context.DeadlineExceeded) {
			// Our own deadline: try again later.
			if err := t.Delay("backoff", 10*time.Millisecond); err != nil {
				return "", err
			}
			return "retried later", nil
		}
		if err != nil {
			if _, cerr := workflow.Step(t, "compensate", func(context.Context) (int, error) { return 1, nil }); cerr != nil {
				return "", cerr
			}
			if err := t.Delay("cool-off", 10*time.Millisecond); err != nil {
				return "", err
			}
			return "compensated", nil
		}
		return "reserved", nil
	}, workflow.WithMaxAttempts(2), workflow.WithRetry(fast))
	eng := startEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := run.Result(ctx)
	if err != nil || out != "compensated" {
		t.Fatalf("the run's result: %q, %v; want the path the first turn took (compensated)", out, err)
	}
}

var errSignupNotFound = errors.New("not found")

// A run whose history was recorded before braid kept the causes of a
// step's failure: an exhausted step whose body returned a sentinel, which
// the *StepError of that time did not match, so the code took its other
// path (alert). The record has no causes and matches nothing, so the
// replay takes the same path. The history is as ExportRun wrote it then.
func TestAStepFailureRecordedWithoutCausesMatchesNothing(t *testing.T) {
	t.Parallel()
	wf := workflow.Define("handled_upgrade", func(t *workflow.Task, _ struct{}) (string, error) {
		_, err := workflow.Step(t, "lookup", func(context.Context) (int, error) { return 0, errSignupNotFound },
			workflow.Retry{MaxAttempts: 1, Backoff: fast})
		if errors.Is(err, errSignupNotFound) {
			if err := t.Delay("wait-for-signup", time.Millisecond); err != nil {
				return "", err
			}
			return "signed up later", nil
		}
		if err != nil {
			if _, aerr := workflow.Step(t, "alert", func(context.Context) (int, error) { return 1, nil }); aerr != nil {
				return "", aerr
			}
			return "alerted", nil
		}
		return "found", nil
	})
	p0, p1 := 0, 1
	h := &workflow.RunHistory{
		Format: workflow.RunHistoryFormat, RunID: "0190f2a0-0000-7000-8000-000000000001", Workflow: "handled_upgrade", Status: "completed",
		Tasks: []workflow.TaskHistory{{
			ID: "0190f2a0-0000-7000-8000-000000000002", Key: "", Workflow: "handled_upgrade", Status: "completed",
			Input: []byte(`{}`), Output: []byte(`"alerted"`),
			Steps: []workflow.StepHistory{
				{Name: "lookup", Kind: "step", Status: "failed", Position: &p0, Error: "not found", Attempts: 1},
				{Name: "alert", Kind: "step", Status: "completed", Position: &p1, Output: []byte(`1`), Attempts: 1},
			},
		}},
	}
	rep, err := workflow.Replay(context.Background(), h, wf)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Divergences) != 0 {
		t.Fatalf("unchanged code diverges from a history recorded before the change: %v", rep.Divergences[0])
	}
}

// Config.MaxErrorBytes caps the text of a failed step's stored error, the
// names of its causes included.
func TestAFailedStepsRecordIsCappedByMaxErrorBytes(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	const limit = 512
	wf := workflow.Define("handled_error_cap", func(t *workflow.Task, _ struct{}) (string, error) {
		_, err := workflow.Step(t, "enrich", func(context.Context) (int, error) {
			var errs []error
			for i := range 16 {
				errs = append(errs, fmt.Errorf("backend %02d: %s", i, strings.Repeat("x", 1000)))
			}
			return 0, errors.Join(errs...)
		}, workflow.Retry{MaxAttempts: 1, Backoff: fast})
		if err != nil {
			return "without enrichment", nil // an optional step: fall back
		}
		return "enriched", nil
	})
	cfg := testConfig(wf)
	cfg.MaxErrorBytes = limit
	eng := startEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := run.Result(ctx); err != nil || out != "without enrichment" {
		t.Fatalf("the run's result: %q, %v", out, err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT octet_length(error::text) FROM braid_steps WHERE name = 'enrich'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	// The message at the cap, with room for the JSON around it.
	if n > limit+256 {
		t.Errorf("the failed step's stored error is %d bytes; MaxErrorBytes is %d", n, limit)
	}
}

// validationError has a pointer receiver that reads its field: a
// nil one panics in Error.
type validationError struct{ field string }

func (e *validationError) Error() string { return "invalid " + e.field }

// validate has the classic typed-nil bug: it returns a nil
// *validationError as a non-nil error.
func validateOrder() error {
	var ve *validationError
	return ve
}

// A step body fails with an error that wraps a typed nil pointer, whose
// Error panics: the failure is recorded without naming that cause, and the
// run goes on, whether the code compensates or falls back and completes.
func TestATypedNilCauseDoesNotPanic(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		compensate bool
	}{{"compensate", true}, {"fallback", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := testutil.DB(t)
			wf := workflow.Define("handled_typed_nil_"+tc.name, func(t *workflow.Task, _ struct{}) (string, error) {
				_, err := workflow.Step(t, "validate", func(context.Context) (int, error) {
					if err := validateOrder(); err != nil {
						return 0, fmt.Errorf("validate order: %w", err)
					}
					return 1, nil
				})
				if err != nil {
					if tc.compensate {
						if _, cerr := workflow.Step(t, "reject", func(context.Context) (int, error) { return 1, nil }); cerr != nil {
							return "", cerr
						}
					}
					return "rejected", nil
				}
				return "accepted", nil
			}, workflow.WithMaxAttempts(2), workflow.WithRetry(fast))
			eng := startEngine(t, pool, testConfig(wf))
			ctx := ctxTimeout(t, 30*time.Second)
			run, err := wf.Start(ctx, eng, struct{}{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			out, err := run.Result(ctx)
			if err != nil || out != "rejected" {
				t.Fatalf("the run's result: %q, %v; want rejected", out, err)
			}
		})
	}
}

// A step that failed for a reason of its own, well before the turn's
// timeout, is recorded when the code's fallback completes after the
// timeout, on a context of its own, as the turn's outcome is: the run
// completes.
func TestAFailureBeforeTheTimeoutIsRecordedAfterIt(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	wf := workflow.Define("handled_fallback_slow", func(t *workflow.Task, _ struct{}) (string, error) {
		_, err := workflow.Step(t, "lookup", func(context.Context) (string, error) { return "", errors.New("cache down") })
		if err != nil {
			time.Sleep(500 * time.Millisecond) // compute the default (no durable call)
			return "default", nil
		}
		return "cached", nil
	}, workflow.WithMaxAttempts(1), workflow.WithTimeout(300*time.Millisecond))
	eng := startEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := run.Result(ctx); err != nil || out != "default" {
		t.Fatalf("the run's result: %q, %v; want default", out, err)
	}
}

var errOutOfStock = errors.New("out of stock")

// A step's error whose message is longer than MaxErrorBytes wraps a
// sentinel; the code branches on errors.Is and waits for a restock. The
// causes have a budget of their own, and the shortest names go first, so
// the replay of the failure still matches the sentinel and takes the path
// the turn took.
func TestASentinelUnderALongMessageHoldsOnReplay(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	wf := workflow.Define("handled_long_message", func(t *workflow.Task, _ struct{}) (string, error) {
		_, err := workflow.Step(t, "reserve", func(context.Context) (int, error) {
			body := strings.Repeat("x", 600) // the inventory service's response
			return 0, fmt.Errorf("POST /reserve: 409: %s: %w", body, errOutOfStock)
		})
		if errors.Is(err, errOutOfStock) {
			if err := t.Delay("wait-for-restock", 10*time.Millisecond); err != nil {
				return "", err
			}
			return "restocked", nil
		}
		if err != nil {
			if _, aerr := workflow.Step(t, "alert", func(context.Context) (int, error) { return 1, nil }); aerr != nil {
				return "", aerr
			}
			return "", err
		}
		return "reserved", nil
	}, workflow.WithMaxAttempts(2), workflow.WithRetry(fast))
	cfg := testConfig(wf)
	cfg.MaxErrorBytes = 512
	eng := startEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := run.Result(ctx); err != nil || out != "restocked" {
		t.Fatalf("the run's result: %q, %v; want the path the first turn took (restocked)", out, err)
	}
}

// A step reads from a connection whose deadline is the context's (as
// go-redis and many drivers set it): it fails with an i/o timeout at the
// turn's deadline, only because of it, possibly before the context's own
// timer has cancelled the context. The failure is the deadline's, not the
// step's: it is not recorded, the turn fails, and the next attempt, with a
// fresh timeout, reads the value. The race between the two timers goes
// either way, so eight runs go.
func TestAStepThatFailsAtTheTurnsDeadlineIsNotRecorded(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var conns sync.Map
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Store(c, true) // never answers
		}
	}()
	t.Cleanup(func() { conns.Range(func(c, _ any) bool { c.(net.Conn).Close(); return true }) })
	var attempts sync.Map // run input -> *atomic.Int32
	wf := workflow.Define("handled_deadline_race", func(t *workflow.Task, in int) (string, error) {
		n, _ := attempts.LoadOrStore(in, new(atomic.Int32))
		v, err := workflow.Step(t, "read-cache", func(ctx context.Context) (string, error) {
			if n.(*atomic.Int32).Add(1) > 1 {
				return "cached", nil // the server answers in time now
			}
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", ln.Addr().String())
			if err != nil {
				return "", err
			}
			defer c.Close()
			if dl, ok := ctx.Deadline(); ok {
				_ = c.SetDeadline(dl)
			}
			_, err = c.Read(make([]byte, 1))
			return "", fmt.Errorf("cache GET: %w", err)
		})
		if err != nil {
			time.Sleep(50 * time.Millisecond) // compute the default
			return "default", nil
		}
		return v, nil
	}, workflow.WithMaxAttempts(3), workflow.WithRetry(fast), workflow.WithTimeout(500*time.Millisecond))
	eng := startEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 60*time.Second)
	var runs []*workflow.Run[string]
	for i := range 8 {
		run, err := wf.Start(ctx, eng, i, nil)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, run)
	}
	for i, run := range runs {
		out, err := run.Result(ctx)
		if err != nil || out != "cached" {
			var se string
			_ = pool.QueryRow(ctx, `SELECT coalesce(s.error->>'message', '') FROM braid_steps s JOIN braid_tasks k ON k.id = s.task_id
			                          WHERE k.run_id = $1 AND s.name = 'read-cache'`, run.ID).Scan(&se)
			t.Errorf("run %d: %q, %v (step record: %q); want cached: a step that failed at the turn's deadline is not recorded", i, out, err, se)
		}
	}
}

// A run's step fails; its code, falling back, computes for a while
// without looking at its context. The run is cancelled meanwhile: the
// turn's context ends, its heartbeats stop, and the heartbeat rescuer
// takes its job back, so Retry, which waits for no running turn, resets
// the task. Then the cancelled turn's code completes. Its step's failure,
// from before the Cancel, is not recorded past the end of a turn that was
// cancelled (invariant 10: a late attempt writes nothing), so the retried
// run does not replay it, and reads the cache.
func TestACancelledTurnRecordsNoFailureIntoTheRetriedRun(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	var execs atomic.Int32
	blocked := make(chan struct{}, 1)
	release := make(chan struct{})
	gate := make(chan struct{})
	wf := workflow.Define("handled_cancel_retry", func(t *workflow.Task, _ struct{}) (string, error) {
		n := execs.Add(1)
		if n > 1 {
			<-gate // the retried turn waits for the cancelled one's code
		}
		v, err := workflow.Step(t, "lookup", func(context.Context) (string, error) {
			if n == 1 {
				return "", errors.New("cache down")
			}
			return "cached", nil
		})
		if err != nil {
			if n == 1 {
				blocked <- struct{}{}
				<-release // compute the default, ignoring the context
			}
			return "default", nil
		}
		return v, nil
	}, workflow.WithMaxAttempts(3), workflow.WithRetry(fast))
	cfg := testConfig(wf)
	cfg.TurnHeartbeat = 100 * time.Millisecond
	eng := startEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-blocked
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	err = eng.Cancel(cctx, run.ID)
	cancel()
	t.Logf("Cancel: %v", err) // the turn does not end; the run is cancelled all the same
	if err := eng.Retry(ctx, run.ID); err != nil {
		t.Fatalf("Retry: %v", err)
	}
	waitFor(t, "the retried turn to start", 20*time.Second, func() bool { return execs.Load() >= 2 })
	close(release)
	time.Sleep(time.Second) // the cancelled turn's code completes, its outcome is dropped
	steps := count(t, pool, `SELECT count(*) FROM braid_steps s JOIN braid_tasks k ON k.id = s.task_id WHERE k.run_id = $1 AND s.status = 'failed'`, run.ID)
	close(gate)
	out, err := run.Result(ctx)
	if steps != 0 || err != nil || out != "cached" {
		t.Fatalf("the retried run: %q, %v, with %d failed step records written by the cancelled turn after Retry; want cached, none", out, err, steps)
	}
}
