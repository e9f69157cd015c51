package workflow_test

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// removedByFilter matches the rows a plan node read and then dropped.
var removedByFilter = regexp.MustCompile(`Rows Removed by Filter: (\d+)`)

// TestDueStatementsReadOnlyDueRows checks that the delay processor's
// statements, which run at every pass, read the timers and deadlines that
// are due and stop there: among thousands not yet due, each finds the one
// that is due by its index's bound, not by reading and dropping the rest.
// The database keeps its production clock (braid_clock() is
// clock_timestamp(), which no index condition may compare with).
func TestDueStatementsReadOnlyDueRows(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ctx := ctxTimeout(t, 30*time.Second)
	const notDue = 3000
	for _, sql := range []string{
		`INSERT INTO braid_runs (id, workflow, status, input) VALUES ('00000000-0000-0000-0000-0000000000a1', 'p', 'waiting', 'null')`,
		`INSERT INTO braid_tasks (id, run_id, key, workflow, status, input)
		 VALUES ('00000000-0000-0000-0000-0000000000b1', '00000000-0000-0000-0000-0000000000a1', 'root', 'p', 'waiting', 'null')`,
		`INSERT INTO braid_steps (task_id, name, kind, status, resume_at)
		 SELECT '00000000-0000-0000-0000-0000000000b1', 'later/' || i, 'delay', 'waiting', now() + interval '1 day'
		   FROM generate_series(1, ` + strconv.Itoa(notDue) + `) i`,
		`INSERT INTO braid_steps (task_id, name, kind, status, resume_at)
		 VALUES ('00000000-0000-0000-0000-0000000000b1', 'due', 'delay', 'waiting', now() - interval '1 second')`,
		`INSERT INTO braid_runs (id, workflow, status, input, timeout, deadline_at)
		 SELECT gen_random_uuid(), 'p', 'running', 'null', interval '1 day', now() + interval '1 day'
		   FROM generate_series(1, ` + strconv.Itoa(notDue) + `)`,
		`INSERT INTO braid_runs (id, workflow, status, input, timeout, deadline_at)
		 VALUES (gen_random_uuid(), 'p', 'running', 'null', interval '1 second', now() - interval '1 second')`,
		`ANALYZE braid_runs, braid_tasks, braid_steps`,
	} {
		execSQL(t, pool, sql)
	}
	for name, st := range workflow.DueStatements {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := tx.Query(ctx, `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) `+st.SQL, st.Args...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
		_ = tx.Rollback(ctx)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		text := strings.Join(plan, "\n")
		if !strings.Contains(plan[0], "rows=1 ") {
			t.Errorf("%s found other than the one due row:\n%s", name, text)
		}
		for _, m := range removedByFilter.FindAllStringSubmatch(text, -1) {
			if n, _ := strconv.Atoi(m[1]); n > 10 {
				t.Errorf("%s read %d rows that were not due, of %d waiting:\n%s", name, n, notDue, text)
			}
		}
	}
}

// refuseUpdates makes every update of table whose new row meets when fail,
// as a trigger or a constraint of an operator's might.
func refuseUpdates(t *testing.T, pool *pgxpool.Pool, table, when string) {
	t.Helper()
	execSQL(t, pool, `
		CREATE OR REPLACE FUNCTION refuse_update() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		    RAISE EXCEPTION 'update of % refused', TG_TABLE_NAME;
		END $$`)
	execSQL(t, pool, `CREATE TRIGGER refuse_update BEFORE UPDATE ON `+table+` FOR EACH ROW WHEN (`+when+`) EXECUTE FUNCTION refuse_update()`)
}

// Due delays whose wake always fails, as many as a batch holds and due
// first, hold back no other delay: each is set aside once it has failed on
// its own, and the delay due after them fires.
func TestDelaysThatAlwaysFailDoNotHoldBackTheOthers(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ctx := ctxTimeout(t, 60*time.Second)
	refuseUpdates(t, pool, "braid_steps", `NEW.status = 'fired' AND NEW.name = 'poison'`)
	nap := workflow.Define("set_aside_nap", func(t *workflow.Task, in struct {
		Name string
		Wait time.Duration
	}) (string, error) {
		if err := t.Delay(in.Name, in.Wait); err != nil {
			return "", err
		}
		return in.Name, nil
	})
	cfg := testConfig(nap)
	cfg.DelayBatchSize = 2
	eng := startEngine(t, pool, cfg)
	for range cfg.DelayBatchSize {
		if _, err := nap.Start(ctx, eng, struct {
			Name string
			Wait time.Duration
		}{"poison", 100 * time.Millisecond}, nil); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the poisoned delays to wait", 10*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM braid_steps WHERE name = 'poison' AND status = 'waiting'`) == cfg.DelayBatchSize
	})
	ok, err := nap.Start(ctx, eng, struct {
		Name string
		Wait time.Duration
	}{"ok", 300 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ok.Result(ctxTimeout(t, 15*time.Second)); err != nil || got != "ok" {
		t.Fatalf("the run whose delay fell due after %d that always fail: %q, %v; want it woken", cfg.DelayBatchSize, got, err)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_steps WHERE name = 'poison' AND status = 'waiting'`); n != cfg.DelayBatchSize {
		t.Fatalf("%d poisoned delays wait; want all %d still waiting", n, cfg.DelayBatchSize)
	}
}

// Runs past their deadline whose cancel always fails, as many as a pass
// holds and overdue first, hold back no other: each is set aside once its
// cancel has failed on its own, and the run overdue after them is
// cancelled.
func TestDeadlinesThatAlwaysFailDoNotHoldBackTheOthers(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ctx := ctxTimeout(t, 60*time.Second)
	refuseUpdates(t, pool, "braid_runs", `NEW.status = 'cancelled' AND NEW.input = '"poison"'`)
	sleeper := workflow.Define("set_aside_sleeper", func(t *workflow.Task, _ string) (string, error) {
		return "", t.Delay("long", time.Hour)
	})
	cfg := testConfig(sleeper)
	cfg.DelayBatchSize = 2
	eng := startEngine(t, pool, cfg)
	for range cfg.DelayBatchSize {
		if _, err := sleeper.Start(ctx, eng, "poison", &workflow.StartOpts{Timeout: 100 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	ok, err := sleeper.Start(ctx, eng, "ok", &workflow.StartOpts{Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_, err = ok.Result(ctxTimeout(t, 15*time.Second))
	if te := (*workflow.TimeoutError)(nil); !errors.As(err, &te) {
		t.Fatalf("the run overdue after %d whose cancel always fails: %v; want it cancelled by its deadline", cfg.DelayBatchSize, err)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_runs WHERE input = '"poison"' AND status <> 'cancelled'`); n != cfg.DelayBatchSize {
		t.Fatalf("%d poisoned runs are unfinished; want all %d", n, cfg.DelayBatchSize)
	}
}
