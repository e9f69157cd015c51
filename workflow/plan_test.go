package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// scanNode matches a plan node that reads a table or an index, and
// scanDetail the lines under it that say how.
var (
	scanNode   = regexp.MustCompile(`(Seq Scan|Index Scan|Index Only Scan|Bitmap Index Scan)( Backward)? (on|using) (\w+)`)
	scanDetail = regexp.MustCompile(`^\s+(Index Cond|Recheck Cond|Filter|Rows Removed|Heap Fetches):`)
)

// unkeyed are the indexes that do not read by key: a condition on them
// picks a share of the table (every job of a kind, every run of a status),
// not the rows of the keys a statement is given.
var unkeyed = map[string]bool{
	"river_job_kind": true, "river_job_state_and_finalized_at_index": true,
	"river_job_args_index": true, "river_job_metadata_index": true,
	"braid_runs_status_created_at": true, "braid_runs_workflow_created_at": true, "braid_runs_created_at": true,
	"braid_tasks_live": true,
}

// unkeyedScans returns the scans of plan that do not read by key: a
// sequential scan, an index read whole, or an unkeyed one.
func unkeyedScans(plan []string) []string {
	var bad []string
	for i, line := range plan {
		m := scanNode.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if m[1] == "Seq Scan" || unkeyed[m[4]] {
			bad = append(bad, strings.TrimSpace(line))
			continue
		}
		keyed := false
		for _, d := range plan[i+1:] {
			if !scanDetail.MatchString(d) {
				break
			}
			keyed = keyed || strings.Contains(d, "Index Cond:")
		}
		if !keyed {
			bad = append(bad, strings.TrimSpace(line))
		}
	}
	return bad
}

// TestLoadStatementsReadByKeyOnTheirGenericPlans checks the plans that the
// loads of starting turns run on (keyedPlansSQL), as a new deployment
// makes them (see plannedAnew): each must read every table it touches by
// key.
func TestLoadStatementsReadByKeyOnTheirGenericPlans(t *testing.T) {
	t.Parallel()
	loads := map[string][]string{}
	for _, sql := range workflow.LoadStatements {
		loads[sql] = []string{"uuid[]"}
	}
	plannedAnew(t, loads)
}

// TestKeyedPlansEndWithTheirTransaction checks that the settings of
// keyedPlansSQL hold for their own transaction only, sent with BEGIN or, as
// a load is, in a pipeline without one: a connection goes back to the pool
// with the plans and scans its other statements expect.
func TestKeyedPlansEndWithTheirTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testutil.DB(t)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	settings := func() string {
		t.Helper()
		var mode, seq string
		if err := conn.QueryRow(ctx, `SELECT current_setting('plan_cache_mode'), current_setting('enable_seqscan')`).Scan(&mode, &seq); err != nil {
			t.Fatal(err)
		}
		return mode + " " + seq
	}
	before := settings()

	// A pipeline without BEGIN, as a load sends it.
	b := &pgx.Batch{}
	b.Queue(workflow.KeyedPlansSQL)
	var inside string
	b.Queue(`SELECT current_setting('plan_cache_mode') || ' ' || current_setting('enable_seqscan')`).QueryRow(func(r pgx.Row) error {
		return r.Scan(&inside)
	})
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		t.Fatal(err)
	}
	if inside != "force_generic_plan off" {
		t.Errorf("inside the pipeline the settings are %q", inside)
	}
	if got := settings(); got != before {
		t.Errorf("after the pipeline the settings are %q, want %q", got, before)
	}

	// A transaction, committed and rolled back.
	for _, end := range []func(pgx.Tx) error{
		func(tx pgx.Tx) error { return tx.Commit(ctx) },
		func(tx pgx.Tx) error { return tx.Rollback(ctx) },
	} {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, workflow.KeyedPlansSQL); err != nil {
			t.Fatal(err)
		}
		if err := end(tx); err != nil {
			t.Fatal(err)
		}
		if got := settings(); got != before {
			t.Errorf("after the transaction the settings are %q, want %q", got, before)
		}
	}
}

// TestLoadsRunOnGenericPlans runs turns, fetched and claimed, and reads
// from every connection of the pool how PostgreSQL planned the loads
// there: never for their arguments (PostgreSQL plans each statement anew
// at its first five executions on a connection, and after that whenever
// its generic plan looks dearer), always on their generic plans.
func TestLoadsRunOnGenericPlans(t *testing.T) {
	t.Parallel()
	ctx := ctxTimeout(t, time.Minute)
	pool := testutil.DB(t)
	child := workflow.Define("keyed_child", func(t *workflow.Task, n int) (int, error) {
		return workflow.Step(t, "double", func(context.Context) (int, error) { return 2 * n, nil })
	})
	parent := workflow.Define("keyed_parent", func(t *workflow.Task, n int) (int, error) {
		outs, err := workflow.Map(t, "child", child, make([]int, n))
		return len(outs), err
	})
	eng := startEngine(t, pool, testConfig(child, parent))
	for range 3 {
		run, err := parent.Start(ctx, eng, 40, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := run.Result(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := eng.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	want := map[string]string{}
	for name, sql := range workflow.LoadStatements {
		want[sql] = name
	}
	generic := map[string]int64{}
	for _, c := range idleConns(t, pool) {
		rows, err := c.Query(ctx, `SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var sql string
			var g, cu int64
			if err := rows.Scan(&sql, &g, &cu); err != nil {
				t.Fatal(err)
			}
			name, ok := want[sql]
			if !ok {
				continue
			}
			generic[name] += g
			if cu > 0 {
				t.Errorf("the load's %s statement was planned for its arguments %d times on one connection (and %d times generically)", name, cu, g)
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	for name := range workflow.LoadStatements {
		if generic[name] == 0 {
			t.Errorf("the load's %s statement never ran on its generic plan", name)
		}
	}
}

// TestBatchStatementsReadByKeyOnTheirGenericPlans runs turns that use what
// an outcome batch writes (steps, a fan-out and its join, a failed attempt,
// a child left unawaited and cancelled, a detached child, a DAG, a delay,
// signals), then reads from every connection of the pool the statements
// that ran on generic plans only, and checks each one's generic plan as a
// new deployment makes it (plannedAnew): every table it touches it must
// read by key.
func TestBatchStatementsReadByKeyOnTheirGenericPlans(t *testing.T) {
	t.Parallel()
	ctx := ctxTimeout(t, time.Minute)
	pool := testutil.DB(t)
	child := workflow.Define("keyed_child", func(t *workflow.Task, n int) (int, error) {
		return workflow.Step(t, "double", func(context.Context) (int, error) {
			if n == 3 && t.Attempt() == 1 {
				return 0, errors.New("the first attempt of child 3 fails")
			}
			return 2 * n, nil
		})
	}, workflow.WithMaxAttempts(2), workflow.WithRetry(fast))
	sleeper := workflow.Define("keyed_sleeper", func(t *workflow.Task, _ struct{}) (struct{}, error) {
		return struct{}{}, t.Delay("long", time.Hour)
	})
	napper := workflow.Define("keyed_napper", func(t *workflow.Task, _ struct{}) (struct{}, error) {
		return struct{}{}, t.Delay("nap", 50*time.Millisecond)
	})
	// A task waits for every child it started, so the child it leaves is
	// another task's, which does not wait.
	quitter := workflow.Define("keyed_quitter", func(t *workflow.Task, _ struct{}) (struct{}, error) {
		workflow.Go(t, "left", sleeper, struct{}{})
		return struct{}{}, nil
	})
	parent := workflow.Define("keyed_parent", func(t *workflow.Task, n int) (int, error) {
		workflow.Go(t, "quitter", quitter, struct{}{})
		workflow.Go(t, "detached", napper, struct{}{}, workflow.Detached())
		items := make([]int, n)
		for i := range items {
			items[i] = i
		}
		outs, err := workflow.Map(t, "child", child, items)
		return len(outs), err
	})
	first := workflow.Define("keyed_first", func(t *workflow.Task, n int) (int, error) { return n, nil })
	second := workflow.Define("keyed_second", func(t *workflow.Task, n int) (int, error) { return n + 1, nil })
	a := workflow.Node("a", first)
	b := workflow.Node("b", second, workflow.After("a"))
	c := workflow.Node("c", second, workflow.After("a"))
	dag := workflow.DAG[int]("keyed_dag", a, b, c)

	// Two signals: one sent as the run starts, one once the run waits.
	waiter := workflow.Define("keyed_waiter", func(t *workflow.Task, _ struct{}) (int, error) {
		a, _, err := workflow.WaitSignal[int](t, "a", 0)
		if err != nil {
			return 0, err
		}
		b, _, err := workflow.WaitSignal[int](t, "b", 0)
		return a + b, err
	})

	eng := startEngine(t, pool, testConfig(child, sleeper, napper, quitter, parent, first, second, dag, waiter))
	wrun, err := waiter.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Signal(ctx, wrun.ID, "a", 1, nil); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		run, err := parent.Start(ctx, eng, 20, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := run.Result(ctx); err != nil {
			t.Fatal(err)
		}
		drun, err := dag.Start(ctx, eng, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := drun.Result(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := eng.Signal(ctx, wrun.ID, "b", 2, nil); err != nil {
		t.Fatal(err)
	}
	if sum, err := wrun.Result(ctx); err != nil || sum != 3 {
		t.Fatalf("the waiter returned %d, %v; want 3", sum, err)
	}
	if err := eng.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	seen := map[string][]string{}
	for _, c := range idleConns(t, pool) {
		for sql, types := range genericOnly(t, ctx, c.Conn()) {
			seen[sql] = types
		}
	}
	if len(seen) == 0 {
		t.Fatal("no statement ran on its generic plan alone")
	}
	plannedAnew(t, seen)
}

// idleConns acquires every idle connection of pool, to read what was
// prepared on each, and releases them when the test ends (before the pool
// closes).
func idleConns(t *testing.T, pool *pgxpool.Pool) []*pgxpool.Conn {
	t.Helper()
	conns := pool.AcquireAllIdle(context.Background())
	t.Cleanup(func() {
		for _, c := range conns {
			c.Release()
		}
	})
	return conns
}

// plannedAnew checks the generic plans of stmts (SQL and parameter types),
// made with the batch's settings (keyedPlansSQL) as a new deployment makes
// them at its first turns: on an empty database, and on one of a few rows
// that was never analyzed, whose tables the planner counts as the one page
// each has. A generic plan is kept until its tables are next analyzed, so
// a plan that reads a table whole here would go on doing so as it grows.
func plannedAnew(t *testing.T, stmts map[string][]string) {
	t.Helper()
	ctx := context.Background()
	checkGenericPlans(t, ctx, testutil.DB(t), stmts)
	few := testutil.DB(t)
	for _, sql := range []string{
		`INSERT INTO braid_runs (id, workflow, status, input) VALUES ('00000000-0000-0000-0000-0000000000a1', 'p', 'running', 'null')`,
		`INSERT INTO braid_tasks (id, run_id, parent_task_id, key, workflow, status, input)
		 VALUES ('00000000-0000-0000-0000-0000000000b1', '00000000-0000-0000-0000-0000000000a1', NULL, 'root', 'p', 'waiting', 'null'),
		        ('00000000-0000-0000-0000-0000000000b2', '00000000-0000-0000-0000-0000000000a1', '00000000-0000-0000-0000-0000000000b1', 'c/0', 'c', 'pending', 'null')`,
		`INSERT INTO braid_steps (task_id, name, kind, status) VALUES ('00000000-0000-0000-0000-0000000000b2', 's', 'step', 'completed')`,
		`INSERT INTO river_job (args, kind, max_attempts, state, unique_key) VALUES ('{}', 'braid_task', 25, 'running', '\x000000000000000000000000000000b2')`,
	} {
		execSQL(t, few, sql)
	}
	checkGenericPlans(t, ctx, few, stmts)
}

// genericOnly returns the statements prepared on conn that ran there on
// generic plans only, with their parameters' types.
func genericOnly(t *testing.T, ctx context.Context, conn *pgx.Conn) map[string][]string {
	t.Helper()
	rows, err := conn.Query(ctx, `
		SELECT statement, parameter_types::text[] FROM pg_prepared_statements
		 WHERE generic_plans > 0 AND custom_plans = 0 AND statement !~* '^\s*(BEGIN|COMMIT|ROLLBACK|SET|SHOW)\M'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var sql string
		var types []string
		if err := rows.Scan(&sql, &types); err != nil {
			t.Fatal(err)
		}
		out[sql] = types
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkGenericPlans prepares each statement on pool's database with the
// batch's settings (keyedPlansSQL) and checks its generic plan.
func checkGenericPlans(t *testing.T, ctx context.Context, pool *pgxpool.Pool, stmts map[string][]string) {
	t.Helper()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, workflow.KeyedPlansSQL); err != nil {
		t.Fatal(err)
	}
	i := 0
	for sql, types := range stmts {
		i++
		name := fmt.Sprintf("keyed_%d", i)
		args, params := "", ""
		if len(types) > 0 {
			params = "(" + strings.Join(types, ", ") + ")"
			args = "(" + strings.TrimSuffix(strings.Repeat("NULL, ", len(types)), ", ") + ")"
		}
		if _, err := tx.Exec(ctx, `SAVEPOINT p`); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `PREPARE `+name+params+` AS `+sql, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Errorf("preparing %s: %v", sql, err)
			_, _ = tx.Exec(ctx, `ROLLBACK TO SAVEPOINT p`)
			continue
		}
		rows, err := tx.Query(ctx, `EXPLAIN EXECUTE `+name+args, pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			t.Fatal(err)
		}
		plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Errorf("explaining %s: %v", sql, err)
			_, _ = tx.Exec(ctx, `ROLLBACK TO SAVEPOINT p`)
			continue
		}
		if bad := unkeyedScans(plan); len(bad) > 0 {
			t.Errorf("the generic plan of\n%s\nreads %q without an index condition:\n%s", sql, bad, strings.Join(plan, "\n"))
		}
	}
}

// TestLeftOutListsAreHashedOnGenericPlans checks that each statement that
// leaves out a list of rows it was given reads the list into a hash table
// once, on the generic plan a statement gets after its fifth run. Written
// as id <> ALL($n), the generic plan compares every row with every entry
// of the list: a Cancel of a run of 10,000 tasks, or a retention batch of
// as many, would make 100 million comparisons while it holds their locks.
func TestLeftOutListsAreHashedOnGenericPlans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testutil.DB(t)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	i := 0
	for what, st := range workflow.LeftOutStatements {
		i++
		name := fmt.Sprintf("left_out_%d", i)
		if _, err := tx.Exec(ctx, `PREPARE `+name+`(`+strings.Join(st.Types, ", ")+`) AS `+st.SQL, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatalf("preparing %s: %v", what, err)
		}
		args := strings.TrimSuffix(strings.Repeat("NULL, ", len(st.Types)), ", ")
		rows, err := tx.Query(ctx, `EXPLAIN EXECUTE `+name+`(`+args+`)`, pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			t.Fatal(err)
		}
		plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("explaining %s: %v", what, err)
		}
		text := strings.Join(plan, "\n")
		if !strings.Contains(text, "hashed SubPlan") || strings.Contains(text, "<> ALL ($") {
			t.Errorf("the generic plan of %s does not read its list into a hash table:\n%s", what, text)
		}
	}
}
