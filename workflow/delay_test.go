package workflow_test

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
