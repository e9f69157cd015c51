package workflow_test

import (
	"testing"
	"time"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// One outcome of a batch waits on a task row that another transaction
// holds for longer than OutcomeTimeout. The batch fails, and its outcomes
// are recorded again one at a time, so that the blocked outcome fails only
// its own turn: the other turns of the batch, of other runs, complete on
// their first (and only) attempt. (The turns must still be waiting for
// their outcomes when the batch gives up, and the blocked outcome's own
// try must not hold up theirs.)
func TestABatchBlockedOnOneTurnsLockFailsOnlyThatTurn(t *testing.T) {
	t.Parallel()
	pool := testutil.Pool(t, testutil.URL(t))

	const others = 5
	started := make(chan string, 2*(others+1))
	releaseA, releaseB := make(chan struct{}), make(chan struct{})
	gated := workflow.Define("gated_outcome", func(t *workflow.Task, in string) (string, error) {
		started <- in
		if in == "a" {
			<-releaseA
		} else {
			<-releaseB
		}
		return in, nil
	}, workflow.WithMaxAttempts(1))

	cfg := testConfig(gated)
	cfg.OutcomeTimeout = 4 * time.Second
	cfg.OutcomeLinger = 10 * time.Second // the batch waits for every turn
	eng := startEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 90*time.Second)

	a, err := gated.Start(ctx, eng, "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	bs := make([]*workflow.Run[string], others)
	for i := range bs {
		if bs[i], err = gated.Start(ctx, eng, "b", nil); err != nil {
			t.Fatal(err)
		}
	}
	for range others + 1 {
		select {
		case <-started:
		case <-ctx.Done():
			t.Fatal("the turns did not all start")
		}
	}

	// Another transaction holds a's task row (as a caller's CancelTx does
	// while it stays open, when a's turn job was held as it ran).
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	execSQL(t, tx, `SELECT 1 FROM braid_tasks WHERE run_id = $1 FOR UPDATE`, a.ID)

	// a's outcome is handed in first, and its batch waits for the others'.
	close(releaseA)
	time.Sleep(300 * time.Millisecond)
	close(releaseB)

	// The lock is held past the OutcomeTimeout of the batch, which a batch
	// waiting on the row lock for all of it would spend.
	time.Sleep(cfg.OutcomeTimeout * 3 / 2)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	for i, r := range bs {
		out, err := r.Result(ctx)
		if err != nil || out != "b" {
			t.Errorf("run b%d (unrelated to the held lock): %q, %v; want it completed", i, out, err)
		}
	}
}
