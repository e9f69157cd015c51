package workflow_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// retentionScene starts runs for the retention batch tests: n completed
// runs finished two hours ago (two tasks each: the root and its child),
// against a Retention of an hour, and beside them the runs retention must
// keep: young finished runs, and year-old unfinished ones (one waiting on
// its delay, one never worked). batch, when not zero, is the runs one
// retention batch holds. It returns the engine, the old runs, oldest
// first, and the footprints of the kept ones.
func retentionScene(t *testing.T, prefix string, n, batch int) (*workflow.Engine, []string, map[string][3]int) {
	t.Helper()
	pool := testutil.DB(t)
	w := newRetentionWorkflows(prefix)
	cfg := testConfig(w.defs()...)
	cfg.Retention = time.Hour
	cfg.RetentionInterval = time.Hour // the test runs retention itself
	cfg.RetentionBatch = batch
	eng := startEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 60*time.Second)

	var old []string
	for i := range n {
		r, err := w.ok.Start(ctx, eng, i, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Result(ctx); err != nil {
			t.Fatal(err)
		}
		old = append(old, r.ID)
	}
	young := runStates(t, ctx, eng, pool, w)
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
	for i, id := range old {
		// Oldest first, a second apart.
		backdateFinished(t, pool, 2*time.Hour+time.Duration(n-i)*time.Second, id)
	}
	kept := map[string][3]int{}
	for _, id := range []string{young["completed"], young["failed"], young["cancelled"], waiting.ID, pending.ID} {
		kept[id] = footprint(t, pool, id)
	}
	return eng, old, kept
}

// checkKept fails the test unless every kept run has the rows it had.
func checkKept(t *testing.T, eng *workflow.Engine, kept map[string][3]int) {
	t.Helper()
	for id, before := range kept {
		if f := footprint(t, eng.Pool(), id); f != before {
			t.Errorf("run %s, which retention must keep: runs, tasks, steps %v, was %v", id, f, before)
		}
	}
}

// A retention batch takes the oldest runs only as long as their tasks add
// up to its limit; when the oldest run alone holds more, the batch deletes
// nothing and names it, to shrink first. It deletes nothing that retention
// must keep.
func TestRetentionBatchIsBoundedByTasks(t *testing.T) {
	t.Parallel()
	eng, old, kept := retentionScene(t, "task_bound", 4, 0)
	pool := eng.Pool()
	ctx := ctxTimeout(t, 30*time.Second)
	remaining := func() int { return count(t, pool, `SELECT count(*) FROM braid_runs WHERE id::text = ANY($1)`, old) }

	for _, step := range []struct {
		limit, want int
		large       string
	}{
		{1, 0, old[0]}, // the oldest run alone holds more tasks than the limit
		{2, 1, ""},
		{3, 1, ""}, // two runs would be four tasks
		{4, 2, ""},
	} {
		before := remaining()
		n, large, err := workflow.DeleteOldRunsBatch(ctx, eng, step.limit)
		if err != nil {
			t.Fatal(err)
		}
		if n != step.want || large != step.large || remaining() != before-step.want {
			t.Fatalf("a batch of at most %d tasks deleted %d runs (%d of %d old runs left) and named %q to shrink; want %d and %q",
				step.limit, n, remaining(), before, large, step.want, step.large)
		}
	}
	if n := remaining(); n != 0 {
		t.Fatalf("%d old runs left; want none", n)
	}
	checkKept(t, eng, kept)
}

// wideRun starts a run whose root maps over children kids, each recording
// a step, and then fails, and returns it once failed, finished two hours
// ago against eng's Retention of an hour.
func wideRun(t *testing.T, ctx context.Context, eng *workflow.Engine, wide *workflow.Workflow[int, int]) string {
	t.Helper()
	r, err := wide.Start(ctx, eng, 7, nil)
	if err != nil {
		t.Fatal(err)
	}
	var re *workflow.RunError
	if _, err := r.Result(ctx); !errors.As(err, &re) || re.Status != "failed" {
		t.Fatalf("the wide run: %v; want it failed", err)
	}
	backdateFinished(t, eng.Pool(), 2*time.Hour, r.ID)
	return r.ID
}

// wideWorkflows defines the workflow of wideRun, and returns it with every
// definition the engine needs.
func wideWorkflows(prefix string) (*workflow.Workflow[int, int], []workflow.Definition) {
	w := newRetentionWorkflows(prefix)
	wide := workflow.Define(prefix+"_wide", func(t *workflow.Task, n int) (int, error) {
		if _, err := workflow.Map(t, "kids", w.kid, make([]int, n)); err != nil {
			return 0, err
		}
		return 0, errors.New("the wide run fails after its children")
	}, workflow.WithMaxAttempts(1))
	return wide, append(w.defs(), wide)
}

// A run that holds more tasks than a retention batch deletes is shrunk
// first, a batch's worth of its tasks per transaction, leaves first, and
// marked as being deleted, so that Retry refuses it; the batch that
// follows deletes the rest with the run, and its turn jobs.
func TestRetentionShrinksARunThatHoldsMoreThanABatch(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	wide, defs := wideWorkflows("shrink")
	cfg := testConfig(defs...)
	cfg.Retention, cfg.RetentionInterval = time.Hour, time.Hour
	eng := startEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 60*time.Second)
	id := wideRun(t, ctx, eng, wide)
	if f := footprint(t, pool, id); f != [3]int{1, 8, 7} {
		t.Fatalf("the wide run's rows: %v; want the run, 8 tasks and 7 steps", f)
	}
	tasks := func() []string {
		rows, err := pool.Query(ctx, `SELECT id::text FROM braid_tasks WHERE run_id = $1`, id)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	all := tasks()

	if n, large, err := workflow.DeleteOldRunsBatch(ctx, eng, 3); err != nil || n != 0 || large != id {
		t.Fatalf("a batch of 3 tasks: deleted %d runs and named %q to shrink (%v); want none deleted and the wide run named", n, large, err)
	}
	shrunk, err := workflow.ShrinkRun(ctx, eng, id, 3)
	if err != nil || !shrunk {
		t.Fatalf("ShrinkRun: %v, %v; want it shrunk", shrunk, err)
	}
	// 8 tasks, 3 a transaction: 5 left after the first, 2 after the
	// second, which is where it stops; the root, a parent until then, is
	// one of them.
	if f := footprint(t, pool, id); f != [3]int{1, 2, 1} {
		t.Errorf("the shrunk run's rows: %v; want the run, its root and one child with its step", f)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_tasks WHERE run_id = $1 AND parent_task_id IS NULL`, id); n != 1 {
		t.Errorf("the shrunk run has %d roots; want its root kept for the last batch", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_runs WHERE id = $1 AND deleting`, id); n != 1 {
		t.Errorf("the shrunk run is not marked as being deleted")
	}
	err = eng.Retry(ctx, id)
	if !errors.Is(err, workflow.ErrRunNotRetryable) || !errors.Is(err, workflow.ErrRunBeingDeleted) || !strings.Contains(err.Error(), "being deleted by retention") {
		t.Errorf("Retry of the run being deleted: %v; want ErrRunBeingDeleted, which is ErrRunNotRetryable, saying why", err)
	}
	if f := footprint(t, pool, id); f != [3]int{1, 2, 1} {
		t.Errorf("the refused Retry changed the run: %v", f)
	}

	if n, large, err := workflow.DeleteOldRunsBatch(ctx, eng, 3); err != nil || n != 1 || large != "" {
		t.Fatalf("the batch after the shrink: deleted %d runs and named %q (%v); want the run deleted", n, large, err)
	}
	if f := footprint(t, pool, id); f != [3]int{} {
		t.Errorf("the deleted run's rows: %v; want none", f)
	}
	turns := count(t, pool, `SELECT count(*) FROM river_job WHERE kind = $1 AND braid_turn_task(unique_key, args)::text = ANY($2)`, workflow.TaskKind, all)
	if turns != 0 {
		t.Errorf("%d turn jobs of the deleted run's tasks are left; want none", turns)
	}
}

// A run that Retry resumed after the batch named it is not marked, and
// keeps its tasks; the pass goes on without it. A pass shrinks and deletes
// a run that holds more tasks than its batches, beside the runs that fit.
func TestRetentionShrinksOnlyAFinishedRun(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	wide, defs := wideWorkflows("shrink_retry")
	cfg := testConfig(defs...)
	cfg.Retention, cfg.RetentionInterval = time.Hour, time.Hour
	eng := startEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 60*time.Second)
	retried, gone := wideRun(t, ctx, eng, wide), wideRun(t, ctx, eng, wide)

	if _, large, err := workflow.DeleteOldRunsBatch(ctx, eng, 3); err != nil || large == "" {
		t.Fatalf("a batch of 3 tasks named %q to shrink (%v); want a wide run", large, err)
	}
	if err := eng.Retry(ctx, retried); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Wait(ctx, retried); err == nil {
		t.Fatal("the retried wide run completed; want it failed again")
	}
	// Failed again, but just now: no longer old.
	if shrunk, err := workflow.ShrinkRun(ctx, eng, retried, 3); err != nil || shrunk {
		t.Fatalf("ShrinkRun of the retried run: %v, %v; want it left alone", shrunk, err)
	}
	if f := footprint(t, pool, retried); f != [3]int{1, 8, 7} {
		t.Errorf("the retried run's rows: %v; want all of them", f)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_runs WHERE id = $1 AND deleting`, retried); n != 0 {
		t.Errorf("the retried run is marked as being deleted")
	}

	if err := workflow.DeleteOldRunsBy(ctx, eng, 3); err != nil {
		t.Fatal(err)
	}
	if f := footprint(t, pool, gone); f != [3]int{} {
		t.Errorf("the old wide run after a pass: %v; want it deleted", f)
	}
	if f := footprint(t, pool, retried); f != [3]int{1, 8, 7} {
		t.Errorf("the young retried run after a pass: %v; want all of it", f)
	}
}

// A run that retention must skip (a task of it is locked) does not end the
// pass: every other old run goes in the same pass, and the skipped one
// stays, with everything that retention must keep.
func TestRetentionPassGoesOnPastASkippedRun(t *testing.T) {
	t.Parallel()
	eng, old, kept := retentionScene(t, "skip_on", 5, 2)
	pool := eng.Pool()
	ctx := ctxTimeout(t, 30*time.Second)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM braid_tasks WHERE run_id = $1 AND parent_task_id IS NULL FOR UPDATE`, old[0]); err != nil {
		t.Fatal(err)
	}
	// Batches of two: the first holds the skipped run.
	if err := workflow.DeleteOldRuns(ctx, eng); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_runs WHERE id::text = ANY($1)`, old[1:]); n != 0 {
		t.Errorf("%d of the %d old runs that no one locked are left after one pass; want none", n, len(old)-1)
	}
	if f := footprint(t, pool, old[0]); f[0] != 1 || f[1] != 2 {
		t.Errorf("the run with a locked task: runs, tasks, steps %v; want it kept whole", f)
	}
	checkKept(t, eng, kept)
}

// TestRetentionPassEndsWhileRunsKeepFinishing runs a retention pass while
// runs finish all the time, each old a Retention later: the pass deletes
// what was old when it began and ends, leaving the runs that grew old
// meanwhile to the next pass, rather than chase them for ever (and never
// reach the old events).
func TestRetentionPassEndsWhileRunsKeepFinishing(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	cfg := testConfig()
	cfg.Retention = 50 * time.Millisecond
	cfg.RetentionInterval = time.Hour
	eng := startEngine(t, pool, cfg)

	feed, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for feed.Err() == nil {
				_, _ = pool.Exec(feed, `INSERT INTO braid_runs (id, workflow, status, input, finished_at)
					SELECT gen_random_uuid(), 'finishing', 'completed', '{}', braid_now() FROM generate_series(1, 20)`)
			}
		}()
	}
	time.Sleep(300 * time.Millisecond) // a backlog of old runs
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := workflow.DeleteOldRuns(ctx, eng)
	stop()
	wg.Wait()
	if err != nil {
		t.Fatalf("the retention pass did not end while runs kept finishing: %v", err)
	}
}

// TestRetentionDeletesTheFinishedTurnJobsOfItsRuns: a deleted run's
// finished turn jobs go with it, so that a short retention keeps river_job
// as small as braid's tables rather than leave it to River's job cleaner.
// A turn job that another transaction holds is skipped (job rows come
// before task rows in the lock order) and left to the cleaner, without
// keeping its run. Kept runs keep their turn jobs, and jobs of other
// kinds are never touched.
func TestRetentionDeletesTheFinishedTurnJobsOfItsRuns(t *testing.T) {
	t.Parallel()
	eng, old, kept := retentionScene(t, "turn_jobs", 3, 0)
	pool := eng.Pool()
	ctx := ctxTimeout(t, 30*time.Second)
	turnJobsOf := func(runs []string) int {
		return count(t, pool, `
			SELECT count(*) FROM river_job j JOIN braid_tasks k ON k.id = braid_turn_task(j.unique_key, j.args)
			 WHERE j.kind = 'braid_task' AND k.run_id::text = ANY($1)`, runs)
	}
	var keptRuns []string
	for id := range kept {
		keptRuns = append(keptRuns, id)
	}
	keptJobs := turnJobsOf(keptRuns)
	if n := turnJobsOf(old); n < 2*len(old) {
		t.Fatalf("the old runs have %d turn jobs before retention; want at least %d", n, 2*len(old))
	}
	var jobIDs []int64
	rows, err := pool.Query(ctx, `
		SELECT j.id FROM river_job j JOIN braid_tasks k ON k.id = braid_turn_task(j.unique_key, j.args)
		 WHERE j.kind = 'braid_task' AND k.run_id::text = ANY($1) ORDER BY j.id`, old)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		jobIDs = append(jobIDs, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// A finished job of another kind, as old as the runs.
	var other int64
	if err := pool.QueryRow(ctx, `
		INSERT INTO river_job (args, kind, max_attempts, queue, state, attempt, attempted_at, finalized_at, created_at, scheduled_at)
		VALUES ('{}', 'not_a_turn', 1, 'default', 'completed', 1, now() - interval '3 hours', now() - interval '3 hours',
		        now() - interval '3 hours', now() - interval '3 hours')
		RETURNING id`).Scan(&other); err != nil {
		t.Fatal(err)
	}

	// Another transaction holds one of the old runs' turn jobs.
	held := jobIDs[0]
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM river_job WHERE id = $1 FOR UPDATE`, held); err != nil {
		t.Fatal(err)
	}
	if err := workflow.DeleteOldRuns(ctx, eng); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_runs WHERE id::text = ANY($1)`, old); n != 0 {
		t.Fatalf("%d of %d old runs left; want none", n, len(old))
	}
	if n := count(t, pool, `SELECT count(*) FROM river_job WHERE id = ANY($1) AND id <> $2`, jobIDs, held); n != 0 {
		t.Errorf("%d turn jobs of the deleted runs are left; want none but the held one", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM river_job WHERE id = $1`, held); n != 1 {
		t.Errorf("the turn job another transaction held is gone; want it left to River's job cleaner")
	}
	if n := count(t, pool, `SELECT count(*) FROM river_job WHERE id = $1`, other); n != 1 {
		t.Errorf("retention deleted a finished job of another kind")
	}
	if n := turnJobsOf(keptRuns); n != keptJobs {
		t.Errorf("the kept runs have %d turn jobs; had %d", n, keptJobs)
	}
	checkKept(t, eng, kept)
}
