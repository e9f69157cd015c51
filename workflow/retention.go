package workflow

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
	return nil
}

// deleteOldRunsBatch deletes one batch. It follows the lock order: the
// runs' tasks first, then the runs. A task locked by someone else (a Retry
// of an old failed run, say) makes it leave this batch to the next pass
// rather than wait.
func (e *Engine) deleteOldRunsBatch(ctx context.Context) (int, error) {
	cutoff := e.cfg.Retention.Microseconds()
	var n int
	err := e.withTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			SELECT id FROM braid_runs
			 WHERE status IN ('completed', 'failed', 'cancelled') AND finished_at < now() - $1::bigint * interval '1 microsecond'
			 ORDER BY finished_at LIMIT $2`, cutoff, e.cfg.RetentionBatch)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil || len(ids) == 0 {
			return err
		}
		if _, err := tx.Exec(ctx, `
			SELECT 1 FROM braid_tasks WHERE run_id = ANY($1)
			 ORDER BY created_at DESC, id DESC FOR UPDATE NOWAIT`, ids); err != nil {
			return err
		}
		// Fenced again on the status: a run retried meanwhile is kept.
		tag, err := tx.Exec(ctx, `
			DELETE FROM braid_runs WHERE id = ANY($1)
			   AND status IN ('completed', 'failed', 'cancelled') AND finished_at < now() - $2::bigint * interval '1 microsecond'`,
			ids, cutoff)
		n = int(tag.RowsAffected())
		return err
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
		return 0, nil
	}
	if err != nil {
		return n, fmt.Errorf("workflow: retention: %w", err)
	}
	return n, nil
}
