package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/riverqueue/river/rivertype"

	"github.com/braidflow/braid/queue"
)

// Cancel cancels a run: every unfinished task is cancelled, pending delays
// are removed, and the tasks' turns are cancelled in River (running ones
// through River's remote cancel, which cancels their context). Nothing of
// the run runs afterwards: a turn that starts later finds its task
// cancelled and does nothing, and a running turn's outcome finds it
// cancelled and records nothing.
//
// Cancel returns once the run's turns that were running have ended, so
// that nothing of the run runs afterwards. A turn whose code ignores its
// context may keep it waiting: after TurnEndWaitDefault, or when ctx ends,
// Cancel returns a *TurnsRunningError (or ctx's error); the run is
// cancelled all the same.
//
// Cancel takes its locks in the engine's lock order (see the package
// documentation): the run's tasks (children before parents), their steps,
// the run; its turn jobs last, with SKIP LOCKED, so it never waits for one.
func (e *Engine) Cancel(ctx context.Context, runID string) error {
	id, err := parseRunID(runID)
	if err != nil {
		return err
	}
	for try := 1; ; try++ {
		err := e.withTx(ctx, func(tx pgx.Tx) error {
			return e.cancelTx(ctx, tx, id, runID, storedError{Message: "cancelled"}, false)
		})
		if try < cancelTries && isLockNotAvailable(err) {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(try) * 10 * time.Millisecond):
			}
			continue
		}
		if err != nil {
			return err
		}
		// The run is cancelled. Its running turns learn of it through
		// their context; a turn job that CancelTx skipped because another
		// transaction held it is cancelled now. Then wait for the turns to
		// end, so that nothing of the run runs once Cancel returns.
		if err := e.cancelSkippedTurns(ctx, id, runID); err != nil {
			return err
		}
		// A job of the run still held past cancelLockTimeout was left
		// alone: it is tried again while the wait lasts (as the engine's
		// own loop does, if it runs), so that its turn is interrupted once
		// its row is free.
		return e.waitForTurnsToEnd(ctx, id, time.Now().Add(TurnEndWaitDefault), func(ctx context.Context) error {
			return e.cancelSkippedTurns(ctx, id, runID)
		})
	}
}

// cancelSkippedTurns cancels, after the transaction that cancelled the
// run committed, the turn jobs of its cancelled tasks that the
// transaction skipped because another one held them (a heartbeat, River's
// completer). It holds no other lock meanwhile.
func (e *Engine) cancelSkippedTurns(ctx context.Context, id uuid.UUID, runID string) error {
	err := e.cancelLiveTurns(ctx, `
		SELECT j.id FROM braid_tasks t
		  JOIN river_job j ON j.kind = $1 AND braid_turn_task(j.unique_key, j.args) = t.id
		 WHERE t.run_id = $2 AND t.status = 'cancelled'
		   AND j.state IN `+liveJobStates+` AND NOT j.metadata ? 'cancel_attempted_at'`, id)
	if err != nil {
		return fmt.Errorf("workflow: run %s is cancelled; cancelling its turns: %w", runID, err)
	}
	return nil
}

// cancelLiveTurns cancels, through River, the turn jobs that query ($1
// the turn kind, $2 arg) selects by ID, each only while its task is still
// cancelled: a waiting one is cancelled at once, a running one through
// River's remote cancel (or, for a turn this process claimed, the queue's
// ownership watch), which ends its context.
//
// The query is a plain read, and Retry may reset a task between it and
// the cancel; the turn that Retry leaves the task to must not be cancelled
// then. So a job is cancelled only in a transaction that holds, in the
// lock order, the job and then its task with a share lock, and only if the
// task is cancelled under that lock: a Retry that holds the task commits
// first and its reset is seen, and one that comes after finds the turn
// running with its cancel requested, and waits for it to end.
//
// One transaction takes the jobs that no one holds (SKIP LOCKED: River's
// completer locks many job rows in no set order, so this one waits for
// none of them); the jobs it skipped are then cancelled one per
// transaction, each waiting for its rows. A job whose rows stay held
// beyond cancelLockTimeout is left alone for now: its turn finds its task
// cancelled all the same, and does nothing or records nothing, and the job
// is kept among the held cancels (retryHeldCancels), to be tried again.
func (e *Engine) cancelLiveTurns(ctx context.Context, query string, arg any) error {
	rows, err := e.pool.Query(ctx, query, TaskKind, arg)
	if err != nil {
		return err
	}
	jobs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil || len(jobs) == 0 {
		return err
	}
	taken := map[int64]bool{}
	err = e.withTx(ctx, func(tx pgx.Tx) error {
		locked, err := e.cancelTurnJobsTx(ctx, tx, jobs, " SKIP LOCKED")
		for _, jid := range locked {
			taken[jid] = true
		}
		return err
	})
	if err != nil && !isLockNotAvailable(err) {
		return fmt.Errorf("cancelling %d turn jobs: %w", len(jobs), err)
	}
	if err != nil {
		clear(taken) // rolled back: each job again, alone
	}
	for _, jid := range jobs {
		if taken[jid] {
			continue
		}
		err := e.withTx(ctx, func(tx pgx.Tx) error {
			_, err := e.cancelTurnJobsTx(ctx, tx, []int64{jid}, "")
			return err
		})
		switch {
		case err == nil:
		case isLockNotAvailable(err):
			e.logger.DebugContext(ctx, "workflow: turn job held too long to cancel; tried again in a moment", "job.id", jid)
			e.held.add(jid)
		default:
			return fmt.Errorf("cancelling turn job %d: %w", jid, err)
		}
	}
	return nil
}

// cancelTurnJobsTx locks the live jobs among jobs (by ID, with skip
// appended to the lock clause), then their tasks with a share lock, and
// cancels through River those whose task is cancelled. It returns the
// jobs it locked, under a lock timeout of cancelLockTimeout.
func (e *Engine) cancelTurnJobsTx(ctx context.Context, tx pgx.Tx, jobs []int64, skip string) ([]int64, error) {
	var locked, cancel []int64
	b := &pgx.Batch{}
	b.Queue(fmt.Sprintf(`SET LOCAL lock_timeout = '%dms'`, cancelLockTimeout.Milliseconds()))
	b.Queue(`SELECT id FROM river_job WHERE id = ANY($1) AND state IN `+liveJobStates+` ORDER BY id FOR UPDATE`+skip, jobs).
		Query(func(rows pgx.Rows) error {
			var err error
			locked, err = pgx.CollectRows(rows, pgx.RowTo[int64])
			return err
		})
	if err := tx.SendBatch(ctx, b).Close(); err != nil || len(locked) == 0 {
		return locked, err
	}
	rows, err := tx.Query(ctx, `
		SELECT j.id FROM braid_tasks t JOIN river_job j ON t.id = braid_turn_task(j.unique_key, j.args)
		 WHERE j.id = ANY($1) AND t.status = 'cancelled'
		 ORDER BY t.created_at DESC, t.id DESC FOR SHARE OF t`, locked)
	if err != nil {
		return nil, err
	}
	if cancel, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
		return nil, err
	}
	for _, jid := range cancel {
		if _, err := e.queue.River().JobCancelTx(ctx, tx, jid); err != nil && !errors.Is(err, rivertype.ErrNotFound) {
			return nil, err
		}
	}
	return locked, nil
}

// heldCancels are the turn jobs whose cancel found their row held past
// cancelLockTimeout by another transaction (a heartbeat, River's
// completer), and so left them alone. retryHeldCancels tries them again,
// while the engine's loop runs: an engine that is not started records
// none, since nothing would try them (its Cancel tries its run's jobs
// itself).
type heldCancels struct {
	mu      sync.Mutex
	running bool
	jobs    map[int64]bool
}

func (h *heldCancels) add(job int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.running {
		return
	}
	if h.jobs == nil {
		h.jobs = map[int64]bool{}
	}
	h.jobs[job] = true
}

// setRunning starts (true) or ends (false) the recording of held jobs; it
// forgets those recorded.
func (h *heldCancels) setRunning(running bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.running, h.jobs = running, nil
}

// retryHeldCancels tries again the cancel of each held turn job, as
// cancelLiveTurns does, one job per transaction. A job is forgotten once a
// transaction locks it: cancelled then if its task is still cancelled, or
// left to the turn that a Retry gave its task, or found finished. A job
// still held, or whose transaction failed, stays for the next pass; the
// pass goes on to the others and returns the failures. The engine runs a
// pass once every cancelLockTimeout from Start until its turns have ended
// in Stop, so that a running turn's context ends once its row is free.
// (Cancel, waiting for a run's turns, tries that run's jobs itself.)
func (e *Engine) retryHeldCancels(ctx context.Context) error {
	h := &e.held
	h.mu.Lock()
	jobs := make([]int64, 0, len(h.jobs))
	for jid := range h.jobs {
		jobs = append(jobs, jid)
	}
	h.mu.Unlock()
	slices.Sort(jobs)
	var errs []error
	for _, jid := range jobs {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		err := e.withTx(ctx, func(tx pgx.Tx) error {
			_, err := e.cancelTurnJobsTx(ctx, tx, []int64{jid}, "")
			return err
		})
		switch {
		case err == nil:
			h.mu.Lock()
			delete(h.jobs, jid)
			h.mu.Unlock()
		case isLockNotAvailable(err):
		default:
			errs = append(errs, fmt.Errorf("workflow: cancelling turn job %d again: %w", jid, err))
		}
	}
	return errors.Join(errs...)
}

// retryHeldCancelsEvery runs retryHeldCancels once every interval until
// ctx ends.
func (e *Engine) retryHeldCancelsEvery(ctx context.Context, interval time.Duration) {
	every(ctx, interval, func() {
		if err := e.retryHeldCancels(ctx); err != nil && ctx.Err() == nil {
			e.logger.WarnContext(ctx, "workflow: cancelling held turn jobs again failed; the next pass retries them", "error", err)
		}
	})
}

// cancelLockTimeout bounds how long cancelling a turn job waits for its
// row and its task's.
const cancelLockTimeout = time.Second

// cancelTries bounds how often Cancel starts over when a task it must
// lock is held by a turn that waits for a lock Cancel holds.
const cancelTries = 20

// CancelTx is Cancel inside tx: the run is cancelled only if tx commits.
// Unlike Cancel, it cannot wait for the run's running turns to end, since
// they learn of the cancel only once tx commits. A running turn whose job
// another transaction held at that moment learns of it within about a
// second of the commit from this engine, when it is started (see "Lock
// order" in the package doc), and otherwise at its next step.
// It may fail with PostgreSQL's lock_not_available (55P03) when a turn
// holds a task it must lock; roll tx back and call it again, as Cancel
// does.
func (e *Engine) CancelTx(ctx context.Context, tx pgx.Tx, runID string) error {
	id, err := parseRunID(runID)
	if err != nil {
		return err
	}
	return e.cancelTx(ctx, tx, id, runID, storedError{Message: "cancelled"}, true)
}

// parseRunID reads a run ID for Cancel and CancelTx: a run whose ID is no
// UUID is not found.
func parseRunID(runID string) (uuid.UUID, error) {
	id, err := uuid.Parse(runID)
	if err != nil {
		return uuid.Nil, fmt.Errorf("%w: %q is not a UUID", ErrRunNotFound, runID)
	}
	return id, nil
}

// cancelLockTasksSQL locks the unfinished tasks of run $1 but those of $2,
// the ones locked already, children before parents. The list is left out
// by a NOT IN on a subquery, which PostgreSQL reads into a hash table once
// (a hashed SubPlan), and not by id <> ALL($2): on a generic plan, which a
// statement gets after five runs, that compares each task with every
// entry of the list, and a run of 10,000 tasks would cost 100 million
// comparisons, its rows locked meanwhile.
const cancelLockTasksSQL = `
	SELECT id FROM braid_tasks WHERE run_id = $1 AND status NOT IN ` + finalStatuses + `
	   AND id NOT IN (SELECT unnest($2::uuid[]))
	 ORDER BY created_at DESC, id DESC FOR UPDATE`

// cancelTx cancels the run id inside tx, with cause as the stored error of
// the run and of each task it cancels: CancelTx's "cancelled", or the
// delay processor's timeout when the run's deadline passed. A timeout is
// fenced on the deadline: should the run's deadline have moved (a Retry
// since the processor read it), the run is left alone and cancelTx fails
// with ErrRunFinished, as for a run that finished meanwhile. holdSkipped
// keeps the turn jobs it skips among the held cancels, for a caller that
// does not cancel them itself once tx has committed (CancelTx's).
func (e *Engine) cancelTx(ctx context.Context, tx pgx.Tx, id uuid.UUID, runID string, cause storedError, holdSkipped bool) error {
	if err := runStatusIs(ctx, tx, id, runID, func(status string) error {
		if finished(status) {
			return fmt.Errorf("%w: run %s is %s", ErrRunFinished, runID, status)
		}
		return nil
	}); err != nil {
		return err
	}
	// The tasks, children before parents. Only the tasks locked here are
	// changed, so that no row is locked out of order. A parent whose turn
	// was recording its outcome while the first pass waited for it may
	// have created children meanwhile; later passes lock those, without
	// waiting: a child whose own outcome holds it waits for its parent,
	// which this transaction holds, so Cancel starts over instead.
	locked := []uuid.UUID{}
	for pass := 0; ; pass++ {
		lock := cancelLockTasksSQL
		if pass > 0 {
			lock += ` NOWAIT`
		}
		rows, err := tx.Query(ctx, lock, id, locked)
		if err != nil {
			return fmt.Errorf("workflow: locking the tasks of run %s: %w", runID, err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			return fmt.Errorf("workflow: locking the tasks of run %s: %w", runID, err)
		}
		if len(ids) == 0 {
			break
		}
		locked = append(locked, ids...)
	}
	errJSON, _ := json.Marshal(cause)
	rows, err := tx.Query(ctx, `
		UPDATE braid_tasks SET status = 'cancelled', error = $2, remaining = 0, finished_at = braid_now(), updated_at = braid_now()
		 WHERE id = ANY($1) AND status NOT IN `+finalStatuses+`
		RETURNING id`, locked, errJSON)
	if err != nil {
		return err
	}
	taskIDs, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return err
	}
	// Their steps.
	if len(taskIDs) > 0 {
		if _, err := tx.Exec(ctx, `
			UPDATE braid_steps SET status = 'cancelled', finished_at = braid_now()
			 WHERE task_id = ANY($1) AND status = 'waiting'`, taskIDs); err != nil {
			return err
		}
	}
	// The run, fenced on it being unfinished, and for a timeout on its
	// deadline having passed.
	update := `
		UPDATE braid_runs SET status = 'cancelled', error = $2, finished_at = braid_now(), updated_at = braid_now()
		 WHERE id = $1 AND status NOT IN ` + finalStatuses
	timeout := cause.Kind == errKindTimeout
	if timeout {
		update += ` AND deadline_at <= braid_clock()`
	}
	tag, err := tx.Exec(ctx, update, id, errJSON)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		if timeout {
			return fmt.Errorf("%w: run %s finished, or its deadline moved, meanwhile", ErrRunFinished, runID)
		}
		return fmt.Errorf("%w: run %s finished meanwhile", ErrRunFinished, runID)
	}
	// The turn jobs. River job rows come before tasks in the lock order,
	// so CancelTx never waits for one: a job that another transaction
	// holds now (a turn recording its outcome or heartbeating, River
	// fetching or completing it) is skipped. Its task is cancelled, so a
	// turn that starts finds nothing to do, and a running one stops at its
	// next step; Cancel and the delay processor cancel the skipped jobs
	// after the commit. A step may run long, and CancelTx's caller does not
	// cancel them, so for it each skipped job is kept among the held
	// cancels (retryHeldCancels): they cancel it once this transaction has
	// committed (waiting for its task's row until then), and do nothing
	// after a rollback.
	rows, err = tx.Query(ctx, `
		SELECT j.id FROM river_job j JOIN braid_tasks t ON braid_turn_task(j.unique_key, j.args) = t.id
		 WHERE j.kind = $1 AND t.run_id = $2 AND j.state IN `+liveJobStates+`
		 ORDER BY j.id FOR UPDATE OF j SKIP LOCKED`, TaskKind, id)
	if err != nil {
		return err
	}
	jobIDs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return err
	}
	if holdSkipped {
		if err := e.holdSkippedTurns(ctx, tx, id, jobIDs); err != nil {
			return err
		}
	}
	for _, jid := range jobIDs {
		if _, err := e.queue.River().JobCancelTx(ctx, tx, jid); err != nil {
			return fmt.Errorf("workflow: cancelling turn job %d: %w", jid, err)
		}
	}
	if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, channelRunFinished, id.String()); err != nil {
		return err
	}
	msg := "workflow: run cancelled"
	if timeout {
		msg = "workflow: run timed out: its deadline passed, so it is cancelled"
	}
	e.logger.InfoContext(ctx, msg, "run.id", runID, "tasks_cancelled", len(taskIDs), "turns_cancelled", len(jobIDs))
	return nil
}

// skippedTurnsSQL lists the live turn jobs (of kind $1) of run $2 but
// those of $3, leaving the list out by a hashed SubPlan, as
// cancelLockTasksSQL does.
var skippedTurnsSQL = `
	SELECT j.id FROM river_job j JOIN braid_tasks t ON braid_turn_task(j.unique_key, j.args) = t.id
	 WHERE j.kind = $1 AND t.run_id = $2 AND j.state IN ` + liveJobStates + `
	   AND j.id NOT IN (SELECT unnest($3::bigint[]))`

// holdSkippedTurns keeps among the held cancels the live turn jobs of run
// id that are not among locked, the ones cancelTx locked.
func (e *Engine) holdSkippedTurns(ctx context.Context, tx pgx.Tx, id uuid.UUID, locked []int64) error {
	rows, err := tx.Query(ctx, skippedTurnsSQL, TaskKind, id, locked)
	if err != nil {
		return err
	}
	skipped, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return err
	}
	for _, jid := range skipped {
		e.held.add(jid)
	}
	return nil
}

// runStatusIs reads the run's status, without a lock (the run row is the
// last lock of the order), and passes it to check.
func runStatusIs(ctx context.Context, tx pgx.Tx, id uuid.UUID, runID string, check func(status string) error) error {
	var status string
	err := tx.QueryRow(ctx, `SELECT status FROM braid_runs WHERE id = $1`, id).Scan(&status)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %s", ErrRunNotFound, runID)
	}
	if err != nil {
		return err
	}
	return check(status)
}

// Retry resumes a failed or cancelled run. Failed and cancelled tasks go
// back to pending (or to waiting on their reset children); recorded
// successful steps are kept, so the run resumes at the step that failed.
// A failed or cancelled task under a completed one stays as it is: the
// completed task's code saw its end and went on without it (it handled
// the *ChildError, or finished without awaiting it).
// Steps recorded as failed and cancelled delays are forgotten, so they run
// again, and so is what a reset task recorded after one of them (or after
// a failed or cancelled child it started, once the child had finished),
// since its code saw that failure (see rewindTx and the package
// documentation). An event that a forgotten record set goes back to the
// value the kept records give it, or is unset when none sets it. A run
// with a timeout (StartOpts.Timeout,
// WithRunTimeout) gets a fresh deadline, the same timeout counted from the
// retry. A run that retention has begun to delete over several
// transactions (see the package documentation, "Retention") is refused
// with ErrRunBeingDeleted, which matches ErrRunNotRetryable too.
//
// A cancelled turn may still be running its code. Retry first waits, up to
// TurnEndWaitDefault or until ctx ends, for the turns of the tasks it
// resets to end, so that no task ever has two turns running; when they do
// not end in time it returns a *TurnsRunningError and changes nothing.
// Its locks follow the engine's lock order: tasks (children before
// parents), steps, the run's published events, the run.
func (e *Engine) Retry(ctx context.Context, runID string) error {
	id, err := uuid.Parse(runID)
	if err != nil {
		return fmt.Errorf("%w: %q is not a UUID", ErrRunNotFound, runID)
	}
	deadline := time.Now().Add(TurnEndWaitDefault)
	for {
		if err := e.waitForTurnsToEnd(ctx, id, deadline, nil); err != nil {
			return err
		}
		var fin txCounts
		err := e.withTx(ctx, func(tx pgx.Tx) error {
			fin = txCounts{}
			return e.retryTx(ctx, tx, id, runID, &fin)
		})
		if err == nil {
			fin.record(ctx, e.metrics)
		}
		if isLockNotAvailable(err) && time.Now().Before(deadline) {
			// A finished task to forget was held by another
			// transaction: start over a moment later.
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		if !errors.Is(err, errTurnRunning) {
			return err
		}
		// A turn of a task to reset started running after the wait; wait
		// for it too.
	}
}

// errTurnRunning is retryTx's refusal to reset a task while a turn of it
// runs; Retry waits for the turn to end and tries again.
var errTurnRunning = errors.New("workflow: a turn of a task to reset is running")

func (e *Engine) retryTx(ctx context.Context, tx pgx.Tx, id uuid.UUID, runID string, fin *txCounts) error {
	if err := runStatusIs(ctx, tx, id, runID, func(status string) error {
		if status != "failed" && status != "cancelled" {
			return fmt.Errorf("%w: run %s is %s", ErrRunNotRetryable, runID, status)
		}
		return nil
	}); err != nil {
		return err
	}
	var deleting bool
	if err := tx.QueryRow(ctx, `SELECT deleting FROM braid_runs WHERE id = $1`, id).Scan(&deleting); err != nil {
		return err
	}
	if deleting {
		return &runBeingDeletedError{runID: runID}
	}
	// The failed and cancelled tasks, and the nodes of the run's DAGs,
	// under no completed task (openTasksSQL).
	rows, err := tx.Query(ctx, openTasksSQL+`
		SELECT id, status IN ('failed', 'cancelled') FROM braid_tasks
		 WHERE run_id = $1
		   AND ((status IN ('failed', 'cancelled') AND id IN (SELECT id FROM open))
		        OR (dependents IS NOT NULL AND parent_task_id IN (SELECT id FROM open)))
		 ORDER BY created_at DESC, id DESC FOR UPDATE`, id)
	if err != nil {
		return err
	}
	// reset are the tasks that Retry may set going again; rewound, those
	// among them that failed or were cancelled, whose histories it
	// rewinds (rewindTx). A completed DAG node is among the former only.
	var reset, rewound []uuid.UUID
	var (
		task   uuid.UUID
		ending bool
	)
	if _, err := pgx.ForEachRow(rows, []any{&task, &ending}, func() error {
		reset = append(reset, task)
		if ending {
			rewound = append(rewound, task)
		}
		return nil
	}); err != nil {
		return err
	}
	// No task is reset while a turn of it runs. Retry waited for them
	// before this transaction, but a turn may have started since, or had
	// its cancel requested by a Cancel that committed just before: the
	// turn that Retry would leave the task to must not be one that is
	// ending. The tasks' locks keep any cancel off them from here on.
	var running bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1`+runningTurnsSQL+`)`, TaskKind, id).Scan(&running); err != nil {
		return err
	}
	if running {
		return errTurnRunning
	}
	nodeTurns, frozen, err := e.retryNodesTx(ctx, tx, id, fin)
	if err != nil {
		return err
	}
	// What a DAG node that retryNodesTx did not release started stays as
	// it is: the node is decided afresh first, and only a node that runs
	// may set its children going again.
	if len(frozen) > 0 {
		rows, err := tx.Query(ctx, `WITH RECURSIVE `+
			taskTreeSQL("under", `SELECT k.id FROM braid_tasks k WHERE k.parent_task_id = ANY($1)`, "true")+`
			SELECT id FROM under`, pgIDs(frozen))
		if err != nil {
			return err
		}
		under, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			return err
		}
		left := make(map[uuid.UUID]bool, len(under)+len(frozen))
		for _, id := range under {
			left[id] = true
		}
		reset = slices.DeleteFunc(reset, func(id uuid.UUID) bool { return left[id] })
		for _, id := range frozen {
			left[id] = true
		}
		rewound = slices.DeleteFunc(rewound, func(id uuid.UUID) bool { return left[id] })
	}
	if err := e.rewindTx(ctx, tx, rewound); err != nil {
		return err
	}
	// A reset task with unfinished children waits for them; the others
	// get a turn. A DAG's root counts its nodes that retryNodesTx reset.
	rows, err = tx.Query(ctx, `
		UPDATE braid_tasks t
		   SET status = CASE WHEN c.n > 0 THEN 'waiting' ELSE 'pending' END, remaining = c.n,
		       error = NULL, attempt = 0, finished_at = NULL, updated_at = braid_now()
		  FROM (SELECT p.id, (SELECT count(*) FROM braid_tasks k
		                       WHERE k.parent_task_id = p.id AND k.status NOT IN `+finalStatuses+`) AS n
		          FROM braid_tasks p WHERE p.id = ANY($1)) c
		 WHERE t.id = c.id AND t.status IN ('failed', 'cancelled') AND t.dependents IS NULL
		RETURNING t.id, t.workflow, t.queue, t.priority, t.max_attempts, t.status`, reset)
	if err != nil {
		return err
	}
	var turns []turn
	for rows.Next() {
		var tr turn
		var prio int16
		var st string
		if err := rows.Scan(&tr.taskID, &tr.workflow, &tr.queue, &prio, &tr.maxAttempts, &st); err != nil {
			rows.Close()
			return err
		}
		tr.priority = queue.Priority(prio)
		if st == "pending" {
			turns = append(turns, tr)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `DELETE FROM braid_steps WHERE task_id = ANY($1) AND `+forgottenStepSQL, rewound); err != nil {
		return err
	}
	if err := restoreEventsTx(ctx, tx, id); err != nil {
		return err
	}
	// The run takes its root's status, as a run just started does: waiting
	// when the root waits for children or a DAG's nodes, and pending
	// otherwise, shown running only while the root's turn runs
	// (runStatusSQL). A run with a timeout gets a fresh deadline, counted
	// from the retry, and the delay processor hears of it as of a new
	// delay.
	var hasDeadline bool
	err = tx.QueryRow(ctx, `
		UPDATE braid_runs r
		   SET status = CASE WHEN (SELECT rt.status FROM braid_tasks rt WHERE rt.run_id = r.id AND rt.parent_task_id IS NULL) = 'waiting'
		                     THEN 'waiting' ELSE 'pending' END,
		       error = NULL, finished_at = NULL, updated_at = braid_now(), deadline_at = braid_now() + timeout
		 WHERE id = $1 AND status IN ('failed', 'cancelled') AND NOT deleting
		RETURNING deadline_at IS NOT NULL`, id).Scan(&hasDeadline)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: run %s changed state meanwhile", ErrRunNotRetryable, runID)
	}
	if err != nil {
		return err
	}
	if hasDeadline {
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, '')`, channelDelay); err != nil {
			return err
		}
	}
	return e.wakeTurns(ctx, tx, append(turns, nodeTurns...))
}

// forgottenStepSQL is the condition on a braid_steps row that Retry
// forgets: a step that failed or waits to be tried again, and a delay or
// wait on a message that was cancelled.
const forgottenStepSQL = `(status IN ('failed', 'retrying') OR (kind IN ('delay', 'signal', 'event') AND status = 'cancelled'))`

// rewindTx rewinds, for Retry, the history of each task of tasks (failed
// or cancelled, and locked by tx) to the calls whose ends Retry forgets: a
// step recorded as failed or waiting to be tried again, a cancelled delay
// or wait, or a failed or cancelled child (which Retry resets). What the
// task recorded after such a call, once it could have seen that end, is
// forgotten with it: the code that ran then saw the failure (it
// compensated, say), and once the call succeeds it may take another path,
// which must not meet the records of the first. A step's failure is seen
// when Step returns, so everything at later positions goes; a child's
// only once the child has finished, so what the task recorded at later
// positions before that (a step, another child started meanwhile) stays.
// Forgotten are the steps, delays, waits and events set, and the children
// started, with their descendants; a signal that a forgotten wait took
// goes back to the run's mailbox, for the wait that takes its place, and
// the events they set go back to what the kept records set
// (restoreEventsTx, once all is forgotten). The task's code runs again from the forgotten call, and the steps it then
// makes run again. Records without a position (written before positions
// were kept) stay.
//
// The forgotten children are final (a failed task's unfinished children
// were cancelled when it failed), and no path but Retry changes a final
// task. They come before the tasks that tx holds in the lock order, so
// they are locked with NOWAIT (see forgetAfterTx), never waiting.
func (e *Engine) rewindTx(ctx context.Context, tx pgx.Tx, tasks []uuid.UUID) error {
	if len(tasks) == 0 {
		return nil
	}
	rows, err := tx.Query(ctx, `
		SELECT task_id, position, NULL::timestamptz FROM braid_steps
		 WHERE task_id = ANY($1) AND position IS NOT NULL AND `+forgottenStepSQL+`
		UNION ALL
		SELECT parent_task_id, position, finished_at FROM braid_tasks
		 WHERE parent_task_id = ANY($1) AND position IS NOT NULL AND status IN ('failed', 'cancelled')`, pgIDs(tasks))
	if err != nil {
		return fmt.Errorf("workflow: finding where to rewind %d tasks: %w", len(tasks), err)
	}
	var (
		ends  forgottenEnds
		task  uuid.UUID
		pos   int32
		since *time.Time
	)
	if _, err := pgx.ForEachRow(rows, []any{&task, &pos, &since}, func() error {
		ends.add(task, pos, since)
		return nil
	}); err != nil {
		return fmt.Errorf("workflow: finding where to rewind %d tasks: %w", len(tasks), err)
	}
	return forgetAfterTx(ctx, tx, ends)
}

// forgottenEnds are ends of durable calls that Retry forgets: for each,
// the task, the position of its call, and when the task could first see
// it (nil: at once). A negative position stands for all of the task's
// history.
type forgottenEnds struct {
	tasks []uuid.UUID
	pos   []int32
	since []*time.Time
}

func (f *forgottenEnds) add(task uuid.UUID, pos int32, since *time.Time) {
	f.tasks, f.pos, f.since = append(f.tasks, task), append(f.pos, pos), append(f.since, since)
}

// forgottenSQL is the condition on a record r (braid_steps or braid_tasks
// as r) of a task, at position r.position, recorded at r.created_at, that
// forgetAfterTx forgets: one of the ends $1, $2, $3 comes before it.
func forgottenSQL(task string) string {
	return `EXISTS (SELECT 1 FROM unnest($1::uuid[], $2::int[], $3::timestamptz[]) AS c(task, pos, since)
	                 WHERE c.task = ` + task + ` AND (c.pos < 0 OR r.position > c.pos)
	                   AND (c.since IS NULL OR r.created_at >= c.since))`
}

// forgetAfterTx forgets what the tasks of ends (locked by tx) recorded
// after each end (see forgottenEnds): their steps, delays, waits and events
// set, and the children they started, with their descendants, which must
// be final. A signal that a forgotten wait took goes back to the run's
// mailbox. The children come before the tasks in the lock order: they are
// locked with NOWAIT, and when another transaction holds one (retention,
// say), forgetAfterTx fails with PostgreSQL's lock_not_available, on
// which Retry starts over a moment later.
func forgetAfterTx(ctx context.Context, tx pgx.Tx, ends forgottenEnds) error {
	if len(ends.tasks) == 0 {
		return nil
	}
	since := make([]pgtype.Timestamptz, len(ends.since))
	for i, s := range ends.since {
		if s != nil {
			since[i] = pgtype.Timestamptz{Time: *s, Valid: true}
		}
	}
	args := []any{pgIDs(ends.tasks), ends.pos, since}
	rows, err := tx.Query(ctx, `WITH RECURSIVE `+
		taskTreeSQL("gone", `SELECT r.id FROM braid_tasks r WHERE r.parent_task_id = ANY($1) AND `+forgottenSQL("r.parent_task_id"), "true")+`
		SELECT id FROM braid_tasks WHERE id = ANY(ARRAY(SELECT id FROM gone))
		 ORDER BY created_at DESC, id DESC FOR UPDATE NOWAIT`, args...)
	if err != nil {
		return fmt.Errorf("workflow: locking the children to forget of %d tasks: %w", len(ends.tasks), err)
	}
	gone, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return fmt.Errorf("workflow: locking the children to forget of %d tasks: %w", len(ends.tasks), err)
	}
	// The forgotten children go with their steps, then the tasks' later
	// records; the signals that the forgotten waits took go back to the
	// mailbox.
	b := &pgx.Batch{}
	b.Queue(`DELETE FROM braid_tasks WHERE id = ANY($1)`, pgIDs(gone))
	b.Queue(`
		WITH d AS (
		    DELETE FROM braid_steps r WHERE r.task_id = ANY($1) AND `+forgottenSQL("r.task_id")+`
		    RETURNING r.task_id, r.name
		)
		UPDATE braid_signals g SET delivered_at = NULL, task_id = NULL, step = NULL
		 WHERE g.task_id = ANY($4) OR (g.task_id, g.step) IN (SELECT task_id, name FROM d)`, append(args, pgIDs(gone))...)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("workflow: forgetting the later records of %d tasks: %w", len(ends.tasks), err)
	}
	return nil
}

// setsEventSQL is the condition that the set_event record s sets the
// event e.key: its name is "set-event:" and the key, with a "#n" suffix
// when the key was set more than once in its task. A name that is exactly
// "set-event:" and another key of the run sets that key alone.
const setsEventSQL = `(s.name = 'set-event:' || e.key
	OR (left(s.name, length(e.key) + 11) = 'set-event:' || e.key || '#'
	    AND substr(s.name, length(e.key) + 12) ~ '^[0-9]+$'
	    AND NOT EXISTS (SELECT 1 FROM braid_run_events o WHERE o.run_id = e.run_id AND 'set-event:' || o.key = s.name)))`

// restoreEventsTx gives back to the run's published state (braid_run_events)
// what its kept records set, once Retry has forgotten records (rewindTx,
// and the DAG nodes that retryNodesTx resets): a key whose value no kept
// set_event record of the task that set it holds any more, because the
// record or its task was forgotten, goes back to the value of the latest
// kept record that sets the key, in the run's order of recording (the
// time of the record's transaction, then the task's order of creation and
// the call's position), or is deleted when no kept record sets it. A value
// that a kept record still holds is left as it is. Its rows come after the
// steps in the lock order, and no turn of the run runs meanwhile.
func restoreEventsTx(ctx context.Context, tx pgx.Tx, runID uuid.UUID) error {
	_, err := tx.Exec(ctx, `
		WITH stale AS (
		    SELECT e.key FROM braid_run_events e
		     WHERE e.run_id = $1
		       AND NOT EXISTS (SELECT 1 FROM braid_steps s
		                        WHERE s.task_id = e.task_id AND s.kind = '`+stepKindSetEvent+`'
		                          AND s.output = e.value AND `+setsEventSQL+`)
		),
		kept AS (
		    SELECT DISTINCT ON (e.key) e.key, s.task_id, s.output, s.created_at
		      FROM braid_run_events e
		      JOIN braid_tasks k ON k.run_id = e.run_id
		      JOIN braid_steps s ON s.task_id = k.id AND s.kind = '`+stepKindSetEvent+`'
		     WHERE e.run_id = $1 AND e.key IN (SELECT key FROM stale) AND `+setsEventSQL+`
		     ORDER BY e.key, s.created_at DESC, k.created_at DESC, k.id DESC, s.position DESC NULLS LAST
		),
		restored AS (
		    UPDATE braid_run_events e
		       SET value = kept.output, task_id = kept.task_id, updated_at = kept.created_at
		      FROM kept
		     WHERE e.run_id = $1 AND e.key = kept.key
		)
		DELETE FROM braid_run_events e
		 WHERE e.run_id = $1 AND e.key IN (SELECT key FROM stale) AND e.key NOT IN (SELECT key FROM kept)`, runID)
	if err != nil {
		return fmt.Errorf("workflow: restoring the events of run %s: %w", runID, err)
	}
	return nil
}

// openTasksSQL is a WITH clause: open holds the tasks of run $1 that no
// completed task is above, found from its root task down through the
// tasks that did not complete. Retry resets only those. A failed or
// cancelled task under a completed one is left as it is: the completed
// task's code saw its end and went on without it (it handled a
// ChildError, or finished without awaiting it), and nothing would await
// it again.
var openTasksSQL = `WITH RECURSIVE ` + taskTreeSQL("open",
	`SELECT k.id FROM braid_tasks k WHERE k.run_id = $1 AND k.parent_task_id IS NULL AND k.status <> 'completed'`,
	`k.status <> 'completed'`)

// TurnEndWaitDefault bounds how long Cancel and Retry wait for the turns of
// a run's failed or cancelled tasks to end.
const TurnEndWaitDefault = 30 * time.Second

// runningTurnsSQL is the FROM clause of the running turns of the run's
// ($2) failed or cancelled tasks, $1 the turn kind: those that Cancel and
// Retry wait for.
const runningTurnsSQL = `
	  FROM braid_tasks t
	  JOIN river_job j ON j.kind = $1 AND braid_turn_task(j.unique_key, j.args) = t.id
	 WHERE j.state = 'running'
	   AND t.run_id = $2 AND t.status IN ('failed', 'cancelled')`

// waitForTurnsToEnd waits until no turn of the run's failed or cancelled
// tasks runs, until deadline at most. Meanwhile, when again is set, it
// calls again once every cancelLockTimeout; an error of again is logged,
// and the wait goes on.
func (e *Engine) waitForTurnsToEnd(ctx context.Context, runID uuid.UUID, deadline time.Time, again func(context.Context) error) error {
	last := time.Now()
	for {
		var running int
		err := e.pool.QueryRow(ctx, `SELECT count(*)`+runningTurnsSQL, TaskKind, runID).Scan(&running)
		if err != nil {
			return err
		}
		if running == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return &TurnsRunningError{RunID: runID.String(), Running: running, Waited: TurnEndWaitDefault}
		}
		if again != nil && time.Since(last) >= cancelLockTimeout {
			if err := again(ctx); err != nil && ctx.Err() == nil {
				e.logger.WarnContext(ctx, "workflow: cancelling a run's held turn jobs again failed; retrying", "run.id", runID, "error", err)
			}
			last = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
