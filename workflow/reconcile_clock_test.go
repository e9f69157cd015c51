package workflow_test

import (
	"testing"
	"time"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// The reconciler's frequent look finds the turn jobs that ended lately by
// River's finalized_at, which River writes on the clock of the process
// that finished the job, or the database's: never on braid's clock. A
// test kit moves braid's clock (braid_now()) days ahead; the look must
// still see a turn that was discarded a moment ago, rather than leave its
// task to the sweep, minutes later.
func TestReconcilerLooksByTheClockThatEndedTheJob(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	wf := workflow.Define("clocked", func(t *workflow.Task, in int) (int, error) { return in, nil })
	// Not started: the reconciler runs only when the test calls it.
	eng := newEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 30*time.Second)
	run, err := wf.Start(ctx, eng, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	execSQL(t, pool, `
		UPDATE river_job SET state = 'discarded', attempt = max_attempts, attempted_at = now(), finalized_at = now()
		 WHERE kind = $1 AND braid_turn_task(unique_key, args) = (SELECT id FROM braid_tasks WHERE run_id = $2)`,
		workflow.TaskKind, run.ID)
	execSQL(t, pool, `
		CREATE OR REPLACE FUNCTION braid_now() RETURNS timestamptz LANGUAGE sql STABLE AS $$ SELECT now() + interval '48 hours' $$;
		CREATE OR REPLACE FUNCTION braid_clock() RETURNS timestamptz LANGUAGE sql VOLATILE AS $$ SELECT clock_timestamp() + interval '48 hours' $$;`)

	if err := workflow.Reconcile(ctx, eng); err != nil {
		t.Fatal(err)
	}
	info, err := eng.Run(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if info.Status != "failed" {
		t.Errorf("after one look of the reconciler, with braid's clock 48 hours ahead, the stranded run is %s; want failed", info.Status)
	}
}
