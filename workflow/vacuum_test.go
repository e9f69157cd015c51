package workflow_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// churnRows is how many runs churn inserts and deletes: more dead rows
// than the vacuum of churned tables waits for.
const churnRows = 12_000

// vacuumScene returns a fresh database whose braid_runs autovacuum leaves
// alone, so that only the engine's vacuum counts, and an engine on it that
// is not started: the test runs the vacuum itself.
func vacuumScene(t *testing.T) (*pgxpool.Pool, *workflow.Engine) {
	t.Helper()
	pool := testutil.DB(t)
	execSQL(t, pool, `ALTER TABLE braid_runs SET (autovacuum_enabled = false)`)
	eng, err := workflow.NewEngine(pool, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	return pool, eng
}

// churn inserts and deletes churnRows runs, and waits until PostgreSQL's
// cumulative statistics count at least want dead rows in braid_runs.
func churn(t *testing.T, pool *pgxpool.Pool, want int64) {
	t.Helper()
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	execSQL(t, conn, `
		INSERT INTO braid_runs (id, workflow, status, input, finished_at)
		SELECT gen_random_uuid(), 'churned', 'completed', '{}', now() FROM generate_series(1, $1::int)`, churnRows)
	execSQL(t, conn, `DELETE FROM braid_runs WHERE workflow = 'churned'`)
	execSQL(t, conn, `SELECT pg_stat_force_next_flush()`)
	waitFor(t, "the statistics to count the dead rows", 30*time.Second, func() bool {
		return deadRuns(t, pool) >= want
	})
}

// deadRuns reads the dead rows that the statistics count in braid_runs.
func deadRuns(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	var dead int64
	if err := pool.QueryRow(context.Background(), `SELECT pg_stat_get_dead_tuples('braid_runs'::regclass)`).Scan(&dead); err != nil {
		t.Fatal(err)
	}
	return dead
}

// vacuumsOfRuns reads how many times braid_runs was vacuumed, autovacuum
// left out.
func vacuumsOfRuns(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(context.Background(), `SELECT pg_stat_get_vacuum_count('braid_runs'::regclass)`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// vacuumed runs one pass of the vacuum of churned tables and returns the
// tables it vacuumed.
func vacuumed(t *testing.T, eng *workflow.Engine) []string {
	t.Helper()
	got, err := workflow.VacuumChurnedTables(ctxTimeout(t, 5*time.Second), eng)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestVacuumChurnedTablesReclaimsTheirDeadRowsOnce: a table whose dead
// rows outnumber its live ones is vacuumed, its dead rows are gone, and
// the next pass leaves it until new dead rows come; a table without dead
// rows is never vacuumed.
func TestVacuumChurnedTablesReclaimsTheirDeadRowsOnce(t *testing.T) {
	t.Parallel()
	pool, eng := vacuumScene(t)
	if got := vacuumed(t, eng); len(got) != 0 {
		t.Fatalf("an empty database: vacuumed %v; want nothing", got)
	}
	churn(t, pool, churnRows)
	if got := vacuumed(t, eng); !cmp.Equal(got, []string{"braid_runs"}) {
		t.Fatalf("after %d runs were deleted: vacuumed %v; want [braid_runs]", churnRows, got)
	}
	if dead := deadRuns(t, pool); dead != 0 {
		t.Errorf("braid_runs has %d dead rows after its vacuum; want 0", dead)
	}
	if got := vacuumed(t, eng); len(got) != 0 {
		t.Fatalf("with no new dead rows: vacuumed %v again; want nothing", got)
	}
	if n := vacuumsOfRuns(t, pool); n != 1 {
		t.Errorf("braid_runs was vacuumed %d times; want once", n)
	}
	churn(t, pool, churnRows)
	if got := vacuumed(t, eng); !cmp.Equal(got, []string{"braid_runs"}) {
		t.Fatalf("after as many runs again were deleted: vacuumed %v; want [braid_runs]", got)
	}
}

// TestVacuumChurnedTablesDoesNotRepeatWhatAnOpenSnapshotKeeps: while an
// older transaction may still see the deleted rows, a vacuum cannot remove
// them. The pass that vacuumed the table does not vacuum it again at every
// pass after, but only once as many new dead rows have come on top.
func TestVacuumChurnedTablesDoesNotRepeatWhatAnOpenSnapshotKeeps(t *testing.T) {
	t.Parallel()
	pool, eng := vacuumScene(t)
	ctx := ctxTimeout(t, 5*time.Second)
	old, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = old.Rollback(context.Background()) }()
	// A transaction id of its own holds back the horizon of every vacuum.
	execSQL(t, old, `SELECT txid_current()`)

	churn(t, pool, churnRows)
	if got := vacuumed(t, eng); !cmp.Equal(got, []string{"braid_runs"}) {
		t.Fatalf("vacuumed %v; want [braid_runs]", got)
	}
	if dead := deadRuns(t, pool); dead < churnRows {
		t.Fatalf("braid_runs has %d dead rows after a vacuum that an older transaction held back; want at least %d", dead, churnRows)
	}
	for range 3 {
		if got := vacuumed(t, eng); len(got) != 0 {
			t.Fatalf("vacuumed %v again, with no dead rows it could remove; want nothing", got)
		}
	}
	churn(t, pool, 2*churnRows)
	if got := vacuumed(t, eng); !cmp.Equal(got, []string{"braid_runs"}) {
		t.Fatalf("after as many runs again were deleted: vacuumed %v; want [braid_runs]", got)
	}
	if n := vacuumsOfRuns(t, pool); n != 2 {
		t.Errorf("braid_runs was vacuumed %d times; want twice", n)
	}
}

// TestVacuumChurnedTablesSkipsAHeldTable: a table that another session
// holds (autovacuum, an analysis) is skipped at once rather than waited
// for, and vacuumed at the first pass once it is free.
func TestVacuumChurnedTablesSkipsAHeldTable(t *testing.T) {
	t.Parallel()
	pool, eng := vacuumScene(t)
	ctx := ctxTimeout(t, 5*time.Second)
	churn(t, pool, churnRows)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	execSQL(t, tx, `LOCK TABLE braid_runs IN SHARE UPDATE EXCLUSIVE MODE`)
	if got := vacuumed(t, eng); len(got) != 0 {
		t.Fatalf("vacuumed %v while another session held braid_runs; want nothing", got)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got := vacuumed(t, eng); !cmp.Equal(got, []string{"braid_runs"}) {
		t.Fatalf("once braid_runs was free: vacuumed %v; want [braid_runs]", got)
	}
}

// TestVacuumChurnedTablesLeavesTablesItDoesNotOwn: a role that owns no
// table vacuums none, without an error; the owner's engine does.
func TestVacuumChurnedTablesLeavesTablesItDoesNotOwn(t *testing.T) {
	t.Parallel()
	url := testutil.URL(t)
	owner := testutil.Pool(t, url)
	execSQL(t, owner, `ALTER TABLE braid_runs SET (autovacuum_enabled = false)`)
	churn(t, owner, churnRows)
	eng, err := workflow.NewEngine(nonOwnerPool(t, owner, url), testConfig())
	if err != nil {
		t.Fatal(err)
	}
	if got := vacuumed(t, eng); len(got) != 0 {
		t.Fatalf("vacuumed %v, which its role does not own", got)
	}
	engOwner, err := workflow.NewEngine(owner, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	if got := vacuumed(t, engOwner); !cmp.Equal(got, []string{"braid_runs"}) {
		t.Fatalf("the owner vacuumed %v; want [braid_runs]", got)
	}
}

// TestVacuumChurnedTablesWithAnEndedContext: a pass whose context has
// ended vacuums nothing and says why; the next pass vacuums.
func TestVacuumChurnedTablesWithAnEndedContext(t *testing.T) {
	t.Parallel()
	pool, eng := vacuumScene(t)
	churn(t, pool, churnRows)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	got, err := workflow.VacuumChurnedTables(ctx, eng)
	if !errors.Is(err, context.Canceled) || len(got) != 0 {
		t.Fatalf("with an ended context: vacuumed %v, error %v; want nothing and context.Canceled", got, err)
	}
	if n := vacuumsOfRuns(t, pool); n != 0 {
		t.Fatalf("braid_runs was vacuumed %d times; want none", n)
	}
	if got := vacuumed(t, eng); !cmp.Equal(got, []string{"braid_runs"}) {
		t.Fatalf("the next pass vacuumed %v; want [braid_runs]", got)
	}
}

// TestTheMaintenanceLoopVacuumsChurnedTables: a started engine vacuums a
// churned table by itself, every VacuumInterval; one whose VacuumInterval
// is negative leaves it to autovacuum (off here), and never vacuums it.
func TestTheMaintenanceLoopVacuumsChurnedTables(t *testing.T) {
	t.Parallel()
	on, off := testutil.DB(t), testutil.DB(t)
	for _, pool := range []*pgxpool.Pool{on, off} {
		execSQL(t, pool, `ALTER TABLE braid_runs SET (autovacuum_enabled = false)`)
		churn(t, pool, churnRows)
	}
	cfg := testConfig()
	cfg.VacuumInterval = 50 * time.Millisecond
	startEngine(t, on, cfg)
	cfg = testConfig()
	cfg.VacuumInterval = -1
	startEngine(t, off, cfg)
	waitFor(t, "the other engine to run its maintenance loop", 20*time.Second, func() bool {
		return count(t, off, `SELECT count(*) FROM braid_leases WHERE name = 'braid:maintenance'`) == 1
	})
	waitFor(t, "the engine to vacuum braid_runs", 20*time.Second, func() bool {
		return vacuumsOfRuns(t, on) >= 1
	})
	// As long again as twenty passes of the other engine would take.
	time.Sleep(time.Second)
	if n := vacuumsOfRuns(t, off); n != 0 {
		t.Fatalf("an engine with a negative VacuumInterval vacuumed braid_runs %d times; want none", n)
	}
}

// slowVacuumEngine returns a database with churned braid_runs, whose
// sessions vacuum slowly (a pause of delay every page), with settings
// added to them, and an engine on a pool made after those settings.
func slowVacuumEngine(t *testing.T, delay string, settings ...string) (*pgxpool.Pool, *workflow.Engine) {
	t.Helper()
	url := testutil.URL(t)
	owner := testutil.Pool(t, url)
	execSQL(t, owner, `ALTER TABLE braid_runs SET (autovacuum_enabled = false)`)
	churn(t, owner, churnRows)
	var db string
	if err := owner.QueryRow(context.Background(), `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	for _, set := range append([]string{"vacuum_cost_limit = 1", "vacuum_cost_delay = '" + delay + "'"}, settings...) {
		execSQL(t, owner, `ALTER DATABASE `+pgx.Identifier{db}.Sanitize()+` SET `+set)
	}
	pool := testutil.Pool(t, url)
	eng, err := workflow.NewEngine(pool, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	return pool, eng
}

// TestVacuumChurnedTablesGivesWayToALockRequest: PostgreSQL cancels an
// autovacuum that a lock request waits on, but not a VACUUM a session
// issued. The engine's vacuum gives way itself: a migration's ALTER TABLE
// goes ahead at once, rather than wait for the whole vacuum with every
// statement on the table queued behind it, and the pass ends without an
// error, leaving the table to the next.
func TestVacuumChurnedTablesGivesWayToALockRequest(t *testing.T) {
	t.Parallel()
	pool, eng := slowVacuumEngine(t, "100ms") // a second every ten pages
	type result struct {
		got []string
		err error
	}
	pass := make(chan result, 1)
	go func() {
		got, err := workflow.VacuumChurnedTables(context.Background(), eng)
		pass <- result{got, err}
	}()
	waitFor(t, "the vacuum to start", 10*time.Second, func() bool {
		return count(t, pool, `
			SELECT count(*) FROM pg_stat_activity
			 WHERE datname = current_database() AND query LIKE 'VACUUM%braid_runs' AND state = 'active'`) == 1
	})
	ctx := ctxTimeout(t, 5*time.Second) // the vacuum alone would take ten
	began := time.Now()
	if _, err := pool.Exec(ctx, `ALTER TABLE braid_runs ADD COLUMN note text`); err != nil {
		t.Fatalf("the ALTER TABLE waited on the engine's vacuum: %v", err)
	}
	r := <-pass
	t.Logf("the ALTER TABLE and the pass ended %v after the ALTER began", time.Since(began))
	if r.err != nil || len(r.got) != 0 {
		t.Fatalf("the pass that gave way: vacuumed %v, error %v; want nothing and no error", r.got, r.err)
	}
	if n := vacuumsOfRuns(t, pool); n != 0 {
		t.Errorf("braid_runs counts %d vacuums; want none, the one begun gave way", n)
	}
}

// TestVacuumChurnedTablesOutlastsTheSessionsStatementTimeout: a vacuum
// longer than the sessions' statement_timeout still ends (autovacuum's
// ignores it too), rather than be cancelled and begun again at every
// pass; and the connection goes back to the pool with its timeout.
func TestVacuumChurnedTablesOutlastsTheSessionsStatementTimeout(t *testing.T) {
	t.Parallel()
	pool, eng := slowVacuumEngine(t, "1ms", "statement_timeout = '200ms'")
	got, err := workflow.VacuumChurnedTables(ctxTimeout(t, 20*time.Second), eng)
	if err != nil || !cmp.Equal(got, []string{"braid_runs"}) {
		t.Fatalf("vacuumed %v, error %v; want [braid_runs]", got, err)
	}
	// Every connection of the pool has the database's timeout.
	conns := make([]*pgxpool.Conn, 0, pool.Stat().TotalConns())
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range pool.Stat().TotalConns() {
		c, err := pool.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		var timeout string
		if err := c.QueryRow(context.Background(), `SHOW statement_timeout`).Scan(&timeout); err != nil {
			t.Fatal(err)
		}
		if timeout != "200ms" {
			t.Errorf("a connection of the pool has statement_timeout %s after the vacuum; want the database's 200ms", timeout)
		}
	}
}

// TestVacuumChurnedTablesGivesWayWhileThePoolIsBusy: the vacuum gives way
// to a lock request even when every other connection of the pool is in
// use, as it is when the turns' statements queue behind a migration's
// ALTER TABLE, each holding its connection: the look for a waiting session
// must not wait for a connection of the pool, or the ALTER TABLE, and
// every statement behind it, waits for the whole vacuum.
func TestVacuumChurnedTablesGivesWayWhileThePoolIsBusy(t *testing.T) {
	t.Parallel()
	pool, eng := slowVacuumEngine(t, "100ms") // a second every ten pages
	type result struct {
		got []string
		err error
	}
	passCtx, stop := context.WithCancel(context.Background())
	defer stop()
	pass := make(chan result, 1)
	go func() {
		got, err := workflow.VacuumChurnedTables(passCtx, eng)
		pass <- result{got, err}
	}()
	waitFor(t, "the vacuum to start", 10*time.Second, func() bool {
		return count(t, pool, `
			SELECT count(*) FROM pg_stat_activity
			 WHERE datname = current_database() AND query LIKE 'VACUUM%braid_runs' AND state = 'active'`) == 1
	})
	// Every other connection of the pool is busy.
	var busy []*pgxpool.Conn
	for pool.Stat().AcquiredConns() < pool.Stat().MaxConns() {
		c, err := pool.Acquire(ctxTimeout(t, 5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		busy = append(busy, c)
	}
	migrator := testutil.Pool(t, pool.Config().ConnString())
	ctx := ctxTimeout(t, 5*time.Second) // the vacuum alone would take ten
	_, err := migrator.Exec(ctx, `ALTER TABLE braid_runs ADD COLUMN note text`)
	for _, c := range busy {
		c.Release()
	}
	if err != nil {
		stop() // rather than wait for the whole vacuum
		<-pass
		t.Fatalf("the ALTER TABLE waited on the engine's vacuum while the pool was busy: %v", err)
	}
	r := <-pass
	if r.err != nil || len(r.got) != 0 {
		t.Fatalf("the pass that gave way: vacuumed %v, error %v; want nothing and no error", r.got, r.err)
	}
}
