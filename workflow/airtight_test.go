package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// The triggers of a stranded run: each is a last attempt that ends without
// the engine's failure path committing. Each must end with the task and
// the run failed within 10 s, and Retry must then complete the run.

const settleBound = 10 * time.Second

// requireFailed waits up to settleBound for the run and all its tasks to be
// failed, and returns the root task's stored error message.
func requireFailed(t *testing.T, pool *pgxpool.Pool, eng *workflow.Engine, runID string) string {
	t.Helper()
	ctx := ctxTimeout(t, settleBound+5*time.Second)
	deadline := time.Now().Add(settleBound)
	for {
		info, err := eng.Run(ctx, runID)
		if err != nil {
			t.Fatal(err)
		}
		if info.Status == "failed" && info.Tasks[0].Status == "failed" {
			return info.Tasks[0].Error
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s is %s (root task %s) %s after its last attempt; want failed", runID, info.Status, info.Tasks[0].Status, settleBound)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func retryAndComplete[Out any](t *testing.T, eng *workflow.Engine, run *workflow.Run[Out]) Out {
	t.Helper()
	ctx := ctxTimeout(t, 30*time.Second)
	if err := eng.Retry(ctx, run.ID); err != nil {
		t.Fatalf("Retry: %v", err)
	}
	out, err := run.Result(ctx)
	if err != nil {
		t.Fatalf("the retried run did not complete: %v", err)
	}
	return out
}

func TestTimeoutOnTheLastAttemptFailsTheRun(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	var fixed atomic.Bool
	wf := workflow.Define("slow_last", func(t *workflow.Task, _ struct{}) (string, error) {
		return workflow.Step(t, "wait", func(ctx context.Context) (string, error) {
			if fixed.Load() {
				return "done", nil
			}
			<-ctx.Done()
			return "", ctx.Err()
		})
	}, workflow.WithTimeout(300*time.Millisecond), workflow.WithMaxAttempts(1))
	eng := startEngine(t, pool, testConfig(wf))
	run, err := wf.Start(ctxTimeout(t, 5*time.Second), eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	msg := requireFailed(t, pool, eng, run.ID)
	if !strings.Contains(msg, "deadline exceeded") {
		t.Errorf("task error %q does not say the attempt timed out", msg)
	}
	fixed.Store(true)
	if out := retryAndComplete(t, eng, run); out != "done" {
		t.Fatalf("output %q", out)
	}
}

func TestUnknownWorkflowOnTheOnlyProcessFailsTheRunThenRetryCompletes(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	known := workflow.Define("deployed_later", func(t *workflow.Task, in int) (int, error) { return in * 2, nil })
	other := workflow.Define("something_else", func(t *workflow.Task, in int) (int, error) { return in, nil })

	// The only working process does not know the workflow.
	cfg := testConfig(other)
	cfg.UnknownWorkflowSnooze = 100 * time.Millisecond
	cfg.UnknownWorkflowTimeout = time.Second
	old, err := workflow.NewEngine(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	starter := newEngine(t, pool, testConfig(known))
	run, err := known.Start(ctxTimeout(t, 5*time.Second), starter, 21, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The turn is snoozed, never spent: while it waits, the task is still
	// pending and the job has not used its attempt.
	waitFor(t, "the turn to be put back once", 10*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM river_job WHERE kind = 'braid_task' AND (metadata->>'snoozes')::int >= 1`) == 1
	})
	if n := count(t, pool, `SELECT count(*) FROM braid_tasks WHERE status = 'pending'`); n != 1 {
		t.Fatalf("%d pending tasks while the turn waits for a process that knows it, want 1", n)
	}
	msg := requireFailed(t, pool, old, run.ID)
	if !strings.Contains(msg, `"deployed_later" is not registered`) {
		t.Errorf("task error %q does not name the unknown workflow", msg)
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := old.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}

	// The deploy completes: a process that knows the workflow retries it.
	eng := startEngine(t, pool, testConfig(known))
	if out := retryAndComplete(t, eng, run); out != 42 {
		t.Fatalf("output %d, want 42", out)
	}
}

type nulIn struct{ Fail bool }

// plainArgs is a plain River job that runs beside the workflows.
type plainArgs struct{ N int }

func (plainArgs) Kind() string { return "airtight_plain" }

type plainWorker struct {
	river.WorkerDefaults[plainArgs]
	done *atomic.Int64
}

func (w *plainWorker) Work(ctx context.Context, job *river.Job[plainArgs]) error {
	w.done.Add(1)
	return nil
}

func TestNULErrorFailsCleanlyWhileOtherWorkCompletes(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	var fixed atomic.Bool
	nul := workflow.Define("nul_error", func(t *workflow.Task, in nulIn) (string, error) {
		if fixed.Load() {
			return "ok", nil
		}
		return "", fmt.Errorf("bad\x00byte and %s", strings.Repeat("x", 1<<20))
	}, workflow.WithMaxAttempts(1))
	var attempts atomic.Int64
	flaky := workflow.Define("needs_a_retry", func(t *workflow.Task, _ struct{}) (int, error) {
		if attempts.Add(1) == 1 {
			return 0, errors.New("first attempt fails")
		}
		return 7, nil
	}, workflow.WithRetry(fast))

	var plainDone atomic.Int64
	cfg := testConfig(nul, flaky)
	cfg.Queue.Workers = river.NewWorkers()
	river.AddWorker(cfg.Queue.Workers, &plainWorker{done: &plainDone})
	eng := startEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 30*time.Second)

	bad, err := nul.Start(ctx, eng, nulIn{Fail: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	msg := requireFailed(t, pool, eng, bad.ID)
	if strings.ContainsRune(msg, 0) || !strings.Contains(msg, "badbyte") {
		t.Errorf("stored error is not the sanitised text: %.80q", msg)
	}
	if len(msg) > 64<<10 || !strings.Contains(msg, "bytes cut") {
		t.Errorf("stored error is %d bytes and does not say it was cut", len(msg))
	}
	waitFor(t, "the failed turn's job to be a dead letter", 10*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM river_job WHERE kind = 'braid_task' AND state = 'discarded'`) == 1
	})
	var jobErr string
	if err := pool.QueryRow(ctx, `SELECT errors[1]->>'error' FROM river_job WHERE kind = 'braid_task' AND state = 'discarded'`).Scan(&jobErr); err != nil {
		t.Fatalf("the failed turn's job is not a dead letter with its error: %v", err)
	}
	if strings.ContainsRune(jobErr, 0) || len(jobErr) > 64<<10 {
		t.Errorf("the job's attempt error is not sanitised (%d bytes)", len(jobErr))
	}

	// Meanwhile, and afterwards, the completer still completes: a run that
	// needs a retry, and a plain job.
	other, err := flaky.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Queue().River().Insert(ctx, plainArgs{N: 1}, nil); err != nil {
		t.Fatal(err)
	}
	if out, err := other.Result(ctx); err != nil || out != 7 {
		t.Fatalf("the unrelated run: %d, %v", out, err)
	}
	waitFor(t, "the plain job to complete", 10*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM river_job WHERE kind = 'airtight_plain' AND state = 'completed'`) == 1
	})
	fixed.Store(true)
	if out := retryAndComplete(t, eng, bad); out != "ok" {
		t.Fatalf("output %q", out)
	}
}

// TestOutcomeThatLostAConflictIsTriedAgain: the transaction of a batch of
// one outcome, on its turn's last attempt, loses a conflict with another
// transaction (a deadlock, injected once). It is tried again, so the
// outcome is recorded and the run completes, without the attempt spent.
func TestOutcomeThatLostAConflictIsTriedAgain(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	execSQL(t, pool, `CREATE SEQUENCE conflicts`)
	execSQL(t, pool, `
		CREATE FUNCTION lose_a_conflict() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		    IF NEW.status = 'completed' AND NEW.workflow = 'conflicted' AND nextval('conflicts') = 1 THEN
		        RAISE EXCEPTION 'injected deadlock' USING ERRCODE = '40P01';
		    END IF;
		    RETURN NEW;
		END $$`)
	execSQL(t, pool, `CREATE TRIGGER lose_a_conflict BEFORE UPDATE ON braid_tasks FOR EACH ROW EXECUTE FUNCTION lose_a_conflict()`)
	wf := workflow.Define("conflicted", func(t *workflow.Task, _ struct{}) (int, error) {
		return workflow.Step(t, "one", func(ctx context.Context) (int, error) { return 1, nil })
	}, workflow.WithMaxAttempts(1))
	eng := startEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 30*time.Second)
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := run.Result(ctx); err != nil || got != 1 {
		t.Fatalf("Result = %d, %v; want 1, the outcome recorded on its second try", got, err)
	}
	if n := count(t, pool, `SELECT last_value FROM conflicts`); n < 2 {
		t.Fatalf("the completion was tried %d times; want the injected conflict, then a success", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM river_job WHERE state = 'completed' AND attempt = 1`); n != 1 {
		t.Fatalf("%d turn jobs completed on their first attempt; want the run's one", n)
	}
}

func TestFailedOutcomeTransactionOnTheLastAttemptFailsTheRun(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	// A trigger makes the completing transaction fail, as a deadlock
	// victim would, while armed.
	execSQL(t, pool, `CREATE TABLE armed (on_ boolean NOT NULL)`)
	execSQL(t, pool, `INSERT INTO armed VALUES (true)`)
	execSQL(t, pool, `
		CREATE FUNCTION refuse_completion() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		    IF NEW.status = 'completed' AND NEW.workflow = 'forced_tx' AND (SELECT on_ FROM armed) THEN
		        RAISE EXCEPTION 'injected failure of the outcome transaction';
		    END IF;
		    RETURN NEW;
		END $$`)
	execSQL(t, pool, `CREATE TRIGGER refuse_completion BEFORE UPDATE ON braid_tasks FOR EACH ROW EXECUTE FUNCTION refuse_completion()`)
	wf := workflow.Define("forced_tx", func(t *workflow.Task, _ struct{}) (int, error) {
		return workflow.Step(t, "one", func(ctx context.Context) (int, error) { return 1, nil })
	}, workflow.WithMaxAttempts(1))
	eng := startEngine(t, pool, testConfig(wf))
	run, err := wf.Start(ctxTimeout(t, 5*time.Second), eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	msg := requireFailed(t, pool, eng, run.ID)
	if !strings.Contains(msg, "discarded") || !strings.Contains(msg, "injected failure") {
		t.Errorf("task error %q does not say the turn ended without an outcome, with its error", msg)
	}
	execSQL(t, pool, `UPDATE armed SET on_ = false`)
	if out := retryAndComplete(t, eng, run); out != 1 {
		t.Fatalf("output %d", out)
	}
}

// dupArgs has the JSON shape of a turn's args, so that inserting it with a
// turn's unique options makes a second live turn of the same task.
type dupArgs struct {
	TaskID   string `json:"task_id"`
	Workflow string `json:"workflow"`
}

func (dupArgs) Kind() string { return workflow.TaskKind }

func TestDuplicateLiveTurnDoesNotDelayOtherDelays(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	wf := workflow.Define("nap_then_done", func(t *workflow.Task, _ struct{}) (int, error) {
		if err := t.Delay("nap", 2*time.Second); err != nil {
			return 0, err
		}
		return 1, nil
	})
	eng := startEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 30*time.Second)
	runs := make([]*workflow.Run[int], 6)
	for i := range runs {
		r, err := wf.Start(ctx, eng, struct{}{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		runs[i] = r
	}
	waitFor(t, "six waiting delays", 10*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM braid_steps WHERE kind = 'delay' AND status = 'waiting'`) == 6
	})
	// Force the first task into the duplicate-live-turn state: a live turn
	// exists while it waits on its delay, and all six delays are due at
	// the same instant.
	var taskID string
	if err := pool.QueryRow(ctx, `SELECT id::text FROM braid_tasks WHERE run_id = $1`, runs[0].ID).Scan(&taskID); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Queue().River().Insert(ctx, dupArgs{TaskID: taskID, Workflow: "nap_then_done"}, &river.InsertOpts{
		ScheduledAt: time.Now().Add(time.Hour),
		UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: []rivertype.JobState{
			rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
			rivertype.JobStateRetryable, rivertype.JobStateScheduled,
		}},
	}); err != nil {
		t.Fatal(err)
	}
	execSQL(t, pool, `UPDATE braid_steps SET resume_at = (SELECT min(resume_at) FROM braid_steps WHERE kind = 'delay') WHERE kind = 'delay'`)
	for _, r := range runs[1:] {
		if _, err := r.Result(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var late float64
	if err := pool.QueryRow(ctx, `
		SELECT max(extract(epoch FROM s.finished_at - s.resume_at)) FROM braid_steps s JOIN braid_tasks t ON t.id = s.task_id
		 WHERE s.kind = 'delay' AND t.run_id <> $1`, runs[0].ID).Scan(&late); err != nil {
		t.Fatal(err)
	}
	if late >= 1 {
		t.Fatalf("the other delays fired up to %.2fs late beside a duplicate live turn, want within 1s", late)
	}
	// The duplicated task's delay fired too; its existing live turn is the
	// one that will run it.
	if n := count(t, pool, `SELECT count(*) FROM braid_steps WHERE kind = 'delay' AND status = 'fired'`); n != 6 {
		t.Fatalf("%d delays fired, want 6", n)
	}
}

func TestLateAttemptRecordsNothing(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	release := make(chan struct{})
	var runs atomic.Int64
	wf := workflow.Define("late_attempt", func(t *workflow.Task, _ struct{}) (int64, error) {
		n, err := workflow.Step(t, "once", func(ctx context.Context) (int64, error) { return 1, nil })
		if err != nil {
			return 0, err
		}
		if runs.Add(1) == 1 {
			<-release // the first attempt is held here while it is superseded
		}
		return n, nil
	})
	cfg := testConfig(wf)
	cfg.TurnHeartbeat = 200 * time.Millisecond
	eng := startEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 30*time.Second)
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	supersedeHeldAttempt(t, pool, &runs, release)
	// The late attempt recorded nothing: neither the task's completion nor
	// the job's.
	if n := count(t, pool, `SELECT count(*) FROM braid_tasks WHERE status = 'completed'`); n != 0 {
		t.Fatalf("the late attempt completed the task")
	}
	if n := count(t, pool, `SELECT count(*) FROM river_job WHERE kind = 'braid_task' AND state = 'completed'`); n != 0 {
		t.Fatalf("the late attempt completed the job of the attempt that superseded it")
	}
	if n := count(t, pool, `SELECT count(*) FROM river_job j, unnest(j.errors) e WHERE j.kind = 'braid_task' AND (e->>'attempt')::int = 1`); n != 0 {
		t.Fatalf("the late attempt recorded an attempt error on the job")
	}
	// The superseding attempt, silent, is rescued and the run completes.
	if out, err := run.Result(ctx); err != nil || out != 1 {
		t.Fatalf("run: %d, %v", out, err)
	}
}

func TestMapOverItsTotalInputLimitIsAClearError(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	child := workflow.Define("echo_child", func(t *workflow.Task, in string) (string, error) { return in, nil })
	parent := workflow.Define("big_map", func(t *workflow.Task, n int) (int, error) {
		outs, err := workflow.Map(t, "fan", child, make([]string, n))
		return len(outs), err
	}, workflow.WithMaxAttempts(1))
	cfg := testConfig(child, parent)
	cfg.MaxMapInputBytes = 100 // "" encodes as 2 bytes: 50 items fit, 51 do not
	eng := startEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 30*time.Second)
	run, err := parent.Start(ctx, eng, 51, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = run.Result(ctx)
	if err == nil || !strings.Contains(err.Error(), `total input of Map "fan" is 102 bytes, over the limit of 100 bytes`) {
		t.Fatalf("Result: %v, want the Map's total input over its limit", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_tasks WHERE parent_task_id IS NOT NULL`); n != 0 {
		t.Fatalf("%d children created by a Map over its limit", n)
	}
	ok, err := parent.Start(ctx, eng, 50, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := ok.Result(ctx); err != nil || n != 50 {
		t.Fatalf("a Map at its limit: %d, %v", n, err)
	}
}

func TestReconcilerSweepSettlesTasksWhoseTurnIsGoneOrCompleted(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	wf := workflow.Define("swept", func(t *workflow.Task, in int) (int, error) { return in + 1, nil })
	cfg := testConfig(wf)
	starter := newEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 30*time.Second)
	gone, err := wf.Start(ctx, starter, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	owed, err := wf.Start(ctx, starter, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	// One task's turn job is deleted; the other's is completed without
	// the task having run, as a turn that found it in another state would.
	execSQL(t, pool, `DELETE FROM river_job WHERE braid_turn_task(unique_key, args) = (SELECT id FROM braid_tasks WHERE run_id = $1)`, gone.ID)
	execSQL(t, pool, `UPDATE river_job SET state = 'completed', finalized_at = now() WHERE braid_turn_task(unique_key, args) = (SELECT id FROM braid_tasks WHERE run_id = $1)`, owed.ID)
	execSQL(t, pool, `UPDATE braid_tasks SET updated_at = now() - interval '1 minute'`)

	cfg.ReconcileSweepInterval = 200 * time.Millisecond
	eng := startEngine(t, pool, cfg)
	msg := requireFailed(t, pool, eng, gone.ID)
	if !strings.Contains(msg, "no turn job") {
		t.Errorf("task error %q does not say its turn job is gone", msg)
	}
	if out, err := owed.Result(ctx); err != nil || out != 3 {
		t.Fatalf("the task owed a turn: %d, %v; want it run by a new turn", out, err)
	}
	if out := retryAndComplete(t, eng, gone); out != 2 {
		t.Fatalf("output %d", out)
	}
}

// TestReconcilerFindsAStrandedTaskAmongRetriedOnes cancels and retries
// more runs than one look of the reconciler takes, so that each of their
// tasks has a turn job cancelled moments ago beside its new live turn,
// and strands one more task, whose only turn job is discarded as after a
// crash on its last attempt. One look fails the stranded task, with an
// error that says why, and leaves the retried ones to their turns.
func TestReconcilerFindsAStrandedTaskAmongRetriedOnes(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	wf := workflow.Define("retried_many", func(t *workflow.Task, in int) (int, error) { return in, nil })
	// An engine that is not started works no turn, so every turn job stays
	// as the test leaves it, and the reconciler runs only when the test
	// calls it.
	eng := newEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 60*time.Second)
	const retried = 150
	params := make([]workflow.StartManyParams[int], retried)
	for i := range params {
		params[i].Input = i
	}
	runs, err := wf.StartMany(ctx, eng, params)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		if err := eng.Cancel(ctx, r.ID); err != nil {
			t.Fatal(err)
		}
		if err := eng.Retry(ctx, r.ID); err != nil {
			t.Fatal(err)
		}
	}
	stranded, err := wf.Start(ctx, eng, -1, nil)
	if err != nil {
		t.Fatal(err)
	}
	var jobID int64
	var maxAttempts int
	if err := pool.QueryRow(ctx, `
		UPDATE river_job SET state = 'discarded', attempt = max_attempts, attempted_at = now(), finalized_at = now()
		 WHERE kind = $1 AND braid_turn_task(unique_key, args) = (SELECT id FROM braid_tasks WHERE run_id = $2)
		RETURNING id, max_attempts`, workflow.TaskKind, stranded.ID).Scan(&jobID, &maxAttempts); err != nil {
		t.Fatal(err)
	}

	if err := workflow.Reconcile(ctx, eng); err != nil {
		t.Fatal(err)
	}

	info, err := eng.Run(ctx, stranded.ID)
	if err != nil {
		t.Fatal(err)
	}
	type outcome struct{ Run, Task, Error string }
	want := outcome{Run: "failed", Task: "failed", Error: fmt.Sprintf(
		"the task's turn (job %d) was discarded after attempt %d of %d without recording an outcome", jobID, maxAttempts, maxAttempts)}
	if diff := cmp.Diff(want, outcome{Run: info.Status, Task: info.Tasks[0].Status, Error: info.Tasks[0].Error}); diff != "" {
		t.Errorf("the stranded run after one look of the reconciler (-want +got):\n%s", diff)
	}
	// The retried runs are as Retry left them: running, their task
	// pending with one live turn.
	type state struct {
		Run, Task string
		LiveTurns int
	}
	rows, err := pool.Query(ctx, `
		SELECT r.status, t.status,
		       (SELECT count(*) FROM river_job j
		         WHERE j.kind = $1 AND braid_turn_task(j.unique_key, j.args) = t.id
		           AND j.state IN ('available', 'pending', 'running', 'retryable', 'scheduled'))::int
		  FROM braid_runs r JOIN braid_tasks t ON t.run_id = r.id
		 WHERE r.id <> $2`, workflow.TaskKind, stranded.ID)
	if err != nil {
		t.Fatal(err)
	}
	got := map[state]int{}
	for rows.Next() {
		var s state
		if err := rows.Scan(&s.Run, &s.Task, &s.LiveTurns); err != nil {
			t.Fatal(err)
		}
		got[s]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[state]int{{Run: "pending", Task: "pending", LiveTurns: 1}: retried}, got); diff != "" {
		t.Errorf("the retried runs after one look of the reconciler (-want +got):\n%s", diff)
	}
}

func TestLateAttemptThatFailsRecordsNothing(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	release := make(chan struct{})
	var runs atomic.Int64
	wf := workflow.Define("late_failure", func(t *workflow.Task, _ struct{}) (int64, error) {
		if runs.Add(1) == 1 {
			<-release
			return 0, errors.New("the late attempt fails")
		}
		return 1, nil
	})
	cfg := testConfig(wf)
	cfg.TurnHeartbeat = 20 * time.Second // the watch does not notice in time
	eng := startEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 30*time.Second)
	if _, err := wf.Start(ctx, eng, struct{}{}, nil); err != nil {
		t.Fatal(err)
	}
	supersedeHeldAttempt(t, pool, &runs, release)
	if n := count(t, pool, `SELECT count(*) FROM river_job WHERE kind = 'braid_task' AND state = 'running' AND attempt = 2`); n != 1 {
		t.Fatalf("the late attempt's failure changed the job of the attempt that superseded it")
	}
	if n := count(t, pool, `SELECT count(*) FROM river_job j, unnest(j.errors) e WHERE j.kind = 'braid_task'`); n != 0 {
		t.Fatalf("the late attempt recorded its error on the job")
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_tasks WHERE error IS NOT NULL`); n != 0 {
		t.Fatalf("the late attempt recorded its error on the task")
	}
}

func TestStopOnTheLastAttemptPutsTheTurnBack(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	started := make(chan struct{}, 1)
	var stopped atomic.Bool
	wf := workflow.Define("stopped_last", func(t *workflow.Task, _ struct{}) (string, error) {
		return workflow.Step(t, "wait", func(ctx context.Context) (string, error) {
			if stopped.Load() {
				return "done", nil
			}
			started <- struct{}{}
			<-ctx.Done()
			return "", ctx.Err()
		})
	}, workflow.WithMaxAttempts(1))
	eng, err := workflow.NewEngine(pool, testConfig(wf))
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx := ctxTimeout(t, 30*time.Second)
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	stopCtx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_ = eng.Stop(stopCtx)
	stopped.Store(true)
	info, err := eng.Run(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if info.Status == "failed" || info.Tasks[0].Status == "failed" {
		t.Fatalf("Stop failed the run on its last attempt: %s, task %s (%s)", info.Status, info.Tasks[0].Status, info.Tasks[0].Error)
	}
	// Another process takes the turn and completes the run.
	other := startEngine(t, pool, testConfig(wf))
	if out, err := run.Result(ctx); err != nil || out != "done" {
		t.Fatalf("run after the restart: %q, %v", out, err)
	}
	_ = other
}

func TestNULInAStepOutputIsAClearError(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	wf := workflow.Define("nul_output", func(t *workflow.Task, _ string) (string, error) {
		return workflow.Step(t, "emit", func(ctx context.Context) (string, error) { return "a\x00b", nil })
	}, workflow.WithMaxAttempts(1))
	eng := startEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 30*time.Second)
	if _, err := wf.Start(ctx, eng, "in\x00put", nil); err == nil || !strings.Contains(err.Error(), "NUL character") {
		t.Fatalf("Start with a NUL in the input: %v, want an error naming the NUL character", err)
	}
	run, err := wf.Start(ctx, eng, "input", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = run.Result(ctx)
	if err == nil || !strings.Contains(err.Error(), `output of step "emit" cannot be encoded as JSON: it holds a NUL character`) {
		t.Fatalf("Result: %v, want the step's output refused, naming the step", err)
	}
}

// supersedeHeldAttempt waits for the first attempt of the only turn to be
// held (runs reaches 1), supersedes it as a rescue and a retry fetched by
// another process would (the job now runs at the next attempt), releases
// it, and gives its outcome time to land.
func supersedeHeldAttempt(t *testing.T, pool *pgxpool.Pool, runs *atomic.Int64, release chan struct{}) {
	t.Helper()
	waitFor(t, "the first attempt to be held", 10*time.Second, func() bool { return runs.Load() == 1 })
	execSQL(t, pool, `UPDATE river_job SET attempt = attempt + 1, attempted_at = now() WHERE kind = 'braid_task'`)
	close(release)
	time.Sleep(time.Second)
}

// TestReconcilerFinishesACommitThatStopCutsOff fails a stranded task while
// the reconciler's context ends during its COMMIT (a deferred trigger
// holds the commit): the transaction runs to its end, so the run is failed
// and counted once, not left to a later look with its commit cut off.
func TestReconcilerFinishesACommitThatStopCutsOff(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	execSQL(t, pool, `
		CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		    PERFORM pg_sleep(0.5);
		    RETURN NULL;
		END $$;
		CREATE CONSTRAINT TRIGGER slow_commit AFTER UPDATE ON braid_runs
		    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit();`)
	wf := workflow.Define("cut_off", func(t *workflow.Task, in int) (int, error) { return in, nil })
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	cfg := testConfig(wf)
	cfg.MeterProvider = mp
	// Not started: the reconciler runs only when the test calls it.
	eng := newEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 30*time.Second)
	run, err := wf.Start(ctx, eng, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	execSQL(t, pool, `
		UPDATE river_job SET state = 'discarded', attempt = max_attempts, attempted_at = now(), finalized_at = now()
		 WHERE kind = $1 AND braid_turn_task(unique_key, args) = (SELECT id FROM braid_tasks WHERE run_id = $2)`,
		workflow.TaskKind, run.ID)

	lookCtx, stop := context.WithCancel(ctx)
	looked := make(chan error, 1)
	go func() { looked <- workflow.Reconcile(lookCtx, eng) }()
	waitFor(t, "the reconciler's commit to wait on the deferred trigger", 10*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event = 'PgSleep'`) > 0
	})
	stop()
	<-looked

	if n := count(t, pool, `SELECT count(*) FROM braid_runs WHERE id = $1 AND status = 'failed'`, run.ID); n != 1 {
		t.Fatal("the run is not failed: the reconciler's commit was cut off")
	}
	if got := collectEngineMetrics(t, reader).counters[workflow.MetricRunsFailed]; got != 1 {
		t.Errorf("%s counted %d runs, want 1", workflow.MetricRunsFailed, got)
	}
}
