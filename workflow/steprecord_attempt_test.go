package workflow_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// A step's record that is still queued in the process when its turn is
// cancelled is not written later. The two statements that write step
// records are kept busy by two plugs, so that the victim's record waits
// in the queue; Cancel then ends the victim's turn, and Retry resets its
// task. Once the plugs are released, the record that the cancelled turn
// gave up on must not land in the reset task, where the retried turn
// would take it for its own.
func TestAQueuedStepRecordOfACancelledTurnIsNotWrittenAfterRetry(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	execSQL(t, pool, `
		CREATE FUNCTION plug_step() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		    IF NEW.output::text LIKE '%plug%' THEN
		        PERFORM pg_advisory_xact_lock_shared(CASE WHEN NEW.output::text LIKE '%second plug%' THEN 4243 ELSE 4242 END);
		    END IF;
		    RETURN NEW;
		END $$;
		CREATE TRIGGER plug_step BEFORE INSERT ON braid_steps FOR EACH ROW EXECUTE FUNCTION plug_step();`)
	ctx := ctxTimeout(t, 90*time.Second)
	holder, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_lock(4242), pg_advisory_lock(4243)`); err != nil {
		t.Fatal(err)
	}
	released := false
	release := func() {
		if !released {
			released = true
			_, _ = holder.Exec(context.Background(), `SELECT pg_advisory_unlock_all()`)
		}
	}
	defer release()
	waiting := func(lock, n int) func() bool {
		return func() bool {
			return count(t, pool, `
				SELECT count(*) FROM pg_locks
				 WHERE locktype = 'advisory' AND objid = $1 AND NOT granted
				   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, lock) == n
		}
	}

	plug := workflow.Define("plug", func(t *workflow.Task, in string) (string, error) {
		return workflow.Step(t, "plug", func(context.Context) (string, error) { return in, nil })
	})
	var turns atomic.Int32
	victim := workflow.Define("victim", func(t *workflow.Task, _ struct{}) (string, error) {
		return workflow.Step(t, "s", func(context.Context) (string, error) {
			return fmt.Sprintf("turn %d", turns.Add(1)), nil
		})
	}, workflow.WithMaxAttempts(1))
	eng := startEngine(t, pool, testConfig(plug, victim))

	// Both statements that write step records wait, one on each lock.
	if _, err := plug.Start(ctx, eng, "plug", nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first plug's record to wait on its lock", 20*time.Second, waiting(4242, 1))
	if _, err := plug.Start(ctx, eng, "second plug", nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the second plug's record to wait on its lock", 20*time.Second, waiting(4243, 1))

	run, err := victim.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the victim's record to be queued", 20*time.Second, func() bool { return workflow.StepsQueued(eng) == 1 })
	// Cancel ends the victim's turn while its record is queued; the
	// turn has given up on it.
	if err := eng.Cancel(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	if err := eng.Retry(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	// The retried turn runs the step again; its record queues behind the
	// cancelled one's.
	waitFor(t, "the retried turn's record to be queued", 20*time.Second, func() bool {
		return turns.Load() == 2 && workflow.StepsQueued(eng) == 2
	})
	release()

	out, err := run.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if out != "turn 2" {
		t.Fatalf("the retried run's output is %q; want %q: the record of the turn that Cancel ended, which that turn "+
			"had given up on, was written after Retry reset the task", out, "turn 2")
	}
}

// An attempt that lost its job while it ran (its process froze: the
// rescuer discarded its last attempt, the reconciler failed its task) and
// that goes on once the run has been retried records no step: its task is
// the retried turn's now. The heartbeat is long, so that the attempt's
// watch does not notice the loss during the test, as a frozen process
// would not.
func TestARescuedAttemptRecordsNoStepAfterRetry(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	releaseFirst, releaseSecond := make(chan struct{}), make(chan struct{})
	firstDone := make(chan struct{})
	var calls atomic.Int32
	wf := workflow.Define("frozen_attempt", func(t *workflow.Task, _ struct{}) (string, error) {
		var first bool
		out, err := workflow.Step(t, "s", func(context.Context) (string, error) {
			n := calls.Add(1)
			switch n {
			case 1:
				first = true
				<-releaseFirst
			case 2:
				<-releaseSecond
			}
			return fmt.Sprintf("attempt %d", n), nil
		})
		if first {
			defer close(firstDone)
		}
		return out, err
	}, workflow.WithMaxAttempts(1))
	cfg := testConfig(wf)
	cfg.TurnHeartbeat = 2 * time.Minute
	eng := startEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first attempt to run its step", 20*time.Second, func() bool { return calls.Load() == 1 })
	// The rescuer discards the last attempt of a turn whose heartbeats
	// stopped; the reconciler fails its task.
	execSQL(t, pool, `
		UPDATE river_job SET state = 'discarded', finalized_at = now()
		 WHERE kind = $1 AND braid_turn_task(unique_key, args) = (SELECT id FROM braid_tasks WHERE run_id = $2)`,
		workflow.TaskKind, run.ID)
	waitFor(t, "the reconciler to fail the run", 20*time.Second, func() bool {
		if err := workflow.Reconcile(ctx, eng); err != nil {
			t.Fatal(err)
		}
		return count(t, pool, `SELECT count(*) FROM braid_runs WHERE id = $1 AND status = 'failed'`, run.ID) == 1
	})
	if err := eng.Retry(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the retried turn to run its step", 20*time.Second, func() bool { return calls.Load() == 2 })

	// The frozen attempt goes on.
	close(releaseFirst)
	select {
	case <-firstDone:
	case <-ctx.Done():
		t.Fatal("the rescued attempt did not return")
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_steps WHERE name = 's' AND output = '"attempt 1"'`); n != 0 {
		t.Errorf("the rescued attempt recorded its step in the task that Retry reset; want nothing recorded by an attempt that lost its job")
	}
	close(releaseSecond)
	out, err := run.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if out != "attempt 2" {
		t.Fatalf("the retried run's output is %q; want %q, the retried turn's own step", out, "attempt 2")
	}
}

// As TestARescuedAttemptRecordsNoStepAfterRetry, for SetEvent: the frozen
// attempt, going on once the run has been retried, sets no event.
func TestARescuedAttemptSetsNoEventAfterRetry(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	releaseFirst, releaseSecond := make(chan struct{}), make(chan struct{})
	firstDone := make(chan error, 1)
	var calls atomic.Int32
	wf := workflow.Define("frozen_event", func(t *workflow.Task, _ struct{}) (string, error) {
		n := calls.Add(1)
		switch n {
		case 1:
			<-releaseFirst
		case 2:
			<-releaseSecond
		}
		err := workflow.SetEvent(t, "stage", fmt.Sprintf("attempt %d", n))
		if n == 1 {
			firstDone <- err
		}
		return "done", err
	}, workflow.WithMaxAttempts(1))
	cfg := testConfig(wf)
	cfg.TurnHeartbeat = 2 * time.Minute
	eng := startEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first attempt to run", 20*time.Second, func() bool { return calls.Load() == 1 })
	execSQL(t, pool, `
		UPDATE river_job SET state = 'discarded', finalized_at = now()
		 WHERE kind = $1 AND braid_turn_task(unique_key, args) = (SELECT id FROM braid_tasks WHERE run_id = $2)`,
		workflow.TaskKind, run.ID)
	waitFor(t, "the reconciler to fail the run", 20*time.Second, func() bool {
		if err := workflow.Reconcile(ctx, eng); err != nil {
			t.Fatal(err)
		}
		return count(t, pool, `SELECT count(*) FROM braid_runs WHERE id = $1 AND status = 'failed'`, run.ID) == 1
	})
	if err := eng.Retry(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the retried turn to run", 20*time.Second, func() bool { return calls.Load() == 2 })

	// The frozen attempt goes on.
	close(releaseFirst)
	select {
	case err := <-firstDone:
		if err == nil {
			t.Error("the rescued attempt's SetEvent returned no error")
		}
	case <-ctx.Done():
		t.Fatal("the rescued attempt did not return")
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_run_events WHERE run_id = $1`, run.ID); n != 0 {
		t.Errorf("the rescued attempt set its event in the run that Retry reset; want nothing set by an attempt that lost its job")
	}
	close(releaseSecond)
	if out, err := run.Result(ctx); err != nil || out != "done" {
		t.Fatalf("the retried run: %q, %v", out, err)
	}
	var stage string
	if err := pool.QueryRow(ctx, `SELECT value #>> '{}' FROM braid_run_events WHERE run_id = $1 AND key = 'stage'`, run.ID).Scan(&stage); err != nil || stage != "attempt 2" {
		t.Fatalf("the run's event stage is %q (%v); want the retried turn's %q", stage, err, "attempt 2")
	}
}
