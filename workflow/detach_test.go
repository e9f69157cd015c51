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

// TestUnawaitedChildIsCancelledWhenItsParentFinishes starts, without
// awaiting them, a child stuck in a step, a child waiting on a long delay
// with a grandchild, and a detached child; then the parent completes. The
// attached children and the grandchild are cancelled, the delay with them,
// the stuck step's context ends and its result is never recorded; the
// detached child runs to its end as a run of its own, and another
// detached one stays cancellable through its run ID.
func TestUnawaitedChildIsCancelledWhenItsParentFinishes(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ledger(t, pool)
	stepStarted := make(chan struct{}, 1)
	var stepEnded atomic.Bool
	stuck := workflow.Define("orphan_stuck", func(t *workflow.Task, _ int) (int, error) {
		return workflow.Step(t, "wait", func(ctx context.Context) (int, error) {
			stepStarted <- struct{}{}
			<-ctx.Done()
			stepEnded.Store(true)
			return 0, ctx.Err()
		})
	})
	leaf := workflow.Define("orphan_leaf", func(t *workflow.Task, _ int) (int, error) {
		if err := t.Delay("long", time.Hour); err != nil {
			return 0, err
		}
		return 1, nil
	})
	sleeper := workflow.Define("orphan_sleeper", func(t *workflow.Task, _ int) (int, error) {
		f := workflow.Go(t, "grandchild", leaf, 0)
		if err := t.Delay("long", time.Hour); err != nil {
			return 0, err
		}
		return f.Get()
	})
	done := workflow.Define("orphan_done", func(t *workflow.Task, n int) (int, error) {
		return n, recordStep(pool, t, "detached ran")
	})
	var runIDs struct{ done, sleeping string }
	parent := workflow.Define("orphan_parent", func(t *workflow.Task, _ int) (string, error) {
		workflow.Go(t, "stuck", stuck, 0)
		workflow.Go(t, "sleeper", sleeper, 0)
		d := workflow.Go(t, "done", done, 7, workflow.Detached())
		s := workflow.Go(t, "sleeping", leaf, 0, workflow.Detached())
		if _, err := d.Get(); !errors.Is(err, workflow.ErrDetached) {
			return "", errors.New("Get of a detached child did not say it is detached")
		}
		runIDs.done, runIDs.sleeping = d.RunID(), s.RunID()
		// The children are created when this turn ends.
		if err := t.Delay("let them start", 10*time.Millisecond); err != nil {
			return "", err
		}
		// Wait, in a step, until the stuck child's step runs and the
		// sleeper's first turn has created the grandchild.
		_, err := workflow.Step(t, "wait for stuck", func(ctx context.Context) (bool, error) {
			select {
			case <-stepStarted:
			case <-ctx.Done():
				return false, ctx.Err()
			}
			for {
				var n int
				if err := pool.QueryRow(ctx, `SELECT count(*) FROM braid_tasks WHERE key = 'grandchild'`).Scan(&n); err != nil || n > 0 {
					return n > 0, err
				}
				select {
				case <-time.After(10 * time.Millisecond):
				case <-ctx.Done():
					return false, ctx.Err()
				}
			}
		})
		return "done", err
	})
	eng := startEngine(t, pool, testConfig(parent, stuck, leaf, sleeper, done))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := parent.Start(ctx, eng, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := run.Result(ctx); err != nil || out != "done" {
		t.Fatalf("Result = %q, %v", out, err)
	}
	statuses := func() map[string]string {
		rows, err := pool.Query(ctx, `SELECT key, status FROM braid_tasks WHERE run_id = $1 AND parent_task_id IS NOT NULL`, run.ID)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		m := map[string]string{}
		for rows.Next() {
			var k, s string
			if err := rows.Scan(&k, &s); err != nil {
				t.Fatal(err)
			}
			m[k] = s
		}
		return m
	}
	want := map[string]string{"stuck": "cancelled", "sleeper": "cancelled", "grandchild": "cancelled"}
	got := statuses()
	for k, s := range want {
		if got[k] != s {
			t.Errorf("child %s is %s, want %s (all: %v)", k, got[k], s, got)
		}
	}
	if n := count(t, pool, `
		SELECT count(*) FROM braid_steps s JOIN braid_tasks k ON k.id = s.task_id
		 WHERE k.run_id = $1 AND s.kind = 'delay' AND s.status = 'waiting'`, run.ID); n != 0 {
		var key, status string
		_ = pool.QueryRow(ctx, `SELECT k.key, k.status FROM braid_steps s JOIN braid_tasks k ON k.id = s.task_id
		 WHERE k.run_id = $1 AND s.kind = 'delay' AND s.status = 'waiting'`, run.ID).Scan(&key, &status)
		t.Errorf("%d delays of the cancelled children still wait (task %s, %s)", n, key, status)
	}
	// The stuck step's context ends (its turn is cancelled through
	// River), and its result is never recorded.
	deadline := time.Now().Add(10 * time.Second)
	for !stepEnded.Load() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !stepEnded.Load() {
		t.Error("the cancelled child's step kept running")
	}
	if n := count(t, pool, `
		SELECT count(*) FROM braid_steps s JOIN braid_tasks k ON k.id = s.task_id
		 WHERE k.run_id = $1 AND k.key = 'stuck' AND s.status = 'completed'`, run.ID); n != 0 {
		t.Errorf("the cancelled child recorded %d steps", n)
	}

	// The detached child completes as a run of its own, started once.
	d, err := done.Get(ctx, eng, runIDs.done)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := d.Result(ctx); err != nil || out != 7 {
		t.Fatalf("the detached child's Result = %d, %v", out, err)
	}
	if n := count(t, pool, `SELECT count(*) FROM ledger WHERE step = 'detached ran'`); n != 1 {
		t.Errorf("the detached child ran %d times, want 1", n)
	}
	// The other detached child waits on its delay, after its parent's run
	// completed, and is cancelled through its own run ID.
	s, err := leaf.Get(ctx, eng, runIDs.sleeping)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Cancel(ctx); err != nil {
		t.Fatalf("cancelling the detached child's run: %v", err)
	}
	if _, err := s.Result(ctx); !errors.Is(err, workflow.ErrCancelled) {
		t.Errorf("the detached child's Result = %v, want cancelled", err)
	}
}

// TestChildrenOfAFailedParentAreCancelled fails a parent on its last
// attempt while a child it did not await waits: the child is cancelled.
func TestChildrenOfAFailedParentAreCancelled(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	leaf := workflow.Define("orphan_fail_leaf", func(t *workflow.Task, _ int) (int, error) {
		if err := t.Delay("long", time.Hour); err != nil {
			return 0, err
		}
		return 1, nil
	})
	parent := workflow.Define("orphan_fail_parent", func(t *workflow.Task, _ int) (int, error) {
		workflow.Go(t, "leaf", leaf, 0)
		// The child is created when this turn ends.
		if err := t.Delay("pause", 10*time.Millisecond); err != nil {
			return 0, err
		}
		return 0, errors.New("the parent gives up")
	}, workflow.WithMaxAttempts(1))
	eng := startEngine(t, pool, testConfig(parent, leaf))
	ctx := ctxTimeout(t, 30*time.Second)
	run, err := parent.Start(ctx, eng, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Result(ctx); err == nil {
		t.Fatal("the parent did not fail")
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_tasks WHERE run_id = $1 AND key = 'leaf' AND status = 'cancelled'`, run.ID); n != 1 {
		t.Errorf("the unawaited child of the failed parent is not cancelled")
	}
}

// TestCancelEndsAClaimedTurn cancels a run whose child's turn, claimed by
// this process as a continuation of its parent's, waits in a step on its
// context: Cancel ends it (River's JobCancel cannot reach a turn River did
// not start; the queue's ownership watch does) and returns once it has.
func TestCancelEndsAClaimedTurn(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	started := make(chan struct{}, 1)
	stuck := workflow.Define("claimed_stuck", func(t *workflow.Task, _ int) (int, error) {
		return workflow.Step(t, "wait", func(ctx context.Context) (int, error) {
			started <- struct{}{}
			<-ctx.Done()
			return 0, ctx.Err()
		})
	})
	parent := workflow.Define("claimed_parent", func(t *workflow.Task, _ int) (int, error) {
		return workflow.Go(t, "child", stuck, 0).Get()
	})
	eng := startEngine(t, pool, testConfig(parent, stuck))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := parent.Start(ctx, eng, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	if n := count(t, pool, `
		SELECT count(*) FROM river_job j JOIN braid_tasks k ON braid_turn_task(j.unique_key, j.args) = k.id
		 WHERE k.run_id = $1 AND k.key = 'child' AND j.state = 'running' AND j.attempted_by IS NOT NULL`, run.ID); n != 1 {
		t.Fatalf("the child's turn is not running")
	}
	if err := eng.Cancel(ctx, run.ID); err != nil {
		t.Fatalf("Cancel = %v, want the stuck turn ended", err)
	}
	if _, err := run.Result(ctx); !errors.Is(err, workflow.ErrCancelled) {
		t.Errorf("Result = %v, want cancelled", err)
	}
}

// detachRuns counts the runs of detachChild's work.
var detachRuns atomic.Int32

var detachChild = workflow.Define("detach_kept_child", func(t *workflow.Task, n int) (int, error) {
	return workflow.Step(t, "report", func(context.Context) (int, error) {
		detachRuns.Add(1)
		return n, nil
	})
})

var detachParent = workflow.Define("detach_kept_parent", func(t *workflow.Task, n int) (string, error) {
	runID := workflow.Go(t, "report", detachChild, n, workflow.Detached()).RunID()
	if _, _, err := workflow.WaitSignal[int](t, "go on", 0); err != nil {
		return "", err
	}
	return runID, nil
})

// TestDetachedChildOutlivedByItsParentIsNotStartedAgain: a parent starts
// a detached child and waits; the child finishes and retention deletes
// its run; the parent's next turn does not start the child again, since
// its own records hold the start. A replay of the parent's code finds its
// history as it recorded it.
func TestDetachedChildOutlivedByItsParentIsNotStartedAgain(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	detachRuns.Store(0)
	cfg := testConfig(detachParent, detachChild)
	cfg.Retention = time.Hour
	cfg.RetentionInterval = 100 * time.Millisecond
	eng := startEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 60*time.Second)

	parent, err := detachParent.Start(ctx, eng, 7, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the parent to wait for its signal", 20*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM braid_steps WHERE kind = 'signal' AND status = 'waiting'`) == 1
	})
	var childID string
	if err := pool.QueryRow(ctx, `
		SELECT s.output #>> '{}' FROM braid_steps s JOIN braid_tasks k ON k.id = s.task_id
		 WHERE k.run_id = $1 AND s.kind = 'detached' AND s.name = 'report' AND s.status = 'completed' AND s.position IS NULL`,
		parent.ID).Scan(&childID); err != nil {
		t.Fatalf("reading the record of the detached child's start: %v", err)
	}
	child, err := detachChild.Get(ctx, eng, childID)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := child.Result(ctx); err != nil || out != 7 {
		t.Fatalf("the detached child's Result = %d, %v", out, err)
	}

	rep, err := eng.CheckReplay(ctx, workflow.ReplayFilter{RunIDs: []string{parent.ID}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Tasks != 1 || len(rep.Divergences) != 0 || len(rep.Problems) != 0 {
		t.Fatalf("replaying the parent with its own code: %d tasks, divergences %v, problems %v", rep.Tasks, rep.Divergences, rep.Problems)
	}
	backdateFinished(t, pool, 2*time.Hour, childID)
	waitFor(t, "retention to delete the detached child's run", 20*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM braid_runs WHERE id = $1`, childID) == 0
	})
	if err := eng.Signal(ctx, parent.ID, "go on", 1, nil); err != nil {
		t.Fatal(err)
	}
	if out, err := parent.Result(ctx); err != nil || out != childID {
		t.Fatalf("the parent's Result = %q, %v; want %q", out, err, childID)
	}
	if n := detachRuns.Load(); n != 1 {
		t.Errorf("the detached child's work ran %d times, want 1", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_runs WHERE id = $1`, childID); n != 0 {
		t.Errorf("the detached child's run was started again after retention deleted it")
	}
}

// retryDetachRuns counts the runs of retryDetachChild's work; retryMended
// lets retryDetachParent's step succeed.
var (
	retryDetachRuns atomic.Int32
	retryMended     atomic.Bool
)

var retryDetachChild = workflow.Define("detach_retry_child", func(t *workflow.Task, n int) (int, error) {
	return workflow.Step(t, "audit", func(context.Context) (int, error) {
		retryDetachRuns.Add(1)
		return n, nil
	})
})

var retryDetachParent = workflow.Define("detach_retry_parent", func(t *workflow.Task, n int) (int, error) {
	workflow.Go(t, "audit", retryDetachChild, n, workflow.Detached())
	// The child starts when this turn ends.
	if err := t.Delay("pause", 10*time.Millisecond); err != nil {
		return 0, err
	}
	return workflow.Step(t, "charge", func(context.Context) (int, error) {
		if !retryMended.Load() {
			return 0, errors.New("the card was declined")
		}
		return n, nil
	})
}, workflow.WithMaxAttempts(1))

// TestRetryOfAParentKeepsItsDetachedChildStarted: a parent starts a
// detached child and then fails; retention deletes the child's finished
// run; Retry of the parent runs its code again from the start, and the
// record of the start, which Retry keeps, stops the child from starting
// again.
func TestRetryOfAParentKeepsItsDetachedChildStarted(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	retryDetachRuns.Store(0)
	cfg := testConfig(retryDetachParent, retryDetachChild)
	cfg.Retention = time.Hour
	cfg.RetentionInterval = 100 * time.Millisecond
	eng := startEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 60*time.Second)

	parent, err := retryDetachParent.Start(ctx, eng, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parent.Result(ctx); err == nil {
		t.Fatal("the parent completed; its step should fail")
	}
	var childID string
	if err := pool.QueryRow(ctx, `SELECT id::text FROM braid_runs WHERE workflow = 'detach_retry_child'`).Scan(&childID); err != nil {
		t.Fatal(err)
	}
	child, err := retryDetachChild.Get(ctx, eng, childID)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := child.Result(ctx); err != nil || out != 3 {
		t.Fatalf("the detached child's Result = %d, %v", out, err)
	}
	backdateFinished(t, pool, 2*time.Hour, childID)
	waitFor(t, "retention to delete the detached child's run", 20*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM braid_runs WHERE id = $1`, childID) == 0
	})

	retryMended.Store(true)
	if err := eng.Retry(ctx, parent.ID); err != nil {
		t.Fatal(err)
	}
	if out, err := parent.Result(ctx); err != nil || out != 3 {
		t.Fatalf("the retried parent's Result = %d, %v", out, err)
	}
	if n := retryDetachRuns.Load(); n != 1 {
		t.Errorf("the detached child's work ran %d times, want 1", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_runs WHERE id = $1`, childID); n != 0 {
		t.Errorf("the retried parent started its detached child again")
	}
}
