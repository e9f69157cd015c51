package workflow

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// retentionTaskBatch bounds the tasks that one retention transaction
// deletes: a batch takes the oldest runs, up to RetentionBatch of them,
// only as long as their tasks add up to no more than this. The delete
// cascades through per-row triggers to tasks and steps, whose queue
// PostgreSQL keeps in the backend's memory; a batch of a thousand runs with
// ten thousand children each would lock and delete ten million tasks in
// one transaction that holds back vacuum for its whole length. A run that
// alone holds more is shrunk first, this many tasks per transaction (see
// shrinkRun).
const retentionTaskBatch = 10_000

// deleteOldRuns deletes finished runs (completed, failed, cancelled) that
// finished more than Retention ago, with their tasks, steps and finished
// turn jobs, in batches of RetentionBatch runs and at most
// retentionTaskBatch tasks; a run that holds more is shrunk to that many
// first, over as many transactions as it takes (shrinkRun). An unfinished
// run is never deleted, however old. A run left out of a batch (one of its
// tasks locked by another, or retried meanwhile) is left out of the rest of
// the pass too, which goes on until no old run is left to try. The pass reads its cutoff once, as it
// begins, so that runs that pass it meanwhile, under a steady load, are
// left to the next pass rather than keep this one going. It runs in the
// queue's maintenance loop every RetentionInterval.
func (e *Engine) deleteOldRuns(ctx context.Context) error {
	return e.deleteOldRunsBy(ctx, retentionTaskBatch)
}

// deleteOldRunsBy is deleteOldRuns with batches of at most taskLimit
// tasks.
func (e *Engine) deleteOldRunsBy(ctx context.Context, taskLimit int) error {
	before, err := e.retentionCutoff(ctx)
	if err != nil {
		return err
	}
	total := 0
	var kept []uuid.UUID
	for {
		b, err := e.deleteOldRunsBatch(ctx, before, kept, taskLimit)
		total += b.deleted
		kept = append(kept, b.kept...)
		if err != nil {
			return err
		}
		if b.large != uuid.Nil {
			shrunk, err := e.shrinkRun(ctx, b.large, before, taskLimit)
			if err != nil {
				return err
			}
			if !shrunk {
				kept = append(kept, b.large)
			}
			continue
		}
		if b.deleted+len(b.kept) == 0 {
			break
		}
	}
	if total > 0 {
		e.logger.InfoContext(ctx, "workflow: retention deleted finished runs", "runs", total, "older_than", e.cfg.Retention)
	}
	return e.deleteOldEvents(ctx)
}

// retentionCutoff reads, on the database's clock, the moment before which
// a finished run is old: Retention ago.
func (e *Engine) retentionCutoff(ctx context.Context) (time.Time, error) {
	var before time.Time
	err := e.pool.QueryRow(ctx, `SELECT braid_now() - $1::bigint * interval '1 microsecond'`, e.cfg.Retention.Microseconds()).Scan(&before)
	if err != nil {
		return before, fmt.Errorf("workflow: retention: reading the clock: %w", err)
	}
	return before, nil
}

// deleteOldEvents deletes the events published more than Retention ago,
// in batches of RetentionBatch. A wait sees only events published since
// the turn that suspended on it began, so an old event matters to none
// but a turn that has run longer than Retention.
func (e *Engine) deleteOldEvents(ctx context.Context) error {
	total := 0
	for {
		tag, err := e.pool.Exec(ctx, `
			DELETE FROM braid_events WHERE id IN (
			    SELECT id FROM braid_events WHERE published_at < braid_now() - $1::bigint * interval '1 microsecond'
			     ORDER BY published_at LIMIT $2)`, e.cfg.Retention.Microseconds(), e.cfg.RetentionBatch)
		if err != nil {
			return fmt.Errorf("workflow: deleting old events: %w", err)
		}
		total += int(tag.RowsAffected())
		if int(tag.RowsAffected()) < e.cfg.RetentionBatch {
			break
		}
	}
	if total > 0 {
		e.logger.InfoContext(ctx, "workflow: retention deleted old events", "events", total, "older_than", e.cfg.Retention)
	}
	return nil
}

// retentionBatch is what one retention batch did: how many runs it
// deleted, and the runs it found but kept; or, when the oldest run alone
// holds more tasks than the batch deletes, nothing but name that run,
// large, to shrink first.
type retentionBatch struct {
	deleted int
	kept    []uuid.UUID
	large   uuid.UUID
}

// oldRunsSQL picks one retention batch: the runs that finished before the
// cutoff ($1), oldest first, up to $2 of them, leaving
// out those of $3, and only as long as their tasks add up to no more than
// $4, but at least the first, which it says when it alone holds more. It
// walks the runs in order, and counts each
// run's tasks only up to $4, so that it reads about $4 tasks at most
// whatever the runs hold. The walk takes the runs from an array, by
// position, so that each of its steps costs the same however many runs
// the batch holds (a join to a list of the runs would read the list at
// every step).
const oldRunsSQL = `
	WITH RECURSIVE candidate AS MATERIALIZED (
	    SELECT array_agg(id ORDER BY finished_at, id) AS ids FROM (
	        SELECT id, finished_at FROM braid_runs
	         WHERE status IN ('completed', 'failed', 'cancelled') AND finished_at < $1::timestamptz
	           AND id <> ALL($3::uuid[])
	         ORDER BY finished_at, id LIMIT $2) r
	), walk (k, id, tasks) AS (
	    SELECT 1, c.ids[1], (SELECT count(*) FROM (SELECT 1 FROM braid_tasks t WHERE t.run_id = c.ids[1] LIMIT $4::bigint + 1) x)
	      FROM candidate c WHERE cardinality(c.ids) > 0
	    UNION ALL
	    SELECT w.k + 1, c.ids[w.k + 1],
	           w.tasks + (SELECT count(*) FROM (SELECT 1 FROM braid_tasks t WHERE t.run_id = c.ids[w.k + 1] LIMIT $4::bigint + 1) x)
	      FROM walk w, candidate c
	     WHERE w.tasks < $4::bigint AND w.k < cardinality(c.ids)
	)
	SELECT id, tasks > $4::bigint FROM walk WHERE k = 1 OR tasks <= $4::bigint ORDER BY k`

// deleteOldRunsSQL deletes the runs of $1 that finished before $2, fenced
// again on their status (a run retried meanwhile is kept), but only those
// whose every task is among $3, the tasks the batch locked. The list is
// read into a hash table once (a hashed SubPlan), and not compared entry
// by entry with each task, as t.id <> ALL($3) is on a generic plan: with
// a batch's 10,000 tasks that is 100 million comparisons, its rows locked
// meanwhile.
const deleteOldRunsSQL = `
	DELETE FROM braid_runs r WHERE r.id = ANY($1)
	   AND r.status IN ('completed', 'failed', 'cancelled') AND r.finished_at < $2::timestamptz
	   AND NOT EXISTS (SELECT 1 FROM braid_tasks t WHERE t.run_id = r.id AND t.id NOT IN (SELECT unnest($3::uuid[])))
	RETURNING r.id`

// deleteOldRunsBatch deletes one batch of the runs that finished before
// before (see oldRunsSQL), leaving out the runs of skip. It follows the lock order: the runs' tasks first, then the
// runs. A run with a task locked by someone else (a Retry of an old failed
// run, say) is kept rather than waited for, and so is one that is no longer
// finished by the time it is deleted.
func (e *Engine) deleteOldRunsBatch(ctx context.Context, before time.Time, skip []uuid.UUID, taskLimit int) (retentionBatch, error) {
	var b retentionBatch
	err := e.withTx(ctx, func(tx pgx.Tx) error {
		b = retentionBatch{}
		rows, err := tx.Query(ctx, oldRunsSQL, before, e.cfg.RetentionBatch, pgIDs(skip), taskLimit)
		if err != nil {
			return err
		}
		var ids []uuid.UUID
		var id uuid.UUID
		var large bool
		if _, err := pgx.ForEachRow(rows, []any{&id, &large}, func() error {
			ids = append(ids, id)
			if large {
				b.large = id
			}
			return nil
		}); err != nil || len(ids) == 0 || b.large != uuid.Nil {
			return err
		}
		// Tasks first, in the lock order, skipping those held by others
		// (a Retry of an old failed run, a late turn); a run with a
		// skipped task is kept, the others go.
		rows, err = tx.Query(ctx, `
			SELECT id, run_id FROM braid_tasks WHERE run_id = ANY($1)
			 ORDER BY created_at DESC, id DESC FOR UPDATE SKIP LOCKED`, ids)
		if err != nil {
			return err
		}
		type task struct{ id, run uuid.UUID }
		tasks, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (task, error) {
			var k task
			err := row.Scan(&k.id, &k.run)
			return k, err
		})
		if err != nil {
			return err
		}
		locked := make([]uuid.UUID, len(tasks))
		for i, k := range tasks {
			locked[i] = k.id
		}
		rows, err = tx.Query(ctx, deleteOldRunsSQL, ids, before, locked)
		if err != nil {
			return err
		}
		deleted, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			return err
		}
		b.deleted = len(deleted)
		gone := make(map[uuid.UUID]bool, len(deleted))
		for _, id := range deleted {
			gone[id] = true
		}
		for _, id := range ids {
			if !gone[id] {
				b.kept = append(b.kept, id)
			}
		}
		var turned []uuid.UUID
		for _, k := range tasks {
			if gone[k.run] {
				turned = append(turned, k.id)
			}
		}
		return deleteTurnJobsTx(ctx, tx, turned)
	})
	if err != nil {
		return retentionBatch{}, fmt.Errorf("workflow: retention: %w", err)
	}
	return b, nil
}

// deleteTurnJobsTx deletes the finished turn jobs of tasks that tx has
// deleted. Job rows come before task rows in the lock order, so a job held
// by another (River's job cleaner deleting it) is skipped, and left to the
// cleaner. The kind is written out, not a parameter, so that a generic plan
// can use the index of turn jobs by task, which holds that kind only.
func deleteTurnJobsTx(ctx context.Context, tx pgx.Tx, tasks []uuid.UUID) error {
	if len(tasks) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, `
		DELETE FROM river_job WHERE id IN (
		    SELECT id FROM river_job
		     WHERE kind = '`+TaskKind+`' AND braid_turn_task(unique_key, args) = ANY($1)
		       AND state IN ('completed', 'cancelled', 'discarded')
		       FOR UPDATE SKIP LOCKED)`, tasks)
	return err
}

// shrinkRun deletes the tasks of run id, an old finished run that holds
// more than taskLimit of them, at most taskLimit per transaction, until it
// holds no more: the retention batch that follows deletes the rest with
// the run. It first marks the run as being deleted (braid_runs.deleting),
// in a transaction of its own, which a run still finished before the
// cutoff only takes: Retry, which would find some of its tasks gone,
// refuses a marked run, and a run that Retry resumed first is not marked.
// Each transaction deletes leaves, tasks without children (with their
// steps and finished turn jobs), so that no cascade reaches further; it
// skips tasks that another transaction holds. It reports false, having
// done what it could, when the run cannot be marked or shrunk any further
// in this pass: the pass then leaves it for the next.
func (e *Engine) shrinkRun(ctx context.Context, id uuid.UUID, before time.Time, taskLimit int) (bool, error) {
	var marked bool
	err := e.pool.QueryRow(ctx, `
		UPDATE braid_runs SET deleting = true
		 WHERE id = $1 AND status IN ('completed', 'failed', 'cancelled') AND finished_at < $2::timestamptz
		RETURNING true`, id, before).Scan(&marked)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("workflow: retention: marking run %s deleted: %w", id, err)
	}
	for {
		var left int
		var deleted []uuid.UUID
		err := e.withTx(ctx, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `
				DELETE FROM braid_tasks WHERE id IN (
				    SELECT t.id FROM braid_tasks t
				     WHERE t.run_id = $1 AND NOT EXISTS (SELECT 1 FROM braid_tasks k WHERE k.parent_task_id = t.id)
				     LIMIT $2 FOR UPDATE SKIP LOCKED)
				RETURNING id`, id, taskLimit)
			if err != nil {
				return err
			}
			if deleted, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID]); err != nil {
				return err
			}
			if err := deleteTurnJobsTx(ctx, tx, deleted); err != nil {
				return err
			}
			return tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM braid_tasks WHERE run_id = $1 LIMIT $2::bigint + 1) x`,
				id, taskLimit).Scan(&left)
		})
		if err != nil {
			return false, fmt.Errorf("workflow: retention: deleting tasks of run %s: %w", id, err)
		}
		if left <= taskLimit {
			return true, nil
		}
		if len(deleted) == 0 {
			return false, nil
		}
	}
}
