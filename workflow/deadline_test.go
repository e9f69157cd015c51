package workflow_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// requireTimedOut checks that err is the error of the run runID of
// workflow wf that its deadline of timeout cancelled: a *TimeoutError
// (with the deadline the run stored), a *RunError of a cancelled run, and
// ErrCancelled.
func requireTimedOut(t *testing.T, pool *pgxpool.Pool, err error, runID, wf string, timeout time.Duration) *workflow.TimeoutError {
	t.Helper()
	var te *workflow.TimeoutError
	if !errors.As(err, &te) {
		t.Fatalf("Result = %v (%T), want a *TimeoutError", err, err)
	}
	if !errors.Is(err, workflow.ErrCancelled) {
		t.Errorf("errors.Is(%v, ErrCancelled) = false, want true: the run was cancelled", err)
	}
	var re *workflow.RunError
	if !errors.As(err, &re) || re.Status != "cancelled" || re.RunID != runID {
		t.Errorf("Result = %v, want a *RunError of run %s, cancelled", err, runID)
	}
	if te.RunID != runID || te.Workflow != wf || te.Timeout != timeout {
		t.Errorf("TimeoutError = %+v, want run %s of workflow %q with timeout %s", te, runID, wf, timeout)
	}
	var created, deadline time.Time
	if err := pool.QueryRow(context.Background(), `SELECT created_at, deadline_at FROM braid_runs WHERE id = $1`, runID).Scan(&created, &deadline); err != nil {
		t.Fatal(err)
	}
	if !te.Deadline.Equal(deadline) || deadline.Sub(created) != timeout {
		t.Errorf("TimeoutError deadline %s; the run was created at %s with deadline %s, want its timeout %s later",
			te.Deadline, created, deadline, timeout)
	}
	if !strings.Contains(err.Error(), timeout.String()) {
		t.Errorf("error %q does not name the timeout %s", err, timeout)
	}
	var kind, msg string
	if err := pool.QueryRow(context.Background(), `SELECT error->>'kind', error->>'message' FROM braid_runs WHERE id = $1`, runID).Scan(&kind, &msg); err != nil {
		t.Fatal(err)
	}
	if kind != "timeout" || !strings.Contains(msg, timeout.String()) {
		t.Errorf("stored error of kind %q, message %q; want kind timeout, naming %s", kind, msg, timeout)
	}
	return te
}

// TestRunDeadlineCancelsADelayAndAChild: a run sleeps in an hour-long
// delay while its child is stuck in a step that waits on its context.
// Once its deadline passes, the run is cancelled with everything in it,
// as Cancel cancels it (the child's running turn job included), and
// Result returns a *TimeoutError.
func TestRunDeadlineCancelsADelayAndAChild(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	stepStarted, stepEnded, release := make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	stuck := workflow.Define("deadline_stuck_child", func(t *workflow.Task, _ struct{}) (struct{}, error) {
		return workflow.Step(t, "wait", func(ctx context.Context) (struct{}, error) {
			stepStarted <- struct{}{}
			select {
			case <-ctx.Done():
				close(stepEnded)
				return struct{}{}, ctx.Err()
			case <-release:
				return struct{}{}, errors.New("released as the test ends")
			}
		})
	})
	root := workflow.Define("deadline_sleeper", func(t *workflow.Task, _ struct{}) (string, error) {
		child := workflow.Go(t, "child", stuck, struct{}{})
		if err := t.Delay("long", time.Hour); err != nil {
			return "", err
		}
		_, err := child.Get()
		return "woke", err
	})
	eng := startEngine(t, pool, testConfig(root, stuck))
	// Should the step still run as the test ends, release it before the
	// engine stops.
	t.Cleanup(func() { close(release) })
	ctx := ctxTimeout(t, 60*time.Second)
	const timeout = 2 * time.Second
	run, err := root.Start(ctx, eng, struct{}{}, &workflow.StartOpts{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-stepStarted:
	case <-ctx.Done():
		t.Fatal("the child's step never started")
	}
	_, err = run.Result(ctx)
	requireTimedOut(t, pool, err, run.ID, "deadline_sleeper", timeout)

	if n := count(t, pool, `SELECT count(*) FROM braid_tasks WHERE run_id = $1`, run.ID); n != 2 {
		t.Fatalf("%d tasks, want the root and its child", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_tasks WHERE run_id = $1 AND (status <> 'cancelled' OR error->>'kind' <> 'timeout')`, run.ID); n != 0 {
		t.Errorf("%d tasks not cancelled by the timeout", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_steps WHERE name = 'long' AND kind = 'delay' AND status = 'cancelled'`); n != 1 {
		t.Errorf("the hour-long delay is not cancelled")
	}
	// The child's turn, running at the deadline, is cancelled in River as
	// Cancel cancels it: its step's context ends, and its job ends
	// cancelled.
	select {
	case <-stepEnded:
	case <-time.After(10 * time.Second):
		t.Fatal("the child's step kept running after the deadline cancelled its run")
	}
	for {
		n := count(t, pool, `
			SELECT count(*) FROM river_job j JOIN braid_tasks k ON braid_turn_task(j.unique_key, j.args) = k.id
			 WHERE k.run_id = $1 AND k.key = 'child' AND j.state = 'cancelled'`, run.ID)
		if n == 1 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the child's running turn job did not end cancelled")
		case <-time.After(20 * time.Millisecond):
		}
	}
	if n := count(t, pool, `
		SELECT count(*) FROM river_job j JOIN braid_tasks k ON braid_turn_task(j.unique_key, j.args) = k.id
		 WHERE k.run_id = $1 AND j.state IN ('available', 'pending', 'retryable', 'scheduled')`, run.ID); n != 0 {
		t.Errorf("%d turn jobs of the run are still to run", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_steps WHERE name = 'wait' AND status = 'completed'`); n != 0 {
		t.Errorf("the child's step was recorded after the cancel")
	}
}

// TestRunDeadlineCancelsADAGRun: the deadline of a DAG run cancels its
// nodes: the one sleeping in a delay, the one blocked behind it, and the
// one whose step is running, whose turn learns of it through its context.
func TestRunDeadlineCancelsADAGRun(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ledger(t, pool)
	stepStarted, stepEnded := make(chan struct{}, 1), make(chan error, 1)
	busy := workflow.Define("deadline_busy", func(t *workflow.Task, in dagIn) (string, error) {
		return workflow.Step(t, "wait", func(ctx context.Context) (string, error) {
			stepStarted <- struct{}{}
			<-ctx.Done()
			stepEnded <- ctx.Err()
			return "", ctx.Err()
		})
	})
	nap := workflow.Define("deadline_nap", func(t *workflow.Task, in dagIn) (string, error) {
		if err := t.Delay("nap", time.Hour); err != nil {
			return "", err
		}
		return "rested", nil
	})
	next := workflow.Define("deadline_next", func(t *workflow.Task, in dagIn) (string, error) {
		return "next", recordStep(pool, t, "next")
	})
	dag := workflow.DAG[dagIn]("deadline_dag",
		workflow.Node("nap", nap), workflow.Node("next", next, workflow.After("nap")), workflow.Node("busy", busy))
	eng := startEngine(t, pool, testConfig(dag, nap, next, busy))
	ctx := ctxTimeout(t, 60*time.Second)
	const timeout = time.Second
	run, err := dag.Start(ctx, eng, dagIn{}, &workflow.StartOpts{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-stepStarted:
	case <-ctx.Done():
		t.Fatal("the busy node's step never started")
	}
	_, err = run.Result(ctx)
	requireTimedOut(t, pool, err, run.ID, "deadline_dag", timeout)
	select {
	case err := <-stepEnded:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the busy node's step ended with %v, want its context cancelled", err)
		}
	case <-ctx.Done():
		t.Fatal("the busy node's running step was never told of the cancel")
	}
	status, _ := nodeStatuses(t, pool, run.ID)
	if diff := cmp.Diff(map[string]string{"nap": "cancelled", "next": "cancelled", "busy": "cancelled"}, status); diff != "" {
		t.Errorf("node statuses (-want +got):\n%s", diff)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_tasks WHERE run_id = $1 AND status <> 'cancelled'`, run.ID); n != 0 {
		t.Errorf("%d tasks of the DAG run not cancelled", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_steps WHERE kind = 'delay' AND status <> 'cancelled'`); n != 0 {
		t.Errorf("%d delays not cancelled", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM ledger`); n != 0 {
		t.Errorf("the blocked node ran %d times", n)
	}
	waitFor(t, "the run's turn jobs to end", 30*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM river_job WHERE state NOT IN ('completed', 'cancelled', 'discarded')`) == 0
	})
	if n := count(t, pool, `SELECT count(*) FROM braid_steps WHERE name = 'wait' AND status = 'completed'`); n != 0 {
		t.Errorf("the busy node's step was recorded after the cancel")
	}
}

// TestRunDeadlineLeavesAFinishedRunAlone: a run that completes before its
// deadline (set by WithRunTimeout) stays completed once the deadline has
// passed. A later deadline's firing shows the processor has looked past
// it: it cancels runs in the order of their deadlines. StartOpts.Timeout
// overrides the definition's.
func TestRunDeadlineLeavesAFinishedRunAlone(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	quick := workflow.Define("deadline_quick", func(t *workflow.Task, n int) (int, error) { return n * 2, nil },
		workflow.WithRunTimeout(time.Second))
	sleepy := workflow.Define("deadline_sleepy", func(t *workflow.Task, _ struct{}) (int, error) {
		if err := t.Delay("long", time.Hour); err != nil {
			return 0, err
		}
		return 1, nil
	}, workflow.WithRunTimeout(time.Hour))
	eng := startEngine(t, pool, testConfig(quick, sleepy))
	ctx := ctxTimeout(t, 60*time.Second)
	done, err := quick.Start(ctx, eng, 21, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := done.Result(ctx); err != nil || out != 42 {
		t.Fatalf("Result = %d, %v; want 42", out, err)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_runs WHERE id = $1 AND deadline_at = created_at + interval '1 second'`, done.ID); n != 1 {
		t.Fatal("the run has no deadline one second after it started (WithRunTimeout)")
	}
	// Its deadline is before this one's.
	later, err := sleepy.Start(ctx, eng, struct{}{}, &workflow.StartOpts{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_, err = later.Result(ctx)
	requireTimedOut(t, pool, err, later.ID, "deadline_sleepy", time.Second)

	var status string
	var errJSON []byte
	if err := pool.QueryRow(ctx, `SELECT status, error FROM braid_runs WHERE id = $1`, done.ID).Scan(&status, &errJSON); err != nil {
		t.Fatal(err)
	}
	if status != "completed" || errJSON != nil {
		t.Fatalf("the completed run is %s with error %s after its deadline passed, want completed without error", status, errJSON)
	}
	if out, err := done.Result(ctx); err != nil || out != 42 {
		t.Fatalf("Result after the deadline = %d, %v; want 42", out, err)
	}
}

// TestRetryOfATimedOutRunGetsAFreshDeadline: runs started together with
// StartMany, one with a timeout and one without; the first times out, the
// second sleeps on. Retry gives the timed-out run its timeout again,
// counted from the retry, and it times out again.
func TestRetryOfATimedOutRunGetsAFreshDeadline(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	sleepy := workflow.Define("deadline_retried", func(t *workflow.Task, _ struct{}) (int, error) {
		if err := t.Delay("long", time.Hour); err != nil {
			return 0, err
		}
		return 1, nil
	})
	eng := startEngine(t, pool, testConfig(sleepy))
	ctx := ctxTimeout(t, 60*time.Second)
	const timeout = time.Second
	runs, err := sleepy.StartMany(ctx, eng, []workflow.StartManyParams[struct{}]{
		{Opts: &workflow.StartOpts{Timeout: timeout}},
		{},
	})
	if err != nil {
		t.Fatal(err)
	}
	run, other := runs[0], runs[1]
	_, err = run.Result(ctx)
	first := requireTimedOut(t, pool, err, run.ID, "deadline_retried", timeout)
	if n := count(t, pool, `SELECT count(*) FROM braid_runs WHERE id = $1 AND deadline_at IS NULL AND timeout IS NULL AND status NOT IN ('completed', 'failed', 'cancelled')`, other.ID); n != 1 {
		t.Errorf("the run started without a timeout has a deadline, or is finished")
	}

	if err := run.Retry(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = run.Result(ctx)
	var te *workflow.TimeoutError
	if !errors.As(err, &te) {
		t.Fatalf("Result after Retry = %v, want a *TimeoutError again", err)
	}
	if te.Timeout != timeout || !te.Deadline.After(first.Deadline) {
		t.Errorf("after Retry: timeout %s, deadline %s; want %s, after the first deadline %s", te.Timeout, te.Deadline, timeout, first.Deadline)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_steps WHERE kind = 'delay' AND status = 'waiting'`); n != 1 {
		t.Errorf("%d delays waiting, want only the run without a timeout's", n)
	}
}

// TestRunTimeoutBadInput: a negative timeout is refused with its value,
// at definition time and at start time, and starts nothing.
func TestRunTimeoutBadInput(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	bad := workflow.Define("deadline_negative", func(t *workflow.Task, n int) (int, error) { return n, nil }, workflow.WithRunTimeout(-1))
	_, err := workflow.NewEngine(pool, testConfig(bad))
	var de *workflow.DefinitionError
	if !errors.As(err, &de) || de.Workflow != "deadline_negative" || !strings.Contains(err.Error(), "run timeout -1ns is negative") {
		t.Fatalf("NewEngine with WithRunTimeout(-1) = %v, want a *DefinitionError naming the workflow and -1ns", err)
	}

	wf := workflow.Define("deadline_input", func(t *workflow.Task, n int) (int, error) { return n, nil })
	eng := newEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 30*time.Second)
	_, err = wf.Start(ctx, eng, 1, &workflow.StartOpts{Timeout: -time.Second})
	if err == nil || !strings.Contains(err.Error(), "-1s") || !strings.Contains(err.Error(), "negative") {
		t.Fatalf("Start with Timeout -1s = %v, want an error naming -1s as negative", err)
	}
	_, err = wf.StartMany(ctx, eng, []workflow.StartManyParams[int]{
		{Input: 1},
		{Input: 2, Opts: &workflow.StartOpts{Timeout: -90 * time.Minute}},
	})
	if err == nil || !strings.Contains(err.Error(), "-1h30m0s") {
		t.Fatalf("StartMany with Timeout -90m = %v, want an error naming -1h30m0s", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_runs`); n != 0 {
		t.Fatalf("%d runs started with a negative timeout", n)
	}
}

// TestRunDeadlineSurvivesAWorkerRestart: a worker process runs a run into
// an hour-long delay and is killed (SIGKILL) before the run's deadline.
// The deadline passes with no process alive; a new worker, started after
// it, cancels the run, which ends timed out. The step after the delay
// never runs.
func TestRunDeadlineSurvivesAWorkerRestart(t *testing.T) {
	t.Parallel()
	url := testutil.URL(t)
	pool := testutil.Pool(t, url)
	ledger(t, pool)
	eng := newEngine(t, pool, crashConfig()) // starts runs, works nothing
	ctx := ctxTimeout(t, 90*time.Second)

	a := startWorker(t, url, false)
	waitFor(t, "the worker to run the delay processor", 30*time.Second, func() bool {
		var holder string
		err := pool.QueryRow(ctx, `SELECT holder FROM braid_leases WHERE name = $1 AND expires_at > now()`, workflow.DelayLease).Scan(&holder)
		return err == nil && strings.Contains(holder, "-"+strconv.Itoa(a.Process.Pid)+"-")
	})
	const timeout = 5 * time.Second
	run, err := crashSleepy.Start(ctx, eng, time.Hour, &workflow.StartOpts{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the delay to start", 30*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM braid_steps s JOIN braid_tasks k ON k.id = s.task_id
			WHERE k.run_id = $1 AND s.kind = 'delay' AND s.status = 'waiting'`, run.ID) == 1
	})
	kill(t, a)

	waitFor(t, "the deadline to pass", 30*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM braid_runs WHERE id = $1 AND deadline_at < clock_timestamp()`, run.ID) == 1
	})
	if n := count(t, pool, `SELECT count(*) FROM braid_runs WHERE id = $1 AND status IN ('completed', 'failed', 'cancelled')`, run.ID); n != 0 {
		t.Fatal("the run finished before the worker was killed; its deadline must pass while no process is alive")
	}
	var restartedAt time.Time
	if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&restartedAt); err != nil {
		t.Fatal(err)
	}
	startWorker(t, url, false)
	_, err = run.Result(ctx)
	requireTimedOut(t, pool, err, run.ID, "crash_sleepy", timeout)
	if n := count(t, pool, `SELECT count(*) FROM braid_runs WHERE id = $1 AND finished_at >= $2`, run.ID, restartedAt); n != 1 {
		t.Error("the run was not cancelled by the restarted worker")
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_steps WHERE kind = 'delay' AND status = 'cancelled'`); n != 1 {
		t.Error("the delay is not cancelled")
	}
	if n := count(t, pool, `SELECT count(*) FROM ledger WHERE step = 'after'`); n != 0 {
		t.Errorf("the step after the delay ran %d times", n)
	}
}

// TestDeadlineCancelsHeldByLocksDoNotHoldBackDueDelays: the delay
// processor starts a pass over many runs whose deadline has passed and
// whose tasks another transaction holds, so that each cancel waits out its
// lock timeout; one run after them is free. A delay falls due during the
// pass. It must be woken before the pass reaches the free run, not after
// the whole pass.
func TestDeadlineCancelsHeldByLocksDoNotHoldBackDueDelays(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	sleeper := workflow.Define("deadline_held_sleeper", func(t *workflow.Task, _ struct{}) (struct{}, error) {
		return struct{}{}, t.Delay("long", time.Hour)
	})
	waker := workflow.Define("deadline_held_waker", func(t *workflow.Task, at time.Time) (struct{}, error) {
		return struct{}{}, t.DelayUntil("wake", at)
	})
	ctx := ctxTimeout(t, 60*time.Second)
	// The runs start, and their deadlines pass, with no delay processor.
	starterCfg := testConfig(sleeper, waker)
	starterCfg.DisableDelayProcessor = true
	starter := startEngine(t, pool, starterCfg)
	const held = 20
	var ids []string
	for range held + 1 { // the last one is the free one, with the latest deadline
		run, err := sleeper.Start(ctx, starter, struct{}{}, &workflow.StartOpts{Timeout: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, run.ID)
	}
	free := ids[held]
	for count(t, pool, `SELECT count(*) FROM braid_tasks WHERE status = 'waiting'`) < held+1 ||
		count(t, pool, `SELECT count(*) FROM braid_runs WHERE deadline_at > now()`) > 0 {
		select {
		case <-ctx.Done():
			t.Fatal("the runs never all waited past their deadlines")
		case <-time.After(20 * time.Millisecond):
		}
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM braid_tasks WHERE run_id::text = ANY($1) FOR UPDATE`, ids[:held]); err != nil {
		t.Fatal(err)
	}

	// The delay processor starts its pass; the delay falls due 300 ms
	// after it can have started, when 20 cancels of 100 ms each are far
	// from done.
	startEngine(t, pool, testConfig(sleeper, waker))
	for count(t, pool, `SELECT count(*) FROM braid_leases WHERE name = $1 AND expires_at > now()`, workflow.DelayLease) == 0 {
		select {
		case <-ctx.Done():
			t.Fatal("the delay processor never started")
		case <-time.After(5 * time.Millisecond):
		}
	}
	var at time.Time
	if err := pool.QueryRow(ctx, `SELECT clock_timestamp() + interval '300 milliseconds'`).Scan(&at); err != nil {
		t.Fatal(err)
	}
	wake, err := waker.Start(ctx, starter, at, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wake.Result(ctx); err != nil {
		t.Fatal(err)
	}
	var beforeFree bool
	if err := pool.QueryRow(ctx, `
		SELECT s.finished_at < coalesce((SELECT finished_at FROM braid_runs WHERE id = $2), 'infinity')
		  FROM braid_steps s JOIN braid_tasks t ON t.id = s.task_id
		 WHERE t.run_id = $1 AND s.name = 'wake'`, wake.ID, free).Scan(&beforeFree); err != nil {
		t.Fatal(err)
	}
	if !beforeFree {
		t.Error("the due delay was woken only after the pass of deadline cancels reached the free run")
	}
}

// waitsForever waits for a signal that never comes.
var waitsForever = workflow.Define("waits_forever", func(t *workflow.Task, n int) (int, error) {
	v, _, err := workflow.WaitSignal[int](t, "never", 0)
	return v, err
})

// A run whose deadline's cancel takes longer than OutcomeTimeout (a wide
// run: many unfinished tasks) is set aside and tried again with twice as
// long, until its cancel fits: its deadline still ends it, where a cancel
// cut at the same bound at every pass never would.
func TestDeadlineOfAWideRunIsCancelledWhateverItTakes(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	cfg := testConfig(waitsForever)
	cfg.OutcomeTimeout = 200 * time.Millisecond
	eng := startEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 120*time.Second)
	run, err := waitsForever.Start(ctx, eng, 1, &workflow.StartOpts{Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the root to wait", 10*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM braid_tasks WHERE run_id = $1 AND parent_task_id IS NULL AND status = 'waiting'`, run.ID) == 1
	})
	// A wide fan-out under the root, its children waiting.
	execSQL(t, pool, `
		INSERT INTO braid_tasks (id, run_id, parent_task_id, key, workflow, status, input, queue)
		SELECT gen_random_uuid(), r.run_id, r.id, 'c' || i, 'waits_forever', 'waiting', '1', 'default'
		  FROM (SELECT id, run_id FROM braid_tasks WHERE run_id = $1 AND parent_task_id IS NULL) r,
		       generate_series(1, 40000) i`, run.ID)
	execSQL(t, pool, `UPDATE braid_runs SET deadline_at = braid_now() WHERE id = $1`, run.ID)
	var te *workflow.TimeoutError
	if _, err := run.Result(ctx); !errors.As(err, &te) {
		t.Fatalf("the wide run past its deadline: %v; want it cancelled by its deadline", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_tasks WHERE run_id = $1 AND status <> 'cancelled'`, run.ID); n != 0 {
		t.Errorf("%d tasks of the run its deadline cancelled are not cancelled", n)
	}
}

// TestOverdueRunsHeldByLocksDoNotHideTheRunsAfterThem: a full batch of
// runs whose deadline has passed (DelayBatchSize of them, the earliest
// deadlines) have their tasks held by another transaction, so that each
// cancel waits out its lock timeout; a run whose deadline passed later is
// free. The held runs must not fill every look for overdue runs: the free
// run is cancelled while they are still held, and they are once the
// transaction ends.
func TestOverdueRunsHeldByLocksDoNotHideTheRunsAfterThem(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	sleeper := workflow.Define("deadline_hidden_sleeper", func(t *workflow.Task, _ struct{}) (struct{}, error) {
		return struct{}{}, t.Delay("long", time.Hour)
	})
	ctx := ctxTimeout(t, 60*time.Second)
	starterCfg := testConfig(sleeper)
	starterCfg.DisableDelayProcessor = true
	starter := startEngine(t, pool, starterCfg)
	const held = 2
	var ids []string
	for i := range held + 1 { // the last one is the free one, with the latest deadline
		run, err := sleeper.Start(ctx, starter, struct{}{}, &workflow.StartOpts{Timeout: time.Duration(100*(i+1)) * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, run.ID)
	}
	free := ids[held]
	waitFor(t, "the runs to wait past their deadlines", 20*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM braid_tasks WHERE status = 'waiting'`) == held+1 &&
			count(t, pool, `SELECT count(*) FROM braid_runs WHERE deadline_at > now()`) == 0
	})
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM braid_tasks WHERE run_id::text = ANY($1) FOR UPDATE`, ids[:held]); err != nil {
		t.Fatal(err)
	}

	cfg := testConfig(sleeper)
	cfg.DelayBatchSize = held
	startEngine(t, pool, cfg)
	waitFor(t, "the free overdue run to be cancelled while the others are held", 20*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM braid_runs WHERE id = $1 AND status = 'cancelled'`, free) == 1
	})
	if n := count(t, pool, `SELECT count(*) FROM braid_runs WHERE id::text = ANY($1) AND status = 'cancelled'`, ids[:held]); n != 0 {
		t.Fatalf("%d held runs were cancelled while their tasks were held", n)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the held runs to be cancelled once released", 20*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM braid_runs WHERE id::text = ANY($1) AND status = 'cancelled'`, ids[:held]) == held
	})
}
