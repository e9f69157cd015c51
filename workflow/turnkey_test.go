package workflow_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// A turn job names its task in its unique key and nowhere in its args, so
// that River's GIN index on args gets no value unique to a task.
func TestTurnJobNamesItsTaskInItsUniqueKey(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	kid := workflow.Define("key_kid", func(t *workflow.Task, n int) (int, error) { return n + 1, nil })
	parent := workflow.Define("key_parent", func(t *workflow.Task, n int) (int, error) {
		return workflow.Go(t, "kid", kid, n).Get()
	})
	eng := startEngine(t, pool, testConfig(kid, parent))
	ctx := ctxTimeout(t, 30*time.Second)
	run, err := parent.Start(ctx, eng, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := run.Result(ctx); err != nil || out != 2 {
		t.Fatalf("Result = %d, %v; want 2", out, err)
	}

	type job struct{ Workflow, Args, Task string }
	rows, err := pool.Query(ctx, `
		SELECT t.workflow, j.args::text, t.id::text
		  FROM river_job j JOIN braid_tasks t ON j.unique_key = uuid_send(t.id)
		 WHERE j.kind = $1 AND j.unique_states IS NOT NULL AND braid_turn_task(j.unique_key, j.args) = t.id
		 ORDER BY j.id`, workflow.TaskKind)
	if err != nil {
		t.Fatal(err)
	}
	var got []job
	for rows.Next() {
		var j job
		if err := rows.Scan(&j.Workflow, &j.Args, &j.Task); err != nil {
			t.Fatal(err)
		}
		got = append(got, j)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var rootTask, kidTask string
	if err := pool.QueryRow(ctx, `SELECT id::text FROM braid_tasks WHERE run_id = $1 AND parent_task_id IS NULL`, run.ID).Scan(&rootTask); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT id::text FROM braid_tasks WHERE parent_task_id = $1`, rootTask).Scan(&kidTask); err != nil {
		t.Fatal(err)
	}
	// The parent's first turn, the child's turn, the parent's continuation:
	// every one of them keyed by its task, with the workflow alone in args.
	want := []job{
		{"key_parent", `{"workflow": "key_parent"}`, rootTask},
		{"key_kid", `{"workflow": "key_kid"}`, kidTask},
		{"key_parent", `{"workflow": "key_parent"}`, rootTask},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("turn jobs (-want +got):\n%s", diff)
	}
	if n := count(t, pool, `SELECT count(*) FROM river_job WHERE kind = $1`, workflow.TaskKind); n != len(want) {
		t.Fatalf("%d turn jobs, want %d: every turn job has its task's key", n, len(want))
	}
	// The key is unique among live turn jobs only: River's unique index
	// holds a job while its state is in the job's unique_states.
	rows, err = pool.Query(ctx, `
		SELECT DISTINCT s::text FROM river_job j, unnest(enum_range(NULL::river_job_state)) s
		 WHERE j.kind = $1 AND river_job_state_in_bitmask(j.unique_states, s)
		 ORDER BY 1`, workflow.TaskKind)
	if err != nil {
		t.Fatal(err)
	}
	var states []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		states = append(states, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"available", "pending", "retryable", "running", "scheduled"}, states); diff != "" {
		t.Errorf("states in which a turn job's key is unique (-want +got):\n%s", diff)
	}
}

// A turn job written before the task moved to the unique key keeps its
// task in args.task_id, under River's own key; it still runs its task, so
// a database upgraded with such jobs queued loses none of them.
func TestTurnJobWithItsTaskInItsArgsStillRuns(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	wf := workflow.Define("key_legacy", func(t *workflow.Task, n int) (int, error) {
		return workflow.Step(t, "double", func(context.Context) (int, error) { return 2 * n, nil })
	})
	cfg := testConfig(wf)
	eng := newEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 30*time.Second)
	run, err := wf.Start(ctx, eng, 21, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The form such a job has: River's key, a hash of its kind and args.
	execSQL(t, pool, `
		UPDATE river_job
		   SET args = jsonb_build_object('task_id', encode(unique_key, 'hex')::uuid::text, 'workflow', args->>'workflow'),
		       unique_key = sha256(convert_to('legacy ' || encode(unique_key, 'hex'), 'UTF8'))
		 WHERE kind = $1`, workflow.TaskKind)
	if n := count(t, pool, `SELECT count(*) FROM river_job WHERE kind = $1 AND length(unique_key) = 32 AND args ? 'task_id'`, workflow.TaskKind); n != 1 {
		t.Fatalf("%d turn jobs in the old form, want 1", n)
	}
	if err := eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if out, err := run.Result(ctx); err != nil || out != 42 {
		t.Fatalf("Result = %d, %v; want 42", out, err)
	}
}

// River never deletes an entry from its GIN index on args. Turn jobs whose
// args named their task left one entry per task there, so the index grew
// with every task ever run, however short the retention. Keyed by their
// tasks, turn jobs share their args' values, and the index keeps its size
// from one batch of runs to the next once the jobs before are deleted.
func TestTurnJobsDoNotGrowRiversArgsIndex(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	wf := workflow.Define("key_churn", func(t *workflow.Task, n int) (int, error) { return n, nil })
	eng := startEngine(t, pool, testConfig(wf))
	ctx := ctxTimeout(t, 2*time.Minute)
	const rounds, perRound = 4, 2000
	sizes := make([]int64, rounds)
	for r := range rounds {
		params := make([]workflow.StartManyParams[int], perRound)
		for i := range params {
			params[i] = workflow.StartManyParams[int]{Input: i}
		}
		if _, err := wf.StartMany(ctx, eng, params); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "a round of runs to finish", time.Minute, func() bool {
			return count(t, pool, `SELECT count(*) FROM braid_runs WHERE status <> 'completed'`) == 0 &&
				count(t, pool, `SELECT count(*) FROM river_job WHERE finalized_at IS NULL`) == 0
		})
		// Retention's part: the runs and their jobs go, and a vacuum lets
		// the index use their space again.
		execSQL(t, pool, `DELETE FROM river_job`)
		execSQL(t, pool, `DELETE FROM braid_runs`)
		// A snapshot that another session of this database holds (the
		// engine's periodic work) would keep the vacuum from removing the
		// deleted rows, and so their index entries: vacuum at a moment
		// when none is held.
		waitFor(t, "a moment with no other snapshot in the database", time.Minute, func() bool {
			return count(t, pool, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_xmin IS NOT NULL`) == 0
		})
		execSQL(t, pool, `VACUUM river_job`)
		if err := pool.QueryRow(ctx, `SELECT pg_relation_size('river_job_args_index')`).Scan(&sizes[r]); err != nil {
			t.Fatal(err)
		}
	}
	// The first round sizes the index for a round's jobs; the later ones
	// reuse it. With the task's ID in args, each round added about 260 kB
	// (33 pages).
	const page = 8192
	if grown := sizes[rounds-1] - sizes[1]; grown > 2*page {
		t.Fatalf("river_job_args_index grew %d bytes over %d rounds of %d runs after the first two (sizes %v), want at most %d",
			grown, rounds-2, perRound, sizes, 2*page)
	}
}
