package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/braidflow/braid/queue"
)

// reconcileBatch bounds the tasks one look of the reconciler handles.
const reconcileBatch = 100

// liveJobStateList are the River states of a turn that will still run;
// liveJobStates is the same list as SQL.
var (
	liveJobStateList = []string{"available", "pending", "running", "retryable", "scheduled"}
	liveJobStates    = "('" + strings.Join(liveJobStateList, "', '") + "')"
)

// reconcileLookback is how far back the reconciler's frequent look reads
// turn jobs that ended discarded or cancelled. The sweep covers anything
// older (a maintenance leader that was down for longer, a deleted job).
//
// The look compares River's finalized_at, which River writes on the clock
// of the process that finished the job (or the database's), with the
// database's own clock, now(), not with braid's (braid_now(), which a test
// kit moves days ahead): it is River's time, not a time braid decides by.
// A process whose clock is more than the lookback behind the database's is
// covered by the sweep, which reads braid's own rows on braid's clock.
const reconcileLookback = 10 * time.Minute

// reconcileAside is the reconciler's record of the tasks it failed to
// settle for a fault of their own (setAside, rowFault: a trigger or a
// constraint refuses the update), shared by its frequent look and its
// sweep, which run at once: such a task is left out of both looks for a
// while, longer after each failure, and its failure is logged once each
// time it is tried rather than at every look.
type reconcileAside struct {
	mu    sync.Mutex
	tasks setAside[uuid.UUID]
}

// held returns the tasks set aside now.
func (r *reconcileAside) held() []uuid.UUID {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids, _ := r.tasks.held(time.Now())
	return ids
}

// fail sets id aside and returns for how long.
func (r *reconcileAside) fail(id uuid.UUID) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tasks.fail(id, time.Now())
}

// done forgets id, which was settled or found settled.
func (r *reconcileAside) done(id uuid.UUID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tasks.done(id)
}

// reconcile is the reconciler (invariant 10). It finds tasks that are
// pending or running but have no live turn, because their newest turn job
// was discarded (its last attempt ended without the engine's failure path
// committing: a timeout, a crash, a failed transaction) or cancelled, and
// fails each with a stored error that says why. The failure then settles
// like any other: the parent learns of it, or the run fails and Retry
// accepts it. It runs in the queue's maintenance loop every
// ReconcileInterval, so a stranded run is settled within seconds. It
// starts from the turn jobs that ended so recently, which are few, so it
// costs next to nothing while every task has its turn; reconcileSweep
// looks at every task, less often.
//
// The look skips the tasks that have a live turn, as the sweep does: a
// Retry after a Cancel leaves each task it reset with a turn job
// cancelled moments ago and a new live turn, and a large fan-out's worth
// of those would otherwise fill every batch, settle nothing, and end the
// look (reconcileFrom stops at a batch that settles nothing) before it
// reached a task that is truly stranded. It also skips the tasks set aside
// after a failure (Engine.reconcileAside).
func (e *Engine) reconcile(ctx context.Context) error {
	return e.reconcileFrom(ctx, `
		SELECT DISTINCT t.id FROM river_job j
		  JOIN braid_tasks t ON t.id = braid_turn_task(j.unique_key, j.args)
		 WHERE j.state IN ('discarded', 'cancelled') AND j.finalized_at > now() - $2::bigint * interval '1 microsecond'
		   AND j.kind = $1 AND t.status IN ('pending', 'running') AND t.id <> ALL($4::uuid[])
		   AND NOT EXISTS (SELECT 1 FROM river_job l
		                    WHERE l.kind = $1 AND braid_turn_task(l.unique_key, l.args) = t.id AND l.state IN `+liveJobStates+`)
		 LIMIT $3`, reconcileLookback.Microseconds())
}

// reconcileSweep is the reconciler's look at every task that is pending
// or running, for the cases the frequent look cannot see: a turn job that
// ended longer ago than its lookback, or that was deleted, or that
// completed without settling its task. It runs every
// ReconcileSweepInterval.
func (e *Engine) reconcileSweep(ctx context.Context) error {
	return e.reconcileFrom(ctx, `
		SELECT t.id FROM braid_tasks t
		 WHERE t.status IN ('pending', 'running') AND t.updated_at < braid_now() - $2::bigint * interval '1 microsecond'
		   AND t.id <> ALL($4::uuid[])
		   AND NOT EXISTS (SELECT 1 FROM river_job j
		                    WHERE j.kind = $1 AND braid_turn_task(j.unique_key, j.args) = t.id AND j.state IN `+liveJobStates+`)
		 ORDER BY t.updated_at
		 LIMIT $3`, time.Second.Microseconds())
}

// reconcileFrom settles the tasks that query ($1 the turn kind, $2 its
// argument, $3 the batch size, $4 the tasks set aside) names, batch by
// batch. A task that fails for a fault of its own (rowFault: a trigger or
// a constraint refuses its update) is set aside, as the delay processor
// sets aside a delay, and logged at ERROR; one that fails for another
// reason (a lock held by another, a lost connection) is logged at WARN and
// tried again at the next look. The others go on either way. It returns an
// error only when the tasks cannot be listed.
func (e *Engine) reconcileFrom(ctx context.Context, query string, arg int64) error {
	aside := &e.reconcileAside
	for range 10 {
		rows, err := e.pool.Query(ctx, query, TaskKind, arg, reconcileBatch, pgIDs(aside.held()))
		if err != nil {
			return fmt.Errorf("workflow: reconciler: finding tasks without a live turn: %w", err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			return fmt.Errorf("workflow: reconciler: finding tasks without a live turn: %w", err)
		}
		settled := 0
		for _, id := range ids {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			ok, err := e.reconcileTask(ctx, id)
			if err != nil {
				if !rowFault(err) {
					e.logger.WarnContext(ctx, "workflow: reconciler: settling a task failed; it is tried again at the next look",
						"task.id", id, "error", err)
					continue
				}
				e.logger.ErrorContext(ctx, "workflow: reconciler: settling a task failed; it is set aside and the others go on",
					"task.id", id, "set_aside", aside.fail(id), "error", err)
				continue
			}
			aside.done(id)
			if ok {
				settled++
			}
		}
		if len(ids) < reconcileBatch || settled == 0 {
			return nil
		}
	}
	return nil
}

// reconcileTask settles one task found without a live turn. Under the
// task's row lock, which everything that gives a task a turn holds, it
// looks again: a task that got a turn meanwhile is left alone.
//
// Its transaction runs to its end even when ctx ends meanwhile (the
// maintenance loop stopping), bounded by OutcomeTimeout as a batch is: a
// commit cut off while in flight may have committed all the same, and
// what follows it (the finished runs' metrics, the cancel of orphaned
// turns) would then be lost.
func (e *Engine) reconcileTask(ctx context.Context, taskID uuid.UUID) (bool, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.OutcomeTimeout)
	defer cancel()
	var (
		settled bool
		msg     string
		orphans []uuid.UUID
		fin     txCounts
	)
	err := e.withTx(ctx, func(tx pgx.Tx) error {
		fin = txCounts{}
		var (
			runID    uuid.UUID
			parentID *uuid.UUID
			tr       turn
			prio     int16
			key      string
			dag      *string
		)
		err := tx.QueryRow(ctx, `
			SELECT run_id, parent_task_id, workflow, queue, priority, max_attempts, key, `+nodeDAGSQL+` FROM braid_tasks t
			 WHERE id = $1 AND status IN ('pending', 'running')
			   FOR UPDATE SKIP LOCKED`, taskID).Scan(&runID, &parentID, &tr.workflow, &tr.queue, &prio, &tr.maxAttempts, &key, &dag)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // settled meanwhile, or being changed: a later look decides
		}
		if err != nil {
			return err
		}
		var (
			jobID               *int64
			state               *string
			attempt, maxAttempt *int
			lastErr             *string
		)
		err = tx.QueryRow(ctx, `
			SELECT id, state::text, attempt, max_attempts, errors[array_length(errors, 1)]->>'error'
			  FROM river_job WHERE kind = $1 AND braid_turn_task(unique_key, args) = $2
			 ORDER BY id DESC LIMIT 1`, TaskKind, taskID).Scan(&jobID, &state, &attempt, &maxAttempt, &lastErr)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		switch {
		case state != nil && isLive(*state):
			return nil
		case state != nil && *state == "completed":
			// The job completed without settling the task (it found the
			// task in another state at the time). The task is owed a
			// turn, not a failure.
			tr.taskID, tr.priority = taskID, queue.Priority(prio)
			e.logger.WarnContext(ctx, "workflow: reconciler: task's last turn completed without settling it; giving it a new turn",
				"task.id", taskID, "job.id", *jobID)
			settled = true
			return e.wakeTurns(ctx, tx, []turn{tr})
		case state == nil:
			msg = "the task has no turn job (it was deleted); no turn will run it"
		default:
			msg = fmt.Sprintf("the task's turn (job %d) was %s after attempt %d of %d without recording an outcome", *jobID, *state, *attempt, *maxAttempt)
			if lastErr != nil && *lastErr != "" {
				msg += "; last error: " + *lastErr
			}
		}
		msg = queue.SanitizeErrorText(msg, e.cfg.MaxErrorBytes)
		errJSON, _ := json.Marshal(storedError{Message: msg, Kind: "no_live_turn"})
		if _, err := tx.Exec(ctx, `
			UPDATE braid_tasks SET status = 'failed', error = $2, remaining = 0, finished_at = braid_now(), updated_at = braid_now()
			 WHERE id = $1`, taskID, errJSON); err != nil {
			return err
		}
		settled = true
		s := settlement{taskID: taskID, runID: runID, parentID: parentID, status: "failed", errJSON: errJSON, key: key}
		if dag != nil {
			s.dag = *dag
		}
		// Its unfinished children go with it. They come before it in the
		// lock order, so they are locked without waiting; a look a second
		// later tries again.
		if _, err := tx.Exec(ctx, `
			SELECT 1 FROM braid_tasks WHERE id = ANY(ARRAY`+unfinishedDescendantsSQL("$1")+`)
			 ORDER BY created_at DESC, id DESC FOR UPDATE NOWAIT`, []uuid.UUID{taskID}); err != nil {
			return err
		}
		if orphans, err = e.cancelOrphansTx(ctx, tx, []settlement{s}, []uuid.UUID{taskID}); err != nil {
			return err
		}
		wake, err := e.settleTx(ctx, tx, []settlement{s}, false, nil, &fin)
		if err != nil {
			return err
		}
		return e.wakeTurns(ctx, tx, wake)
	})
	if err != nil {
		return false, fmt.Errorf("workflow: reconciler: task %s: %w", taskID, err)
	}
	fin.record(ctx, e.metrics)
	e.cancelTurnsOf(ctx, orphans)
	if settled && msg != "" {
		e.metrics.reconciled.Add(ctx, 1)
		e.logger.WarnContext(ctx, "workflow: reconciler failed a task that had no live turn", "task.id", taskID, "reason", msg)
	}
	return settled, nil
}

func isLive(state string) bool { return slices.Contains(liveJobStateList, state) }
