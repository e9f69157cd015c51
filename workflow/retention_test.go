package workflow_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// retentionWorkflows are runs of every kind for the retention tests: one
// that completes with a child, one that fails, one that sleeps an hour,
// and one on a queue that no engine works, so it stays pending.
type retentionWorkflows struct {
	ok     *workflow.Workflow[int, int]
	bad    *workflow.Workflow[int, int]
	sleepy *workflow.Workflow[int, int]
	idle   *workflow.Workflow[int, int]
	kid    *workflow.Workflow[int, int]
}

func newRetentionWorkflows(prefix string) retentionWorkflows {
	kid := workflow.Define(prefix+"_kid", func(t *workflow.Task, n int) (int, error) {
		return workflow.Step(t, "double", func(ctx context.Context) (int, error) { return 2 * n, nil })
	})
	return retentionWorkflows{
		kid: kid,
		ok: workflow.Define(prefix+"_ok", func(t *workflow.Task, n int) (int, error) {
			v, err := workflow.Step(t, "one", func(ctx context.Context) (int, error) { return n + 1, nil })
			if err != nil {
				return 0, err
			}
			return workflow.Go(t, "kid", kid, v).Get()
		}),
		bad: workflow.Define(prefix+"_bad", func(t *workflow.Task, n int) (int, error) {
			if _, err := workflow.Step(t, "one", func(ctx context.Context) (int, error) { return n, nil }); err != nil {
				return 0, err
			}
			return 0, errors.New("this run fails")
		}, workflow.WithMaxAttempts(1)),
		sleepy: workflow.Define(prefix+"_sleepy", func(t *workflow.Task, n int) (int, error) {
			if _, err := workflow.Step(t, "one", func(ctx context.Context) (int, error) { return n, nil }); err != nil {
				return 0, err
			}
			if err := t.Delay("an hour", time.Hour); err != nil {
				return 0, err
			}
			return n, nil
		}),
		idle: workflow.Define(prefix+"_idle", func(t *workflow.Task, n int) (int, error) { return n, nil },
			workflow.WithQueue("nobody_works_this")),
	}
}

func (w retentionWorkflows) defs() []workflow.Definition {
	return []workflow.Definition{w.ok, w.bad, w.sleepy, w.idle, w.kid}
}

// runStates starts one run of each final state, and returns their IDs by
// state once they are settled.
func runStates(t *testing.T, ctx context.Context, eng *workflow.Engine, pool *pgxpool.Pool, w retentionWorkflows) map[string]string {
	t.Helper()
	ok, err := w.ok.Start(ctx, eng, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	bad, err := w.bad.Start(ctx, eng, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	sleepy, err := w.sleepy.Start(ctx, eng, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := ok.Result(ctx); err != nil || out != 4 {
		t.Fatalf("completing run: %d, %v", out, err)
	}
	var re *workflow.RunError
	if _, err := bad.Result(ctx); !errors.As(err, &re) || re.Status != "failed" {
		t.Fatalf("failing run: %v", err)
	}
	waitFor(t, "the run to sleep", 10*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM braid_runs WHERE id = $1 AND status = 'waiting'`, sleepy.ID) == 1
	})
	if err := eng.Cancel(ctx, sleepy.ID); err != nil {
		t.Fatal(err)
	}
	return map[string]string{"completed": ok.ID, "failed": bad.ID, "cancelled": sleepy.ID}
}

// footprint counts a run's rows: the run, its tasks, their steps.
func footprint(t *testing.T, pool *pgxpool.Pool, runID string) [3]int {
	t.Helper()
	return [3]int{
		count(t, pool, `SELECT count(*) FROM braid_runs WHERE id = $1`, runID),
		count(t, pool, `SELECT count(*) FROM braid_tasks WHERE run_id = $1`, runID),
		count(t, pool, `SELECT count(*) FROM braid_steps s JOIN braid_tasks k ON k.id = s.task_id WHERE k.run_id = $1`, runID),
	}
}

func backdateFinished(t *testing.T, pool *pgxpool.Pool, age time.Duration, runIDs ...string) {
	t.Helper()
	execSQL(t, pool, `UPDATE braid_runs SET finished_at = now() - $2::bigint * interval '1 microsecond' WHERE id::text = ANY($1)`,
		runIDs, age.Microseconds())
}

// TestRetentionDeletesOnlyOldFinishedRuns: finished runs older than the
// retention go with their tasks and steps; younger ones stay; unfinished
// runs stay however old. An idempotency key returns its run while the run
// is kept, and starts a new run once it was deleted.
func TestRetentionDeletesOnlyOldFinishedRuns(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	w := newRetentionWorkflows("kept")
	cfg := testConfig(w.defs()...)
	cfg.Retention = time.Hour
	cfg.RetentionInterval = 100 * time.Millisecond
	eng := startEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 60*time.Second)

	old := runStates(t, ctx, eng, pool, w)
	young := runStates(t, ctx, eng, pool, w)
	keyed, err := w.ok.Start(ctx, eng, 1, &workflow.StartOpts{IdempotencyKey: "report:1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := keyed.Result(ctx); err != nil {
		t.Fatal(err)
	}
	// Unfinished runs, made a year old: one waits on its delay, one was
	// never worked.
	waiting, err := w.sleepy.Start(ctx, eng, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	pending, err := w.idle.Start(ctx, eng, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the run to sleep", 10*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM braid_runs WHERE id = $1 AND status = 'waiting'`, waiting.ID) == 1
	})
	execSQL(t, pool, `
		UPDATE braid_runs SET created_at = now() - interval '1 year', updated_at = now() - interval '1 year',
		       started_at = CASE WHEN started_at IS NULL THEN NULL ELSE now() - interval '1 year' END
		 WHERE id::text = ANY($1)`, []string{waiting.ID, pending.ID})
	execSQL(t, pool, `UPDATE braid_tasks SET created_at = now() - interval '1 year' WHERE run_id::text = ANY($1)`,
		[]string{waiting.ID, pending.ID})

	// While it is kept, the key returns the run.
	again, err := w.ok.Start(ctx, eng, 1, &workflow.StartOpts{IdempotencyKey: "report:1"})
	if err != nil {
		t.Fatal(err)
	}
	if !again.Existing || again.ID != keyed.ID {
		t.Fatalf("the idempotency key of a kept run started %s (existing %v), want run %s", again.ID, again.Existing, keyed.ID)
	}

	kept := map[string][3]int{}
	for _, id := range []string{young["completed"], young["failed"], young["cancelled"], waiting.ID, pending.ID} {
		kept[id] = footprint(t, pool, id)
	}
	oldIDs := []string{old["completed"], old["failed"], old["cancelled"], keyed.ID}
	for _, id := range oldIDs {
		if f := footprint(t, pool, id); f[0] != 1 || f[1] == 0 || f[2] == 0 {
			t.Fatalf("run %s before retention: %d runs, %d tasks, %d steps; want each at least 1", id, f[0], f[1], f[2])
		}
	}
	backdateFinished(t, pool, 2*time.Hour, oldIDs...)

	waitFor(t, "retention to delete the old runs", 20*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM braid_runs WHERE id::text = ANY($1)`, oldIDs) == 0
	})
	for _, id := range oldIDs {
		if f := footprint(t, pool, id); f != [3]int{} {
			t.Errorf("deleted run %s left %d tasks and %d steps", id, f[1], f[2])
		}
	}
	// A few more passes, then everything else is as it was.
	time.Sleep(500 * time.Millisecond)
	for id, before := range kept {
		if f := footprint(t, pool, id); f != before {
			t.Errorf("kept run %s: runs, tasks, steps %v, was %v", id, f, before)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_runs WHERE id = $1 AND status = 'waiting'`, waiting.ID); n != 1 {
		t.Errorf("the year-old waiting run is no longer waiting")
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_runs WHERE id = $1 AND status = 'pending'`, pending.ID); n != 1 {
		t.Errorf("the year-old pending run is no longer pending")
	}

	// Once its run is deleted, the key starts a new run.
	fresh, err := w.ok.Start(ctx, eng, 5, &workflow.StartOpts{IdempotencyKey: "report:1"})
	if err != nil {
		t.Fatal(err)
	}
	if fresh.Existing || fresh.ID == keyed.ID {
		t.Fatalf("the idempotency key of a deleted run returned %s (existing %v), want a new run", fresh.ID, fresh.Existing)
	}
	if out, err := fresh.Result(ctx); err != nil || out != 12 {
		t.Fatalf("the new run of the key: %d, %v; want 12", out, err)
	}
}

// TestNegativeRetentionKeepsRunsForever: with a negative Retention nothing
// is deleted, however long ago a run finished.
func TestNegativeRetentionKeepsRunsForever(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	w := newRetentionWorkflows("forever")
	cfg := testConfig(w.defs()...)
	cfg.Retention = -1
	cfg.RetentionInterval = 100 * time.Millisecond
	eng := startEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 60*time.Second)

	runs := runStates(t, ctx, eng, pool, w)
	ids := []string{runs["completed"], runs["failed"], runs["cancelled"]}
	backdateFinished(t, pool, 10*365*24*time.Hour, ids...)
	before := map[string][3]int{}
	for _, id := range ids {
		before[id] = footprint(t, pool, id)
	}
	// The maintenance loop runs, for several retention intervals.
	waitFor(t, "the maintenance lease to be held", 10*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM braid_leases WHERE name = $1 AND expires_at > now()`, queue.MaintenanceLease) == 1
	})
	time.Sleep(time.Second)
	for _, id := range ids {
		if f := footprint(t, pool, id); f != before[id] || f[0] != 1 {
			t.Errorf("run %s finished ten years ago: runs, tasks, steps %v, was %v; want it kept", id, f, before[id])
		}
	}
}

// TestStartWhoseKeyedRunRetentionDeletesMeanwhileStartsANewRun starts a
// run with the idempotency key of a finished run that retention deletes
// between the start's insert, which meets the old run's key, and its read
// of that run. The start finds nothing to return, and starts a new run, as
// it would have had it come a moment later. A statement trigger plays
// retention: it deletes the old run right after the insert.
func TestStartWhoseKeyedRunRetentionDeletesMeanwhileStartsANewRun(t *testing.T) {
	t.Parallel()
	ctx := ctxTimeout(t, time.Minute)
	pool := testutil.DB(t)
	double := workflow.Define("keyed_double", func(t *workflow.Task, n int) (int, error) { return 2 * n, nil })
	eng := startEngine(t, pool, testConfig(double))

	old, err := double.Start(ctx, eng, 1, &workflow.StartOpts{IdempotencyKey: "report:1"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := old.Result(ctx); err != nil || got != 2 {
		t.Fatalf("the first run returned %d, %v; want 2", got, err)
	}
	execSQL(t, pool, `
		CREATE FUNCTION delete_finished_report() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		    DELETE FROM braid_runs WHERE idempotency_key = 'report:1' AND status = 'completed';
		    RETURN NULL;
		END $$`)
	execSQL(t, pool, `CREATE TRIGGER delete_finished_report AFTER INSERT ON braid_runs
		FOR EACH STATEMENT EXECUTE FUNCTION delete_finished_report()`)

	again, err := double.Start(ctx, eng, 5, &workflow.StartOpts{IdempotencyKey: "report:1"})
	if err != nil {
		t.Fatalf("a start whose keyed run was deleted meanwhile failed: %v", err)
	}
	if again.Existing || again.ID == old.ID {
		t.Fatalf("the start returned run %s (existing %v); want a new run, not %s", again.ID, again.Existing, old.ID)
	}
	if got, err := again.Result(ctx); err != nil || got != 10 {
		t.Fatalf("the new run returned %d, %v; want 10", got, err)
	}
}
