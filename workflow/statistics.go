package workflow

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Planner statistics of young tables.
//
// braid reads and writes its rows by key, batch by batch: a task by its
// ID, a task's steps, a batch's turn jobs. pgx prepares each statement
// once per connection, and after a few executions PostgreSQL keeps a
// generic plan for it, made with the table sizes of that moment, until the
// table's statistics change. On tables that were nearly empty when the
// plan was made, that plan scans the whole table, and it keeps doing so as
// the table grows, until autovacuum analyzes the table: by default within
// a minute, which is long enough for a new database under load to spend
// its first minute scanning tens of thousands of rows per statement.
//
// So the maintenance loop analyzes a table of braid's whose live rows have
// grown grownFactor times past the rows its last analysis found (and past
// grownFloorRows). It goes by the rows that PostgreSQL's cumulative
// statistics count, which are committed rows only, and not by the table's
// size: the size counts the pages of an insert still in flight, as when
// one transaction creates a fan-out's ten thousand children, and an
// analysis that ran then would find the pages but not their rows, which
// are not yet visible. Its statistics would describe a large table of a
// row or two, on which a statement that joins a batch's keys to the table
// is planned to read the table whole, a row or two being cheaper to read
// in full than to look up key by key, until the next analysis. (A batch's
// update of its tasks took 300 ms instead of 4 ms so.) The analysis makes
// every backend plan its statements on the table again. Autovacuum, which
// analyzes a table once a tenth of it has changed, nearly always comes
// first; this only covers the fast growth of a young table. A table the
// engine's role does not own, or that a vacuum holds, is left to
// autovacuum.
//
// The analysis reads only the columns that braid's and River's statements
// look rows up by, filter on or order by (grownTables): what the plans
// need is the table's size, which any analysis records, and the spread of
// those columns. Leaving out the payloads (inputs, outputs, errors, args)
// makes it about four times cheaper, and it runs while the table grows,
// under load. Autovacuum's own analysis, which comes later, covers every
// column.
const (
	// grownFactor is how many times its recorded rows a table's live rows
	// must reach.
	grownFactor = 8
	// grownFloorRows is the recorded rows a table counts as at least:
	// a table that was empty or nearly so is analyzed once it holds
	// grownFactor × grownFloorRows live rows (8,000).
	grownFloorRows = 1000
)

// grownTables are the tables whose statistics the maintenance loop keeps
// from lagging behind their growth, the ones the batches read and write,
// each with the columns its analysis reads.
var grownTables = []grownTable{
	{"braid_runs", "id, status, workflow, idempotency_key, created_at, finished_at, deadline_at"},
	{"braid_tasks", "id, run_id, parent_task_id, key, status, remaining, created_at, updated_at"},
	{"braid_steps", "task_id, name, kind, status, resume_at, wait_on, wait_run, created_at"},
	{"river_job", "id, state, queue, kind, priority, scheduled_at, unique_key, attempt, finalized_at"},
}

// grownTable is a table of grownTables and the columns its analysis reads.
type grownTable struct {
	name, columns string
}

// grownTableNames lists the names of grownTables.
func grownTableNames() []string {
	names := make([]string, len(grownTables))
	for i, t := range grownTables {
		names[i] = t.name
	}
	return names
}

// grownColumns is the column list that the analysis of table reads: ""
// (every column) for a table not in grownTables.
func grownColumns(table string) string {
	for _, t := range grownTables {
		if t.name == table {
			return t.columns
		}
	}
	return ""
}

// grownTablesSQL lists, by name as regclass writes it and by bare name, the
// tables of $1 that the engine's role may analyze
// and whose live rows have grown $2 times past the rows (reltuples, -1
// when never analyzed) their last analysis recorded, taken as at least $3.
const grownTablesSQL = `
	SELECT c.oid::regclass::text, c.relname::text FROM pg_class c
	 WHERE c.oid = ANY(ARRAY(SELECT to_regclass(t) FROM unnest($1::text[]) AS t))
	   AND pg_stat_get_live_tuples(c.oid) >= $2::bigint * greatest(c.reltuples, $3)
	   AND pg_has_role(c.relowner, 'USAGE')
	 ORDER BY 1`

// analyzeLockTimeout bounds how long an analysis waits for its table's
// lock. VACUUM holds the same lock, and PostgreSQL cancels an autovacuum
// that another session has waited on for deadlock_timeout (1 s by
// default): an analysis waits less than that, and leaves the table to the
// vacuum, which records the table's size too and so has its statements
// planned again.
const analyzeLockTimeout = 100 * time.Millisecond

// analyzeGrownTables analyzes the tables of grownTables whose live rows
// have grown grownFactor times past their last statistics, and returns
// those it analyzed. It runs in the queue's maintenance loop, every
// ReconcileInterval.
func (e *Engine) analyzeGrownTables(ctx context.Context) ([]string, error) {
	rows, err := e.pool.Query(ctx, grownTablesSQL, grownTableNames(), grownFactor, grownFloorRows)
	if err != nil {
		return nil, fmt.Errorf("workflow: finding grown tables: %w", err)
	}
	type table struct{ qualified, bare string }
	grown, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (table, error) {
		var t table
		err := row.Scan(&t.qualified, &t.bare)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("workflow: finding grown tables: %w", err)
	}
	var analyzed []string
	for _, g := range grown {
		table := g.qualified
		err := e.withTx(ctx, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", analyzeLockTimeout.Milliseconds())); err != nil {
				return err
			}
			// The name is regclass's output, quoted as it needs.
			stmt := "ANALYZE " + table
			if cols := grownColumns(g.bare); cols != "" {
				stmt += " (" + cols + ")"
			}
			_, err := tx.Exec(ctx, stmt)
			return err
		})
		if isLockNotAvailable(err) {
			e.logger.DebugContext(ctx, "workflow: a grown table is being vacuumed; leaving its statistics to the vacuum", "table", table)
			continue
		}
		if err != nil {
			return analyzed, fmt.Errorf("workflow: analyzing %s: %w", table, err)
		}
		analyzed = append(analyzed, table)
		e.logger.InfoContext(ctx, "workflow: analyzed a table that grew past its statistics", "table", table)
	}
	return analyzed, nil
}
