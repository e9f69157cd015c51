package workflow

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// Space of churned tables.
//
// Every turn updates its task and its River job, a run's finish updates
// the run, and retention deletes whole runs, so braid's tables and
// river_job leave dead row versions behind at the pace of the load.
// PostgreSQL reuses their space only once a vacuum has visited the table,
// and autovacuum visits each database about once a minute by default
// (autovacuum_naptime). A table that turns over faster than that, as
// under a short Retention, grows between two visits by everything it took
// in meanwhile: a table meant to hold ten seconds of runs holds a minute
// and more of them, and its indexes with it.
//
// So the maintenance loop, every VacuumInterval, vacuums a table of
// grownTables whose new dead rows have reached churnShare (a fifth) of its
// live rows, and number at least churnFloorRows: the share at which
// autovacuum vacuums a table by default, but at once rather than at
// autovacuum's next visit. A table that turns over within a minute is then
// vacuumed every few seconds, and each vacuum is small, as the table is; a
// large table, as under a long Retention, takes in such a share over
// hours, and is vacuumed as often as autovacuum would. Such a vacuum is
// not throttled as autovacuum's is (vacuum_cost_delay): a database whose
// disks cannot take that sets VacuumInterval negative and leaves every
// vacuum to autovacuum.
//
// The counts are PostgreSQL's cumulative statistics, which a vacuum (its
// own or autovacuum's) resets to the dead rows it could not remove yet,
// because a transaction that may still see them is open. Those count as
// already vacuumed: the table is vacuumed again once as many dead rows as
// its threshold have come on top of them, not at every pass while that
// transaction lasts. VACUUM's SKIP_LOCKED leaves a table that autovacuum
// or another session is vacuuming, a vacuum gives way to a session that
// waits for its table (vacuumGiveWayPoll), and a table the engine's role
// does not own is left to autovacuum.
const (
	// churnShare is the share of a table's live rows that its new dead
	// rows must reach.
	churnShare = 0.2
	// churnFloorRows is the fewest new dead rows that make a table worth
	// a vacuum of its own.
	churnFloorRows = 10_000
)

// churnedTablesSQL lists, by name as regclass writes it, the tables of $1
// that the engine's role may vacuum, with their live and dead rows and the
// vacuums they had.
const churnedTablesSQL = `
	SELECT c.oid::regclass::text, pg_stat_get_live_tuples(c.oid), pg_stat_get_dead_tuples(c.oid),
	       pg_stat_get_vacuum_count(c.oid)
	  FROM pg_class c
	 WHERE c.oid = ANY(ARRAY(SELECT to_regclass(t) FROM unnest($1::text[]) AS t))
	   AND pg_has_role(c.relowner, 'USAGE')
	 ORDER BY 1`

// vacuumedSQL reads a table's dead rows and the vacuums it had.
const vacuumedSQL = `SELECT pg_stat_get_dead_tuples(c.oid), pg_stat_get_vacuum_count(c.oid) FROM pg_class c WHERE c.oid = to_regclass($1)`

// vacuumed holds, by table, the dead rows that the last vacuum left, which
// the next vacuum's threshold comes on top of.
type vacuumed struct {
	mu   sync.Mutex
	left map[string]int64
}

// due says whether table, with live and dead rows, has taken in enough
// new dead rows since its last vacuum.
func (v *vacuumed) due(table string, live, dead int64) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	left := v.left[table]
	if dead < left { // vacuumed meanwhile, by autovacuum say
		left = dead
		v.left[table] = dead
	}
	return float64(dead-left) >= max(churnShare*float64(live), churnFloorRows)
}

// record records the dead rows a vacuum of table left.
func (v *vacuumed) record(table string, dead int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.left[table] = dead
}

// vacuumChurnedTables vacuums the tables of grownTables whose new dead
// rows have reached churnShare of their live rows (and churnFloorRows),
// and returns those it vacuumed. It runs in the queue's maintenance loop,
// every VacuumInterval.
func (e *Engine) vacuumChurnedTables(ctx context.Context) ([]string, error) {
	rows, err := e.pool.Query(ctx, churnedTablesSQL, grownTableNames())
	if err != nil {
		return nil, fmt.Errorf("workflow: finding churned tables: %w", err)
	}
	type table struct {
		name                string
		live, dead, vacuums int64
	}
	tables, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (table, error) {
		var t table
		err := row.Scan(&t.name, &t.live, &t.dead, &t.vacuums)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("workflow: finding churned tables: %w", err)
	}
	var done []string
	var errs []error
	for _, t := range tables {
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			break
		}
		if !e.vacuumed.due(t.name, t.live, t.dead) {
			continue
		}
		ran, err := e.vacuumTable(ctx, t.name)
		if err != nil {
			// The other tables are vacuumed all the same.
			errs = append(errs, fmt.Errorf("workflow: vacuuming %s: %w", t.name, err))
			continue
		}
		if !ran {
			e.logger.DebugContext(ctx, "workflow: a churned table was held by another session, or was wanted by one; trying again at the next pass", "table", t.name)
			continue
		}
		var left, vacuums int64
		if err := e.pool.QueryRow(ctx, vacuumedSQL, t.name).Scan(&left, &vacuums); err != nil {
			errs = append(errs, fmt.Errorf("workflow: reading the dead rows of %s: %w", t.name, err))
			continue
		}
		if vacuums == t.vacuums {
			// Skipped: another session (autovacuum, an analysis) holds
			// the table. The next pass tries again.
			e.logger.DebugContext(ctx, "workflow: a churned table is held by another vacuum or analysis; trying again at the next pass", "table", t.name)
			continue
		}
		e.vacuumed.record(t.name, left)
		done = append(done, t.name)
		e.logger.DebugContext(ctx, "workflow: vacuumed a churned table", "table", t.name, "live", t.live, "dead", t.dead, "left", left)
	}
	return done, errors.Join(errs...)
}

// vacuumGiveWayPoll is how often a vacuum of a churned table looks for a
// session that waits for its table's lock. PostgreSQL cancels an
// autovacuum in that case once the session has waited deadlock_timeout (1
// s by default), but not a VACUUM that a session issued, which would
// keep a migration's ALTER TABLE waiting for its whole length, and every
// statement on the table queued behind that ALTER. So the engine's vacuum
// gives way itself, sooner.
const vacuumGiveWayPoll = 200 * time.Millisecond

// lockWaitersSQL says whether a session waits for a lock that the backend
// $1 holds.
const lockWaitersSQL = `
	SELECT EXISTS (SELECT 1 FROM pg_stat_activity
	                WHERE wait_event_type = 'Lock' AND $1::int = ANY(pg_blocking_pids(pid)))`

// vacuumTable vacuums table on a connection of its own, without the
// statement_timeout of the pool's sessions, which autovacuum ignores too:
// a vacuum longer than that timeout would be cancelled at every pass and
// never end. It gives way to a session that waits for the table's lock
// (vacuumGiveWayPoll), and reports ran false then: the table is tried
// again at the next pass. A connection whose vacuum did not end as it
// should is closed rather than put back with its setting.
//
// The look for a waiting session runs on a connection of its own, taken
// from the pool before the vacuum begins and removed from it (Hijack), so
// that it does not count against the pool's connections and never waits
// for one: once a session waits for the table, the statements on the
// table queue behind it, each holding a connection of the pool, and a
// look that needed one of them would come only after the vacuum.
func (e *Engine) vacuumTable(ctx context.Context, table string) (ran bool, err error) {
	wc, err := e.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	watch := wc.Hijack()
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), time.Second)
		defer ccancel()
		_ = watch.Close(cctx)
	}()
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	clean := false
	defer func() {
		if !clean {
			_ = conn.Conn().Close(context.Background())
		}
		conn.Release()
	}()
	if _, err := conn.Exec(ctx, `SET statement_timeout = 0`); err != nil {
		return false, err
	}
	pid := conn.Conn().PgConn().PID()
	vctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var gaveWay atomic.Bool
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		tick := time.NewTicker(vacuumGiveWayPoll)
		defer tick.Stop()
		for {
			select {
			case <-vctx.Done():
				return
			case <-tick.C:
			}
			var waiting bool
			if err := watch.QueryRow(vctx, lockWaitersSQL, pid).Scan(&waiting); err == nil && waiting {
				gaveWay.Store(true)
				cancel()
				return
			}
		}
	}()
	// The name is regclass's output, quoted as it needs.
	_, err = conn.Exec(vctx, "VACUUM (SKIP_LOCKED) "+table)
	cancel()
	<-watched
	switch {
	case gaveWay.Load():
		return false, nil
	case err != nil:
		return false, err
	}
	if _, err := conn.Exec(ctx, `RESET statement_timeout`); err != nil {
		return true, nil // the vacuum ran; the connection is closed
	}
	clean = true
	return true, nil
}
