package workflow_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// execer is a pool, a connection or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// growRuns inserts 8,000 finished runs, about 2 MB: eight times the
// 1,000-row floor of the statistics of young tables.
func growRuns(t *testing.T, db execer) {
	t.Helper()
	if _, err := db.Exec(context.Background(), `
		INSERT INTO braid_runs (id, workflow, status, input, finished_at)
		SELECT gen_random_uuid(), 'grown', 'completed', jsonb_build_object('pad', repeat('x', 200)), now()
		  FROM generate_series(1, 8000)`); err != nil {
		t.Fatal(err)
	}
}

// TestAnalyzeGrownTablesReplansAStatementMadeWhileTheTableWasEmpty shows
// the harm and the cure: a statement whose generic plan was made on an
// empty braid_runs keeps scanning the whole table after it has grown, until
// the maintenance loop analyzes the table, once, and not again until it
// grows again.
func TestAnalyzeGrownTablesReplansAStatementMadeWhileTheTableWasEmpty(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testutil.DB(t)
	analyze, eng := analyzer(t, pool)
	analyze() // every table is empty

	plan := preparedByID(t, pool)
	if p := plan(); !strings.Contains(p, "Seq Scan on braid_runs") {
		t.Fatalf("on the empty table, the plan is not the scan this test expects:\n%s", p)
	}

	growCommitted(t, pool)
	if p := plan(); !strings.Contains(p, "Seq Scan on braid_runs") {
		t.Fatalf("the cached plan changed before any analysis:\n%s", p)
	}

	// A vacuum of the table holds the lock an analysis takes. The analysis
	// gives up rather than wait (PostgreSQL would cancel an autovacuum
	// waited on for a second) and leaves the table to the vacuum.
	vacuum, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = vacuum.Rollback(ctx) }()
	if _, err := vacuum.Exec(ctx, `LOCK TABLE braid_runs IN SHARE UPDATE EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	bounded, cancel := context.WithTimeout(ctx, 30*time.Second)
	got, err := workflow.AnalyzeGrownTables(bounded, eng)
	cancel()
	if err != nil || len(got) != 0 {
		t.Fatalf("with the table's lock held, analyzed %v (error %v); want none, without an error", got, err)
	}
	if err := vacuum.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	analyze("braid_runs")
	if p := plan(); !strings.Contains(p, "Index") || strings.Contains(p, "Seq Scan") {
		t.Fatalf("after the analysis, the statement still scans the table:\n%s", p)
	}
	analyze() // it has not grown since
}

// preparedByID prepares, on a connection of its own, a statement that
// reads braid_runs by ID, with generic plans forced, and returns a
// function that gives the statement's plan.
func preparedByID(t *testing.T, pool *pgxpool.Pool) func() string {
	t.Helper()
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = conn.Exec(ctx, `DEALLOCATE by_id`)
		_, _ = conn.Exec(ctx, `RESET plan_cache_mode`)
		conn.Release()
	})
	if _, err := conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `PREPARE by_id(uuid[]) AS SELECT status FROM braid_runs WHERE id = ANY($1)`); err != nil {
		t.Fatal(err)
	}
	return func() string {
		t.Helper()
		rows, err := conn.Query(ctx, `EXPLAIN EXECUTE by_id('{00000000-0000-0000-0000-000000000001}')`, pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(lines, "\n")
	}
}

// analyzer returns an engine on pool, and a function that runs its
// maintenance loop's analysis of grown tables once and checks which tables
// it analyzed.
func analyzer(t *testing.T, pool *pgxpool.Pool) (func(want ...string), *workflow.Engine) {
	t.Helper()
	eng, err := workflow.NewEngine(pool, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	analyze := func(want ...string) {
		t.Helper()
		got, err := workflow.AnalyzeGrownTables(context.Background(), eng)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("analyzed tables (-want +got):\n%s", diff)
		}
	}
	return analyze, eng
}

// growCommitted inserts the runs of growRuns on a connection of pool, and
// waits until the statistics count them.
func growCommitted(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	conn, err := pool.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	growRuns(t, conn)
	counted(t, pool, conn)
}

// counted has conn, which has just committed rows, report them to
// PostgreSQL's cumulative statistics at once, rather than within its usual
// interval, and waits until braid_runs counts 8,000 live rows.
func counted(t *testing.T, pool *pgxpool.Pool, conn *pgxpool.Conn) {
	t.Helper()
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the statistics to count the live rows", 30*time.Second, func() bool {
		var live int64
		if err := pool.QueryRow(ctx, `SELECT pg_stat_get_live_tuples('braid_runs'::regclass)`).Scan(&live); err != nil {
			t.Fatal(err)
		}
		return live >= 8000
	})
}

// TestAnalyzeGrownTablesWaitsForAnInsertInFlight: while one transaction
// inserts a table's rows, as a fan-out's batch inserts its children, the
// table has grown but its new rows are not visible. An analysis then would
// record a large table of no rows, on which keyed statements get plans
// that read it whole. The maintenance loop goes by the committed rows: it
// leaves the table alone until the insert commits, and then analyzes it.
func TestAnalyzeGrownTablesWaitsForAnInsertInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testutil.DB(t)
	analyze, _ := analyzer(t, pool)
	recorded := func() float32 {
		t.Helper()
		var tuples float32
		if err := pool.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = 'braid_runs'::regclass`).Scan(&tuples); err != nil {
			t.Fatal(err)
		}
		return tuples
	}

	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	growRuns(t, tx)
	analyze() // the table has grown, but none of its rows is committed
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	counted(t, pool, conn)

	analyze("braid_runs")
	if n := recorded(); n < 7600 || n > 8400 {
		t.Errorf("after the analysis, braid_runs records %.0f rows; it holds 8,000", n)
	}
	analyze() // the rows have not grown since
}

// TestAnalyzeGrownTablesLeavesTablesItDoesNotOwn: an engine whose role does
// not own braid's tables leaves them to autovacuum, rather than fail or
// fill the server's log with warnings every second.
func TestAnalyzeGrownTablesLeavesTablesItDoesNotOwn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testutil.URL(t)
	owner := testutil.Pool(t, url)
	growCommitted(t, owner)
	reader := nonOwnerPool(t, owner, url)
	eng, err := workflow.NewEngine(reader, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	got, err := workflow.AnalyzeGrownTables(ctx, eng)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("analyzed %v, which its role does not own", got)
	}
	engOwner, err := workflow.NewEngine(owner, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	if got, err := workflow.AnalyzeGrownTables(ctx, engOwner); err != nil || len(got) != 1 || got[0] != "braid_runs" {
		t.Fatalf("the owner analyzed %v (error %v); want braid_runs", got, err)
	}
}

// nonOwnerPool returns a pool on url, the database of owner, whose
// connections act as a role that owns none of its tables.
func nonOwnerPool(t *testing.T, owner *pgxpool.Pool, url string) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	var db string
	if err := owner.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	role := "braid_reader_" + strings.TrimPrefix(db, "braid_")
	role = pgx.Identifier{role}.Sanitize()
	if _, err := owner.Exec(ctx, fmt.Sprintf(`CREATE ROLE %s NOLOGIN`, role)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = owner.Exec(context.Background(), fmt.Sprintf(`DROP OWNED BY %s; DROP ROLE %s`, role, role))
	})
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, `SET ROLE `+role)
		return err
	}
	reader, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reader.Close)
	return reader
}

// TestAnalyzeGrownTablesReadsTheKeyColumns: the analysis of a grown table
// reads the columns that statements find rows by, which the plans need,
// and leaves out the payloads, which make it dear; and it records the
// table's size as a full analysis would. Every table it keeps up is
// grown here, so a column list that names a column the table lacks fails
// the analysis, and the test.
func TestAnalyzeGrownTablesReadsTheKeyColumns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testutil.DB(t)
	analyze, _ := analyzer(t, pool)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, q := range []string{
		`INSERT INTO braid_runs (id, workflow, status, input, finished_at)
		 SELECT ('00000000-0000-0000-0000-' || lpad(g::text, 12, '0'))::uuid, 'grown', 'completed', '{"pad": 1}', now()
		   FROM generate_series(1, 8000) g`,
		`INSERT INTO braid_tasks (id, run_id, key, workflow, status, input)
		 SELECT id, id, 'root', 'grown', 'completed', '{"pad": 1}' FROM braid_runs`,
		`INSERT INTO braid_steps (task_id, name, kind, status, output)
		 SELECT id, 'step', 'step', 'completed', '{"pad": 1}' FROM braid_tasks`,
		`INSERT INTO river_job (args, kind, max_attempts, queue, state, finalized_at)
		 SELECT '{"pad": 1}', 'grown', 1, 'default', 'completed', now() FROM generate_series(1, 8000)`,
		`SELECT pg_stat_force_next_flush()`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	tables := []string{"braid_runs", "braid_steps", "braid_tasks", "river_job"}
	waitFor(t, "the statistics to count the live rows", 30*time.Second, func() bool {
		var least int64
		if err := pool.QueryRow(ctx, `SELECT min(pg_stat_get_live_tuples(to_regclass(t))) FROM unnest($1::text[]) AS t`, tables).Scan(&least); err != nil {
			t.Fatal(err)
		}
		return least >= 8000
	})
	analyze(tables...)

	payloads := map[string]bool{"input": true, "output": true, "error": true, "args": true, "metadata": true, "errors": true}
	keys := map[string][]string{
		"braid_runs":  {"id", "status"},
		"braid_tasks": {"id", "run_id", "parent_task_id", "status"},
		"braid_steps": {"task_id", "name", "status", "resume_at"},
		"river_job":   {"id", "state", "queue", "kind", "unique_key"},
	}
	for _, table := range tables {
		var tuples float32
		if err := pool.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = to_regclass($1)`, table).Scan(&tuples); err != nil {
			t.Fatal(err)
		}
		if tuples < 8000 {
			t.Errorf("%s: the analysis recorded %v rows; want at least 8,000", table, tuples)
		}
		rows, err := pool.Query(ctx, `SELECT attname::text FROM pg_stats WHERE schemaname = current_schema() AND tablename = $1`, table)
		if err != nil {
			t.Fatal(err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		for _, c := range got {
			have[c] = true
			if payloads[c] {
				t.Errorf("%s: the analysis read the payload column %s", table, c)
			}
		}
		for _, c := range keys[table] {
			if !have[c] {
				t.Errorf("%s: the analysis did not read the key column %s (read %v)", table, c, got)
			}
		}
	}
}
