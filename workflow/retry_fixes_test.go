package workflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// A step with its own Retry is exhausted, the code compensates with a
// recorded step and fails the run. Once the cause is fixed, Retry forgets
// the failed step and what the task recorded after it: the step now
// succeeds, the code takes its normal path, and the run completes.
func TestRetryAfterAHandledStepFailureCompletes(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	var broken atomic.Bool
	broken.Store(true)
	var released atomic.Int32
	wf := workflow.Define("retry_compensated_step", func(t *workflow.Task, _ struct{}) (string, error) {
		_, err := workflow.Step(t, "charge", func(context.Context) (int, error) {
			if broken.Load() {
				return 0, errors.New("card declined")
			}
			return 1, nil
		}, workflow.Retry{MaxAttempts: 1, Backoff: fast})
		if err != nil {
			if _, cerr := workflow.Step(t, "release-stock", func(context.Context) (int, error) {
				released.Add(1)
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
	}, workflow.WithMaxAttempts(1))
	eng := startEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Result(ctx); err == nil {
		t.Fatal("the first run completed")
	}
	broken.Store(false)
	if err := eng.Retry(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	out, err := run.Result(ctx)
	if err != nil || out != "shipped" {
		t.Fatalf("after Retry: %q, %v; want shipped", out, err)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_steps s JOIN braid_tasks k ON k.id = s.task_id
		WHERE k.run_id = $1 AND s.name = 'release-stock'`, run.ID); n != 0 {
		t.Errorf("the compensation recorded before the Retry is still recorded (%d rows)", n)
	}
	if n := released.Load(); n != 1 {
		t.Errorf("the compensation ran %d times; want 1", n)
	}
}

// A parent handles its child's failure with a recorded compensation step,
// then fails. Retry resets the child and forgets what the parent recorded
// after starting it: once the child completes, the parent takes its
// normal path and the run completes.
func TestRetryAfterAHandledChildFailureCompletes(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	var broken atomic.Bool
	broken.Store(true)
	child := workflow.Define("retry_compensated_child", func(t *workflow.Task, in int) (int, error) {
		if broken.Load() {
			return 0, errors.New("warehouse down")
		}
		return in * 2, nil
	}, workflow.WithMaxAttempts(1))
	parent := workflow.Define("retry_compensating_parent", func(t *workflow.Task, _ struct{}) (int, error) {
		v, err := workflow.Go(t, "reserve", child, 21).Get()
		if err != nil {
			if _, cerr := workflow.Step(t, "undo", func(context.Context) (int, error) { return 0, nil }); cerr != nil {
				return 0, cerr
			}
			return 0, err
		}
		return workflow.Step(t, "confirm", func(context.Context) (int, error) { return v, nil })
	}, workflow.WithMaxAttempts(1))
	eng := startEngine(t, pool, testConfig(parent, child))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := parent.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Result(ctx); err == nil {
		t.Fatal("the first run completed")
	}
	broken.Store(false)
	if err := eng.Retry(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	out, err := run.Result(ctx)
	if err != nil || out != 42 {
		t.Fatalf("after Retry: %d, %v; want 42", out, err)
	}
}

// A step with its own Retry whose later attempt ends after its run was
// cancelled records nothing, and Step says so: it returns an error, never
// the zero value as a success read back from the row that waited for
// that attempt. Both ends are checked: the attempt succeeds, or it is the
// last one and fails.
func TestARetriedStepEndingAfterCancelIsNotASuccess(t *testing.T) {
	t.Parallel()
	for _, last := range []bool{false, true} {
		t.Run(fmt.Sprintf("last=%v", last), func(t *testing.T) {
			t.Parallel()
			pool := testutil.DB(t)
			ctx := ctxTimeout(t, 60*time.Second)
			var attempt atomic.Int32
			release := make(chan struct{})
			entered := make(chan struct{}, 1)
			got := make(chan string, 4)
			wf := workflow.Define("retried_step_after_cancel", func(t *workflow.Task, _ int) (int, error) {
				v, err := workflow.Step(t, "price", func(context.Context) (int, error) {
					if attempt.Add(1) == 1 {
						return 0, errors.New("flaky")
					}
					entered <- struct{}{}
					<-release // ignores its context, as slow calls do
					if last {
						return 0, errors.New("still flaky")
					}
					return 42, nil
				}, workflow.Retry{MaxAttempts: 2, Backoff: fast})
				if !errors.Is(err, workflow.ErrSuspended) {
					got <- fmt.Sprintf("v=%d err=%v", v, err)
				}
				return v, err
			})
			eng := startEngine(t, pool, testConfig(wf))
			run, err := wf.Start(ctx, eng, 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			<-entered
			// Something holds the turn's job row (a heartbeat, River's
			// completer): Cancel skips the job, and the turn's context
			// stays alive meanwhile.
			hold := holdRunningTurnJob(t, pool, run.ID)
			cancelled := make(chan error, 1)
			go func() { cancelled <- eng.Cancel(ctx, run.ID) }()
			waitFor(t, "the task cancelled", 20*time.Second, func() bool {
				return count(t, pool, `SELECT count(*) FROM braid_tasks WHERE run_id = $1 AND status = 'cancelled'`, run.ID) == 1
			})
			close(release)
			select {
			case s := <-got:
				if s == "v=0 err=<nil>" {
					t.Errorf("Step returned a zero value and no error for an attempt whose outcome was not recorded")
				}
			case <-ctx.Done():
				t.Fatal("the step's attempt never returned")
			}
			_ = hold.Rollback(ctx)
			if err := <-cancelled; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A DAG node that started a child is cancelled with its run. Retry blocks
// the node again behind a dependency that runs again, and the node, once
// decided afresh, is skipped: its child must not run meanwhile, nor after,
// and the run completes with nothing of it left running.
func TestRetryRunsNoChildOfANodeThatIsBlockedAgain(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	var aFails atomic.Bool
	aFails.Store(true)
	var cRuns atomic.Int32
	a := workflow.Define("rb_a", func(t *workflow.Task, in dagIn) (int, error) {
		if aFails.Load() {
			return 0, errors.New("a down")
		}
		return 1, nil
	}, workflow.WithMaxAttempts(1))
	c := workflow.Define("rb_c", func(t *workflow.Task, in int) (int, error) {
		return workflow.Step(t, "work", func(ctx context.Context) (int, error) {
			if cRuns.Add(1) == 1 {
				<-ctx.Done()
				return 0, ctx.Err()
			}
			return in, nil
		})
	})
	b := workflow.Define("rb_b", func(t *workflow.Task, in dagIn) (int, error) {
		outs, err := workflow.Map(t, "c", c, []int{1})
		if err != nil {
			return 0, err
		}
		return outs[0], nil
	})
	dag := workflow.DAG[dagIn]("rb_dag",
		workflow.Node("a", a, workflow.OnFailure(workflow.Continue)),
		workflow.Node("b", b, workflow.After("a"), workflow.When(`status.a == "failed"`)))
	eng := startEngine(t, pool, testConfig(dag, a, b, c))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := dag.Start(ctx, eng, dagIn{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "c running", 20*time.Second, func() bool { return cRuns.Load() >= 1 })
	if err := eng.Cancel(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	aFails.Store(false)
	if err := eng.Retry(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := run.Result(ctx); err != nil {
		t.Fatal(err)
	}
	status, _ := nodeStatuses(t, pool, run.ID)
	if status["a"] != "completed" || status["b"] != "skipped" {
		t.Fatalf("nodes %v; want a completed and b skipped", status)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_tasks WHERE run_id = $1 AND status NOT IN ('completed', 'failed', 'cancelled', 'skipped')`, run.ID); n != 0 {
		t.Errorf("%d tasks of the completed run are unfinished", n)
	}
	if n := cRuns.Load(); n != 1 {
		t.Errorf("the child of node b ran %d times; want once, before the Retry", n)
	}
}

// A start whose StartOpts.Queue River would refuse fails before anything
// is written: the caller's transaction commits no run, and the
// idempotency key stays free.
func TestStartWithAnInvalidQueueWritesNothing(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ctx := ctxTimeout(t, 60*time.Second)
	wf := workflow.Define("bad_queue_start", func(t *workflow.Task, in int) (int, error) { return in, nil })
	eng := startEngine(t, pool, testConfig(wf))
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = wf.StartTx(ctx, tx, eng, 1, &workflow.StartOpts{Queue: "Bad Queue", IdempotencyKey: "order:1"})
	if err == nil || !strings.Contains(err.Error(), `"Bad Queue"`) {
		t.Fatalf("StartTx: %v; want an error naming the queue", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("the caller's transaction: %v", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_runs`); n != 0 {
		t.Errorf("%d runs committed by a start that failed", n)
	}
	run, err := wf.Start(ctx, eng, 1, &workflow.StartOpts{IdempotencyKey: "order:1"})
	if err != nil {
		t.Fatal(err)
	}
	if run.Existing {
		t.Errorf("a start with the key returned a run of the start that failed")
	}
	if _, err := eng.StartByName(ctx, wf.Name(), json.RawMessage(`1`), &workflow.StartByNameOpts{Queue: "Bad Queue"}); err == nil {
		t.Errorf("StartByName accepted the queue")
	}
}

// A step whose own name is the one a repeated name's automatic suffix
// would give ("a#2" after "a") keeps its own record, and so does the
// repeated step: every call runs its body once and returns its own
// result.
func TestAStepNamedLikeASuffixKeepsItsOwnRecord(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	var bodies atomic.Int32
	wf := workflow.Define("suffix_like_names", func(t *workflow.Task, _ struct{}) ([]string, error) {
		var out []string
		for _, c := range []struct{ name, value string }{{"a", "first a"}, {"a#2", "own a#2"}, {"a", "second a"}, {"a#2", "own a#2 again"}} {
			v, err := workflow.Step(t, c.name, func(context.Context) (string, error) {
				bodies.Add(1)
				return c.value, nil
			})
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		// A turn that replays them all finds each its own record.
		if err := t.Delay("replay", 0); err != nil {
			return nil, err
		}
		return out, nil
	})
	eng := startEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := run.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"first a", "own a#2", "second a", "own a#2 again"}
	if fmt.Sprint(out) != fmt.Sprint(want) {
		t.Errorf("steps returned %q; want %q", out, want)
	}
	if n := bodies.Load(); n != 4 {
		t.Errorf("%d step bodies ran; want 4", n)
	}
}

// A DAG node that handled a failed step and completed keeps its history
// across a Retry of its run: Retry resets the nodes that did not
// complete, and forgets nothing of a completed one.
func TestRetryKeepsTheFailedStepOfACompletedNode(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	var bFails atomic.Bool
	bFails.Store(true)
	a := workflow.Define("kc_a", func(t *workflow.Task, in dagIn) (string, error) {
		if _, err := workflow.Step(t, "optional", func(context.Context) (int, error) {
			return 0, errors.New("enrichment down")
		}, workflow.Retry{MaxAttempts: 1, Backoff: fast}); err == nil {
			return "enriched", nil
		}
		return "plain", nil
	})
	b := workflow.Define("kc_b", func(t *workflow.Task, in dagIn) (int, error) {
		if bFails.Load() {
			return 0, errors.New("b down")
		}
		return 2, nil
	}, workflow.WithMaxAttempts(1))
	dag := workflow.DAG[dagIn]("kc_dag", workflow.Node("a", a), workflow.Node("b", b))
	eng := startEngine(t, pool, testConfig(dag, a, b))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := dag.Start(ctx, eng, dagIn{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Result(ctx); err == nil {
		t.Fatal("the first run completed")
	}
	const failedOptional = `SELECT count(*) FROM braid_steps s JOIN braid_tasks k ON k.id = s.task_id
		WHERE k.run_id = $1 AND k.key = 'a' AND s.name = 'optional' AND s.status = 'failed'`
	if n := count(t, pool, failedOptional, run.ID); n != 1 {
		t.Fatalf("%d failed records of a's step before the Retry; want 1", n)
	}
	bFails.Store(false)
	if err := eng.Retry(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := run.Result(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, failedOptional, run.ID); n != 1 {
		t.Errorf("%d failed records of completed node a's step after the Retry; want it kept", n)
	}
}

// A parent starts two children and records a step before it learns that
// the first child failed; it then compensates and fails. Retry forgets
// only what the parent recorded once the child had failed: the step
// recorded before replays, the second child keeps its task and its result,
// and the compensation is forgotten, so the run completes with no body run
// twice but the failed child's.
func TestRetryKeepsWhatAParentRecordedBeforeItsChildFailed(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	var broken atomic.Bool
	broken.Store(true)
	var stepRuns, bRuns, undoRuns atomic.Int32
	a := workflow.Define("kb_a", func(t *workflow.Task, _ int) (int, error) {
		if !broken.Load() {
			return 1, nil
		}
		// Fail only once the parent's step is recorded.
		for {
			var n int
			if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM braid_steps s JOIN braid_tasks k ON k.id = s.task_id
				WHERE k.run_id = $1 AND s.name = 'before'`, t.RunID()).Scan(&n); err != nil {
				return 0, err
			}
			if n > 0 {
				return 0, errors.New("a down")
			}
			select {
			case <-t.Context().Done():
				return 0, t.Context().Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	}, workflow.WithMaxAttempts(1))
	b := workflow.Define("kb_b", func(t *workflow.Task, _ int) (int, error) {
		return workflow.Step(t, "work", func(context.Context) (int, error) {
			bRuns.Add(1)
			return 2, nil
		})
	})
	parent := workflow.Define("kb_parent", func(t *workflow.Task, _ struct{}) (int, error) {
		fa := workflow.Go(t, "a", a, 0)
		fb := workflow.Go(t, "b", b, 0)
		if _, err := workflow.Step(t, "before", func(context.Context) (int, error) {
			stepRuns.Add(1)
			return 0, nil
		}); err != nil {
			return 0, err
		}
		va, err := fa.Get()
		if err != nil {
			if _, cerr := workflow.Step(t, "undo", func(context.Context) (int, error) {
				undoRuns.Add(1)
				return 0, nil
			}); cerr != nil {
				return 0, cerr
			}
			return 0, err
		}
		vb, err := fb.Get()
		if err != nil {
			return 0, err
		}
		return va + vb, nil
	}, workflow.WithMaxAttempts(1))
	eng := startEngine(t, pool, testConfig(parent, a, b))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := parent.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Result(ctx); err == nil {
		t.Fatal("the first run completed")
	}
	const bTask = `SELECT id::text FROM braid_tasks WHERE run_id = $1 AND key = 'b'`
	var bBefore, bAfter string
	if err := pool.QueryRow(ctx, bTask, run.ID).Scan(&bBefore); err != nil {
		t.Fatal(err)
	}
	broken.Store(false)
	if err := eng.Retry(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	out, err := run.Result(ctx)
	if err != nil || out != 3 {
		t.Fatalf("after Retry: %d, %v; want 3", out, err)
	}
	if err := pool.QueryRow(ctx, bTask, run.ID).Scan(&bAfter); err != nil {
		t.Fatal(err)
	}
	if bAfter != bBefore {
		t.Errorf("child b was started again as task %s (was %s)", bAfter, bBefore)
	}
	if s, bn, u := stepRuns.Load(), bRuns.Load(), undoRuns.Load(); s != 1 || bn != 1 || u != 1 {
		t.Errorf("bodies ran: before %d, b %d, undo %d times; want each once", s, bn, u)
	}
}

// A signal that a wait took after a forgotten failure goes back to the
// run's mailbox when Retry forgets that wait: the wait the code makes
// instead, on its other path, takes it.
func TestRetryPutsBackTheSignalThatAForgottenWaitTook(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	var broken atomic.Bool
	broken.Store(true)
	wf := workflow.Define("retry_signal_back", func(t *workflow.Task, _ struct{}) (string, error) {
		_, err := workflow.Step(t, "charge", func(context.Context) (int, error) {
			if broken.Load() {
				return 0, errors.New("card declined")
			}
			return 1, nil
		}, workflow.Retry{MaxAttempts: 1, Backoff: fast})
		if err != nil {
			note, _, werr := workflow.WaitSignal[string](t, "note", 0)
			if werr != nil {
				return "", werr
			}
			return "", fmt.Errorf("%w (note %q)", err, note)
		}
		note, _, err := workflow.WaitSignal[string](t, "note", 0)
		if err != nil {
			return "", err
		}
		return "shipped with " + note, nil
	}, workflow.WithMaxAttempts(1))
	eng := startEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Signal(ctx, run.ID, "note", "fragile", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := run.Result(ctx); err == nil || !strings.Contains(err.Error(), `note "fragile"`) {
		t.Fatalf("the first run: %v; want it failed after taking the note", err)
	}
	broken.Store(false)
	if err := eng.Retry(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	out, err := run.Result(ctx)
	if err != nil || out != "shipped with fragile" {
		t.Fatalf("after Retry: %q, %v; want shipped with fragile", out, err)
	}
}
