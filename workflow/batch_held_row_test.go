package workflow_test

import (
	"context"
	"testing"
	"time"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// A caller's transaction holds a parent task's row while more of its
// children finish than the pool has connections. Their batches fail on
// the lock and their outcomes are tried again beside the batches; those
// tries must not take every connection of the pool while the row stays
// held, as the batches themselves never do (at most OutcomeFlushes of
// them wait on locks): an unrelated run starts and completes at once.
func TestOutcomesWaitingOnAHeldRowLeaveThePoolToOtherRuns(t *testing.T) {
	t.Parallel()
	url := testutil.URL(t)
	pool := testutil.Pool(t, url)
	side := testutil.Pool(t, url) // the test's own statements

	children := 2 * testutil.PoolMaxConnsDefault
	started := make(chan struct{}, children)
	release := make(chan struct{})
	child := workflow.Define("held_row_child", func(t *workflow.Task, n int) (int, error) {
		started <- struct{}{}
		<-release
		return n, nil
	}, workflow.WithMaxAttempts(1))
	parent := workflow.Define("held_row_parent", func(t *workflow.Task, n int) (int, error) {
		items := make([]int, n)
		outs, err := workflow.Map(t, "kids", child, items)
		return len(outs), err
	})

	cfg := testConfig(parent, child, plusOne)
	cfg.OutcomeTimeout = 20 * time.Second
	eng := startEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 120*time.Second)

	run, err := parent.Start(ctx, eng, children, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range children {
		select {
		case <-started:
		case <-ctx.Done():
			t.Fatal("the children did not all start")
		}
	}
	waitFor(t, "the parent to wait for its children", 30*time.Second, func() bool {
		return count(t, side, `SELECT count(*) FROM braid_tasks WHERE run_id = $1 AND parent_task_id IS NULL AND status = 'waiting'`, run.ID) == 1
	})

	// Another transaction holds the parent's row, as a caller's open
	// CancelTx would.
	tx, err := side.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	execSQL(t, tx, `SELECT 1 FROM braid_tasks WHERE run_id = $1 AND parent_task_id IS NULL FOR UPDATE`, run.ID)

	close(release)
	// The children's batches wait a quarter of OutcomeTimeout for the
	// row, then their outcomes are tried one at a time (100 ms each at
	// most), then beside the batches.
	time.Sleep(cfg.OutcomeTimeout/4 + time.Duration(children)*100*time.Millisecond + 2*time.Second)

	rctx, cancel := context.WithTimeout(ctx, 8*time.Second)
	defer cancel()
	var out int
	r, err := plusOne.Start(rctx, eng, 2, nil)
	if err == nil {
		out, err = r.Result(rctx)
	}
	waiting := count(t, side, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`)
	if rerr := tx.Rollback(ctx); rerr != nil {
		t.Fatal(rerr)
	}
	if err != nil || out != 3 {
		t.Fatalf("an unrelated run while %d finished children wait for their parent's held row: %d, %v; want 3, at once (%d connections waited on a lock)",
			children, out, err, waiting)
	}
	// Once the row is free, the children's outcomes are recorded.
	if n, err := run.Result(ctx); err != nil || n != children {
		t.Errorf("the parent, once its row is free: %d, %v; want %d", n, err, children)
	}
}
