package workflow

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// deleteOldRuns deletes finished runs (completed, failed, cancelled) that
// finished more than Retention ago, with their tasks and steps, in batches
// of RetentionBatch. An unfinished run is never deleted, however old. It
// runs in the queue's maintenance loop every RetentionInterval.
func (e *Engine) deleteOldRuns(ctx context.Context) error {
	total := 0
	for {
		n, err := e.deleteOldRunsBatch(ctx)
		total += n
		if err != nil {
			return err
		}
		if n < e.cfg.RetentionBatch {
			break
		}
	}
	if total > 0 {
		e.logger.InfoContext(ctx, "workflow: retention deleted finished runs", "runs", total, "older_than", e.cfg.Retention)
	}
	return e.deleteOldEvents(ctx)
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

// deleteOldRunsBatch deletes one batch. It follows the lock order: the
// runs' tasks first, then the runs. A run with a task locked by someone
// else (a Retry of an old failed run, say) is left to a later pass rather
// than waited for.
func (e *Engine) deleteOldRunsBatch(ctx context.Context) (int, error) {
	cutoff := e.cfg.Retention.Microseconds()
	var n int
	err := e.withTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			SELECT id FROM braid_runs
			 WHERE status IN ('completed', 'failed', 'cancelled') AND finished_at < braid_now() - $1::bigint * interval '1 microsecond'
			 ORDER BY finished_at LIMIT $2`, cutoff, e.cfg.RetentionBatch)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil || len(ids) == 0 {
			return err
		}
		// Tasks first, in the lock order, skipping those held by others
		// (a Retry of an old failed run, a late turn); a run with a
		// skipped task is left for a later pass, the others go.
		rows, err = tx.Query(ctx, `
			SELECT id FROM braid_tasks WHERE run_id = ANY($1)
			 ORDER BY created_at DESC, id DESC FOR UPDATE SKIP LOCKED`, ids)
		if err != nil {
			return err
		}
		locked, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			return err
		}
		if locked == nil {
			locked = []uuid.UUID{} // <> ALL(NULL) would match nothing
		}
		// Fenced again on the status: a run retried meanwhile is kept.
		tag, err := tx.Exec(ctx, `
			DELETE FROM braid_runs r WHERE r.id = ANY($1)
			   AND r.status IN ('completed', 'failed', 'cancelled') AND r.finished_at < braid_now() - $2::bigint * interval '1 microsecond'
			   AND NOT EXISTS (SELECT 1 FROM braid_tasks t WHERE t.run_id = r.id AND t.id <> ALL($3))`,
			ids, cutoff, locked)
		n = int(tag.RowsAffected())
		return err
	})
	if err != nil {
		return n, fmt.Errorf("workflow: retention: %w", err)
	}
	return n, nil
}
