package workflow

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// SignalOpts are the options of a signal. The zero value is fine.
type SignalOpts struct {
	// IdempotencyKey, when set, makes the send happen once per run: a
	// later send to the same run with the same key does nothing and
	// returns nil, even once the run has finished. At most
	// IdempotencyKeyMaxBytes of UTF-8 text without NUL characters.
	IdempotencyKey string
}

// Signal sends the signal name, carrying payload (encoded as JSON, at most
// Config.MaxPayloadBytes), to the run runID. A task of the run that waits
// on the signal (WaitSignal) gets its next turn in the transaction that
// sends it; otherwise the signal stays in the run's mailbox, in the order
// sent, until a wait takes it. Each signal is taken by one wait, once.
//
// It fails with ErrRunNotFound for an unknown run and ErrRunFinished for a
// finished one: a finished run reads no more signals.
func (e *Engine) Signal(ctx context.Context, runID, name string, payload any, opts *SignalOpts) error {
	id, err := uuid.Parse(runID)
	if err != nil {
		return fmt.Errorf("%w: %q is not a UUID", ErrRunNotFound, runID)
	}
	var waits []waitSpan
	err = e.withTx(ctx, func(tx pgx.Tx) (err error) {
		waits, err = e.signalTx(ctx, tx, id, runID, name, payload, opts)
		return err
	})
	if err == nil {
		e.recordWaits(waits)
	}
	return err
}

// SignalTx is Signal inside tx: the signal is sent, and its wait woken,
// only if tx commits. The wait it ends gets no span of its own, since
// only the caller knows when tx commits. tx must be READ COMMITTED,
// PostgreSQL's default: one whose snapshot is older than its statements
// (REPEATABLE READ, SERIALIZABLE) would not see a wait recorded since, and
// is refused.
func (e *Engine) SignalTx(ctx context.Context, tx pgx.Tx, runID, name string, payload any, opts *SignalOpts) error {
	id, err := uuid.Parse(runID)
	if err != nil {
		return fmt.Errorf("%w: %q is not a UUID", ErrRunNotFound, runID)
	}
	if err := checkReadCommitted(ctx, tx, "SignalTx"); err != nil {
		return err
	}
	_, err = e.signalTx(ctx, tx, id, runID, name, payload, opts)
	return err
}

// SignalByKey sends a signal, as Signal does, to the run started with the
// idempotency key key (StartOpts.IdempotencyKey): the business identifier
// of a run.
func (e *Engine) SignalByKey(ctx context.Context, key, name string, payload any, opts *SignalOpts) error {
	var waits []waitSpan
	err := e.withTx(ctx, func(tx pgx.Tx) (err error) {
		waits, err = e.signalByKeyTx(ctx, tx, key, name, payload, opts)
		return err
	})
	if err == nil {
		e.recordWaits(waits)
	}
	return err
}

// SignalByKeyTx is SignalByKey inside tx, which must be READ COMMITTED, as
// SignalTx's.
func (e *Engine) SignalByKeyTx(ctx context.Context, tx pgx.Tx, key, name string, payload any, opts *SignalOpts) error {
	if err := checkReadCommitted(ctx, tx, "SignalByKeyTx"); err != nil {
		return err
	}
	_, err := e.signalByKeyTx(ctx, tx, key, name, payload, opts)
	return err
}

func (e *Engine) signalByKeyTx(ctx context.Context, tx pgx.Tx, key, name string, payload any, opts *SignalOpts) ([]waitSpan, error) {
	if err := checkIdempotencyKey(key); err != nil {
		return nil, fmt.Errorf("workflow: signal %q to the run with an %w", name, err)
	}
	var id uuid.UUID
	err := tx.QueryRow(ctx, `SELECT id FROM braid_runs WHERE idempotency_key = $1`, key).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: no run has the idempotency key %q", ErrRunNotFound, key)
	}
	if err != nil {
		return nil, fmt.Errorf("workflow: finding the run with idempotency key %q: %w", key, err)
	}
	return e.signalTx(ctx, tx, id, id.String(), name, payload, opts)
}

// signalCandidates is how many waiting steps a send reads at a time,
// oldest first: a wait whose timeout fires while the send runs is skipped
// for the next, and the send reads more until one takes the signal or
// none is left.
const signalCandidates = 8

func (e *Engine) signalTx(ctx context.Context, tx pgx.Tx, id uuid.UUID, runID, name string, payload any, opts *SignalOpts) (waits []waitSpan, err error) {
	if err := checkMessageName("signal name", name); err != nil {
		return nil, err
	}
	var key *string
	if opts != nil && opts.IdempotencyKey != "" {
		if err := checkIdempotencyKey(opts.IdempotencyKey); err != nil {
			return nil, fmt.Errorf("workflow: signal %q: %w", name, err)
		}
		key = &opts.IdempotencyKey
	}
	raw, err := e.encode(fmt.Sprintf("payload of signal %q", name), payload)
	if err != nil {
		return nil, err
	}
	ctx, span := e.tracer.Start(ctx, "braid.signal "+name, trace.WithAttributes(
		attribute.String("run.id", runID), attribute.String("signal", name)))
	defer func() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}()
	if _, err := tx.Exec(ctx, messageLockSQL, []string{mailboxLock(id)}); err != nil {
		return nil, fmt.Errorf("workflow: locking the mailbox of run %s: %w", runID, err)
	}
	if key != nil {
		// A send repeated with its key does nothing and returns nil,
		// whatever became of the run since the first: that one may have
		// finished it, and its caller never heard back.
		var sent bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM braid_signals WHERE run_id = $1 AND idempotency_key = $2)`, id, *key).Scan(&sent); err != nil {
			return nil, fmt.Errorf("workflow: sending signal %q to run %s: %w", name, runID, err)
		}
		if sent {
			span.SetAttributes(attribute.Bool("signal.duplicate", true))
			return nil, nil
		}
	}
	if err := runStatusIs(ctx, tx, id, runID, func(status string) error {
		if finished(status) {
			return fmt.Errorf("%w: run %s is %s; signal %q is not sent", ErrRunFinished, runID, status, name)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	tp := traceParent(ctx)
	var sent int64
	err = tx.QueryRow(ctx, `
		INSERT INTO braid_signals (run_id, name, payload, idempotency_key, trace_parent)
		VALUES ($1, $2, $3, $4, nullif($5, ''))
		ON CONFLICT (run_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
		RETURNING id`, id, name, []byte(raw), key, tp).Scan(&sent)
	if errors.Is(err, pgx.ErrNoRows) {
		span.SetAttributes(attribute.Bool("signal.duplicate", true))
		return nil, nil // sent before with this key
	}
	if err != nil {
		return nil, fmt.Errorf("workflow: sending signal %q to run %s: %w", name, runID, err)
	}
	// The waits are tried oldest first, signalCandidates at a time, until
	// one takes the signal or none is left: a wait whose timeout fired
	// while the send ran is skipped, and the signal stays in the mailbox
	// only when no wait on it is left. Each try holds its task's lock in a
	// savepoint, so that a wait that no longer waits gives its task back at
	// once: the send holds one task at a time, whatever the order of the
	// waits.
	var tried []uuid.UUID
	for {
		rows, err := tx.Query(ctx, `
			SELECT task_id, name FROM braid_steps
			 WHERE kind = 'signal' AND status = 'waiting' AND wait_run = $1 AND wait_on = $2
			   AND NOT task_id = ANY($4)
			 ORDER BY created_at LIMIT $3`, id, name, signalCandidates, pgIDs(tried))
		if err != nil {
			return nil, fmt.Errorf("workflow: finding the waits on signal %q in run %s: %w", name, runID, err)
		}
		waiting, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (stepKey, error) {
			var k stepKey
			return k, r.Scan(&k.taskID, &k.name)
		})
		if err != nil {
			return nil, fmt.Errorf("workflow: finding the waits on signal %q in run %s: %w", name, runID, err)
		}
		if len(waiting) == 0 {
			return nil, nil
		}
		for _, w := range waiting {
			tried = append(tried, w.taskID)
			d, took, err := e.takeSignal(ctx, tx, id, name, w)
			if err != nil {
				return nil, err
			}
			if !took {
				continue // its timeout fired first
			}
			turns, spans, err := e.deliverTx(ctx, tx, []delivery{d}, true)
			if err != nil {
				return nil, err
			}
			if err := e.wakeTurns(ctx, tx, turns); err != nil {
				return nil, err
			}
			span.SetAttributes(attribute.String("signal.task.id", w.taskID.String()))
			return spans, nil
		}
	}
}

// takeSignal locks the task of wait w and takes for it the oldest
// undelivered signal named name from run id's mailbox, in a savepoint: when
// w no longer waits, the savepoint is rolled back, which gives the task's
// lock back, and took is false.
func (e *Engine) takeSignal(ctx context.Context, tx pgx.Tx, id uuid.UUID, name string, w stepKey) (d delivery, took bool, err error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return d, false, fmt.Errorf("workflow: delivering signal %q to task %s: %w", name, w.taskID, err)
	}
	defer func() {
		if !took {
			_ = sp.Rollback(ctx)
		}
	}()
	if _, err := sp.Exec(ctx, `SELECT 1 FROM braid_tasks WHERE id = $1 FOR UPDATE`, w.taskID); err != nil {
		return d, false, fmt.Errorf("workflow: locking task %s: %w", w.taskID, err)
	}
	d = delivery{taskID: w.taskID, step: w.name, kind: "signal"}
	var stp *string
	err = sp.QueryRow(ctx, takeSignalSQL, w.taskID, w.name, id, name).Scan(&d.payload, &stp)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, false, nil
	}
	if err != nil {
		return d, false, fmt.Errorf("workflow: delivering signal %q to task %s: %w", name, w.taskID, err)
	}
	if stp != nil {
		d.tp = *stp
	}
	if err := sp.Commit(ctx); err != nil {
		return d, false, fmt.Errorf("workflow: delivering signal %q to task %s: %w", name, w.taskID, err)
	}
	return d, true, nil
}

// takeSignalSQL takes the oldest undelivered signal named $4 from the
// mailbox of run $3 for the step $2 of task $1, provided that step still
// waits, and returns its payload and the traceparent of its send. The
// caller holds the run's mailbox lock and the task.
const takeSignalSQL = `
	UPDATE braid_signals g SET delivered_at = braid_clock(), task_id = $1, step = $2
	 WHERE g.id = (SELECT id FROM braid_signals
	                WHERE run_id = $3 AND name = $4 AND delivered_at IS NULL
	                ORDER BY id LIMIT 1)
	   AND EXISTS (SELECT 1 FROM braid_steps s WHERE s.task_id = $1 AND s.name = $2 AND s.status = 'waiting')
	RETURNING g.payload, g.trace_parent`

// WaitSignal waits for the signal name sent to the task's run (Signal),
// for at most timeout by the database's clock, or with no limit when
// timeout is 0. It returns the signal's payload with ok true, or ok false
// once the timeout passed first. Until one of them comes, it returns
// ErrSuspended: the task's turn ends and the task waits at no cost, with
// no goroutine and no poll, until the send or the timeout gives it its
// next turn. Exactly one of the two wins (invariant 2).
//
// Signals sent before the wait are kept in the run's mailbox and taken in
// the order sent, one per wait, each exactly once. The wait is a durable
// call recorded under the name "signal:"+name (with "#n" when repeated),
// so a later turn returns the same payload, or the same timeout.
func WaitSignal[T any](t *Task, name string, timeout time.Duration) (payload T, ok bool, err error) {
	if err := checkMessageName("signal name", name); err != nil {
		return payload, false, err
	}
	return waitMessage[T](t, &pendingWait{kind: "signal", on: name, after: timeout})
}
