package workflow

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/braidflow/braid/leases"
	"github.com/braidflow/braid/queue"
)

// processDelays is the delay processor. It runs while this process holds
// the lease braid:delays: it wakes due delays in batches, each batch in one
// transaction with the turns it inserts, then sleeps until the earliest
// waiting delay (at most DelayPollInterval), or until a NOTIFY says a
// nearer delay was written.
func (e *Engine) processDelays(ctx context.Context, l *leases.Lease) error {
	e.logger.InfoContext(ctx, "workflow: delay processor started", "lease.holder", l.Holder, "lease.generation", l.Generation)
	defer e.logger.InfoContext(context.WithoutCancel(ctx), "workflow: delay processor stopped", "lease.holder", l.Holder)

	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer func() {
		// The connection LISTENs: close it rather than return it.
		_ = conn.Conn().Close(context.Background())
		conn.Release()
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+channelDelay); err != nil {
		return err
	}
	for {
		n, err := e.fireDueDelays(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			e.logger.WarnContext(ctx, "workflow: waking due delays", "error", err)
		}
		if n >= e.cfg.DelayBatchSize {
			continue // more are due
		}
		wait := e.cfg.DelayPollInterval
		var next *float64
		err = conn.QueryRow(ctx, `
			SELECT extract(epoch FROM (min(resume_at) - clock_timestamp()))::float8
			  FROM braid_steps WHERE kind = 'delay' AND status = 'waiting'`).Scan(&next)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("workflow: finding the next delay: %w", err)
		}
		if next != nil {
			if d := time.Duration(*next * float64(time.Second)); d < wait {
				wait = d
			}
		}
		if wait <= 0 {
			continue
		}
		waitCtx, cancel := context.WithTimeout(ctx, wait)
		_, err = conn.Conn().WaitForNotification(waitCtx)
		cancel()
		if err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("workflow: waiting for delays: %w", err)
		}
	}
}

// fireDueDelays wakes up to DelayBatchSize due delays and inserts their
// tasks' turns, in one transaction. SKIP LOCKED keeps a processor that
// lost its lease from waking a delay twice.
func (e *Engine) fireDueDelays(ctx context.Context) (int, error) {
	var n int
	err := e.withTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			WITH due AS (
			    SELECT task_id, name FROM braid_steps
			     WHERE kind = 'delay' AND status = 'waiting' AND resume_at <= clock_timestamp()
			     ORDER BY resume_at
			     LIMIT $1
			       FOR UPDATE SKIP LOCKED
			), fired AS (
			    UPDATE braid_steps s SET status = 'fired', finished_at = clock_timestamp()
			      FROM due WHERE s.task_id = due.task_id AND s.name = due.name
			    RETURNING s.task_id, s.resume_at
			)
			UPDATE braid_tasks t SET status = 'pending', updated_at = now()
			  FROM fired
			 WHERE t.id = fired.task_id AND t.status = 'waiting'
			RETURNING t.id, t.workflow, t.queue, t.priority, t.max_attempts,
			          extract(epoch FROM (clock_timestamp() - fired.resume_at))::float8`, e.cfg.DelayBatchSize)
		if err != nil {
			return err
		}
		var turns []turn
		var lateness []float64
		for rows.Next() {
			var tr turn
			var prio int16
			var late float64
			if err := rows.Scan(&tr.taskID, &tr.workflow, &tr.queue, &prio, &tr.maxAttempts, &late); err != nil {
				rows.Close()
				return err
			}
			tr.priority = queue.Priority(prio)
			turns = append(turns, tr)
			lateness = append(lateness, late)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		n = len(turns)
		if err := e.insertTurns(ctx, tx, turns); err != nil {
			return err
		}
		for _, l := range lateness {
			e.metrics.delayLateness.Record(ctx, l)
		}
		return nil
	})
	return n, err
}
