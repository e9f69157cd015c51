package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/braidflow/braid/queue"
)

// taskArgs are the args of a turn: one River job of kind braid_task.
type taskArgs struct {
	TaskID   string `json:"task_id"`
	Workflow string `json:"workflow"`
}

func (taskArgs) Kind() string { return TaskKind }

// turnUnique allows at most one live turn per task.
var turnUnique = river.UniqueOpts{
	ByArgs: true,
	ByState: []rivertype.JobState{
		rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
		rivertype.JobStateRetryable, rivertype.JobStateScheduled,
	},
}

// turn is a turn to insert.
type turn struct {
	taskID      uuid.UUID
	workflow    string
	queue       string
	priority    queue.Priority
	maxAttempts int
}

// wakeTurns gives existing tasks, which tx holds locked, their next turn,
// except those that have a live turn job already (a turn left over from a
// rescue or a cancel that skipped it): that turn runs the task. Checking
// first, with a plain read, keeps River's unique insert from meeting the
// live job, which would lock the job row after the task row, against the
// lock order. No live turn can appear meanwhile: giving a task a turn
// takes its row lock, which tx holds.
func (e *Engine) wakeTurns(ctx context.Context, tx pgx.Tx, turns []turn) error {
	if len(turns) == 0 {
		return nil
	}
	ids := make([]string, len(turns))
	for i, tr := range turns {
		ids[i] = tr.taskID.String()
	}
	rows, err := tx.Query(ctx, `
		SELECT args->>'task_id' FROM river_job
		 WHERE kind = $1 AND args->>'task_id' = ANY($2) AND state IN `+liveJobStates, TaskKind, ids)
	if err != nil {
		return fmt.Errorf("workflow: looking for live turns: %w", err)
	}
	live, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("workflow: looking for live turns: %w", err)
	}
	if len(live) > 0 {
		has := make(map[string]bool, len(live))
		for _, id := range live {
			has[id] = true
		}
		kept := turns[:0:0]
		for _, tr := range turns {
			if has[tr.taskID.String()] {
				e.logger.DebugContext(ctx, "workflow: task has a live turn already; it runs the task", "task.id", tr.taskID)
				continue
			}
			kept = append(kept, tr)
		}
		turns = kept
	}
	return e.insertTurns(ctx, tx, turns)
}

// insertTurns inserts turns in tx, at most one live turn per task. Use it
// for new tasks, and wakeTurns for existing ones.
func (e *Engine) insertTurns(ctx context.Context, tx pgx.Tx, turns []turn) error {
	if len(turns) == 0 {
		return nil
	}
	params := make([]river.InsertManyParams, len(turns))
	for i, tr := range turns {
		params[i] = river.InsertManyParams{
			Args: taskArgs{TaskID: tr.taskID.String(), Workflow: tr.workflow},
			InsertOpts: &river.InsertOpts{
				Queue:       tr.queue,
				Priority:    int(tr.priority),
				MaxAttempts: tr.maxAttempts,
				UniqueOpts:  turnUnique,
			},
		}
	}
	res, err := e.queue.River().InsertManyTx(ctx, tx, params)
	if err != nil {
		return fmt.Errorf("workflow: inserting %d turns: %w", len(turns), err)
	}
	for i, r := range res {
		if r.UniqueSkippedAsDuplicate {
			// The task has a live turn already (for example a late
			// attempt that suspended after its job was rescued and
			// retried). That turn will run the task: there is nothing to
			// add and nothing to undo.
			e.logger.WarnContext(ctx, "workflow: task already has a live turn; not inserting another",
				"task.id", turns[i].taskID, "job.id", r.Job.ID)
		}
	}
	return nil
}

// stoppedTurnSnooze is how long a turn that Engine.Stop cancelled waits
// before it may run again, on another process or after a restart.
const stoppedTurnSnooze = time.Second

// taskWorker works turns.
type taskWorker struct {
	river.WorkerDefaults[taskArgs]
	eng *Engine
}

// NextRetry applies the definition's retry policy, or the client's.
func (w *taskWorker) NextRetry(job *river.Job[taskArgs]) time.Time {
	if d, ok := w.eng.registry[job.Args.Workflow]; ok && d.retry != nil {
		return d.retry.NextRetry(job.JobRow)
	}
	return time.Time{}
}

// Timeout applies the definition's timeout, or the client's.
func (w *taskWorker) Timeout(job *river.Job[taskArgs]) time.Duration {
	if d, ok := w.eng.registry[job.Args.Workflow]; ok && d.timeout > 0 {
		return d.timeout
	}
	return 0
}

func (w *taskWorker) Work(ctx context.Context, job *river.Job[taskArgs]) error {
	return w.eng.runTurn(ctx, job)
}

const finalStatuses = `('completed', 'failed', 'cancelled', 'skipped')`

// runTurn executes one turn of a task.
func (e *Engine) runTurn(ctx context.Context, job *river.Job[taskArgs]) error {
	taskID, err := uuid.Parse(job.Args.TaskID)
	if err != nil {
		return river.JobCancel(fmt.Errorf("workflow: turn has an invalid task ID %q", job.Args.TaskID))
	}
	d, known := e.registry[job.Args.Workflow]
	if !known {
		return e.unknownWorkflow(ctx, job, taskID)
	}

	// Mark the task running and load it, its steps and its children in one
	// round trip.
	t := &Task{
		eng: e, id: taskID, attempt: job.Attempt,
		steps: map[string]*stepRecord{}, children: map[string]*childRecord{},
		names: map[string]int{}, spawned: map[string]bool{},
	}
	var (
		input       []byte
		parentID    *uuid.UUID
		suspended   *string
		traceParent *string
	)
	batch := &pgx.Batch{}
	batch.Queue(`
		UPDATE braid_tasks t
		   SET status = 'running', attempt = $2, job_id = $3,
		       turns = t.turns + (t.status = 'pending')::int,
		       started_at = coalesce(t.started_at, now()), updated_at = now()
		  FROM braid_runs r
		 WHERE t.id = $1 AND r.id = t.run_id AND t.status IN ('pending', 'running')
		RETURNING t.run_id, t.parent_task_id, t.key, t.workflow, t.input, t.suspended_span, r.trace_parent`,
		taskID, job.Attempt, job.ID)
	batch.Queue(`SELECT name, kind, status, output, error, attempts FROM braid_steps WHERE task_id = $1`, taskID)
	batch.Queue(`SELECT id, key, workflow, status, output, error FROM braid_tasks WHERE parent_task_id = $1`, taskID)
	batch.Queue(`
		UPDATE braid_runs SET status = 'running', started_at = coalesce(started_at, now()), updated_at = now()
		 WHERE id = (SELECT run_id FROM braid_tasks WHERE id = $1 AND parent_task_id IS NULL AND status = 'running')
		   AND status IN ('pending', 'waiting')`, taskID)
	br := e.pool.SendBatch(ctx, batch)
	err = br.QueryRow().Scan(&t.runID, &parentID, &t.key, &t.workflow, &input, &suspended, &traceParent)
	if errors.Is(err, pgx.ErrNoRows) {
		_ = br.Close()
		e.logger.DebugContext(ctx, "workflow: turn for a task that is not runnable; nothing to do", "task.id", taskID, "job.id", job.ID)
		return nil
	}
	if err != nil {
		_ = br.Close()
		return fmt.Errorf("workflow: loading task %s: %w", taskID, err)
	}
	if err := loadSteps(br, t); err != nil {
		_ = br.Close()
		return err
	}
	if err := loadChildren(br, t); err != nil {
		_ = br.Close()
		return err
	}
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return fmt.Errorf("workflow: marking run running: %w", err)
	}
	if err := br.Close(); err != nil {
		return fmt.Errorf("workflow: loading task %s: %w", taskID, err)
	}

	// One trace per run: the turn's span is a child of braid.run.start,
	// linked to the turn that suspended.
	parent := ctx
	if traceParent != nil {
		parent = propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": *traceParent})
	}
	var links []trace.Link
	if suspended != nil {
		sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": *suspended}))
		if sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attribute.String("braid.link", "suspended turn")}})
		}
	}
	spanCtx, span := e.tracer.Start(parent, "braid.task "+t.workflow, trace.WithLinks(links...), trace.WithAttributes(
		attribute.String("run.id", t.runID.String()),
		attribute.String("task.id", taskID.String()),
		attribute.String("task.key", t.key),
		attribute.String("workflow", t.workflow),
		attribute.Int("attempt", job.Attempt),
		attribute.Int64("job.id", job.ID),
		attribute.String("queue", job.Queue),
	))
	defer span.End()
	t.ctx, t.span = spanCtx, span
	t.logger = e.logger.With("run.id", t.runID.String(), "task.id", taskID.String(), "workflow", t.workflow)
	e.metrics.turns.Add(ctx, 1)

	stopHeartbeat := e.heartbeat(ctx)
	out, runErr := callWorkflow(t, d, input)
	stopHeartbeat()

	if errors.Is(context.Cause(ctx), queue.ErrJobNotRunning) {
		// The attempt was rescued, or its job finished, while it ran:
		// another attempt owns the task now. Record nothing.
		span.SetAttributes(attribute.String("turn.outcome", "superseded"))
		return e.superseded(ctx, job, t.id)
	}
	if runErr != nil && ctx.Err() != nil && e.stopping.Load() {
		// Stop cancelled the turn: it is not the task's failure. Put the
		// turn back without spending the attempt.
		span.SetAttributes(attribute.String("turn.outcome", "stopped"))
		return river.JobSnooze(stoppedTurnSnooze)
	}
	switch {
	case t.suspended && t.snoozing:
		span.SetAttributes(attribute.String("turn.outcome", "step retry"))
		return e.snoozeTurn(ctx, job, t)
	case t.suspended:
		span.SetAttributes(attribute.String("turn.outcome", "suspended"))
		return e.suspendTurn(job, t, parentID)
	case runErr != nil:
		span.RecordError(runErr)
		span.SetStatus(codes.Error, runErr.Error())
		e.metrics.failures.Add(ctx, 1)
		return e.failTurn(ctx, job, t, parentID, runErr)
	default:
		span.SetAttributes(attribute.String("turn.outcome", "completed"))
		return e.completeTurn(job, t, parentID, out)
	}
}

func loadSteps(br pgx.BatchResults, t *Task) error {
	rows, err := br.Query()
	if err != nil {
		return fmt.Errorf("workflow: loading steps: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var errRaw []byte
		rec := &stepRecord{}
		if err := rows.Scan(&name, &rec.kind, &rec.status, &rec.output, &errRaw, &rec.attempts); err != nil {
			return fmt.Errorf("workflow: loading steps: %w", err)
		}
		if len(errRaw) > 0 {
			_ = json.Unmarshal(errRaw, &rec.err)
		}
		t.steps[name] = rec
	}
	return rows.Err()
}

func loadChildren(br pgx.BatchResults, t *Task) error {
	rows, err := br.Query()
	if err != nil {
		return fmt.Errorf("workflow: loading children: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var key string
		var errRaw []byte
		c := &childRecord{}
		if err := rows.Scan(&c.id, &key, &c.workflow, &c.status, &c.output, &errRaw); err != nil {
			return fmt.Errorf("workflow: loading children: %w", err)
		}
		if len(errRaw) > 0 {
			_ = json.Unmarshal(errRaw, &c.err)
		}
		t.children[key] = c
	}
	return rows.Err()
}

// heartbeat records that the turn is alive every TurnHeartbeat until the
// returned function is called.
func (e *Engine) heartbeat(ctx context.Context) func() {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(e.cfg.TurnHeartbeat)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				if err := queue.Heartbeat(ctx); err != nil && ctx.Err() == nil {
					e.logger.WarnContext(ctx, "workflow: recording a turn heartbeat", "error", err)
				}
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
	}
}

// callWorkflow runs the workflow function. A panic fails the attempt with
// its stack.
func callWorkflow(t *Task, d *definition, input []byte) (out json.RawMessage, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: string(debug.Stack())}
		}
	}()
	return d.fn(t, input)
}

// completeTurn records the output and settles the parent's join or the
// run, in one transaction with the job's completion.
func (e *Engine) completeTurn(job *river.Job[taskArgs], t *Task, parentID *uuid.UUID, out json.RawMessage) error {
	// The turn's context carries its span, which the children's jobs
	// record as their trace parent.
	ctx, cancel := e.outcomeContext(t.ctx)
	defer cancel()
	return e.outcomeTx(ctx, job, t.id, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
			UPDATE braid_tasks SET status = 'completed', output = $2, error = NULL, remaining = 0,
			       finished_at = now(), updated_at = now()
			 WHERE id = $1 AND status = 'running'`, t.id, []byte(out))
		if err != nil {
			return fmt.Errorf("workflow: completing task: %w", err)
		}
		if tag.RowsAffected() == 0 {
			t.logger.InfoContext(ctx, "workflow: task changed state during its turn (cancelled?); its output is dropped")
			return completeJob(ctx, tx, job)
		}
		if err := e.insertSpawns(ctx, tx, t); err != nil {
			return err
		}
		// Settling a child locks its parent's row, which every sibling
		// needs, so that lock is taken last and held only until the
		// commit.
		if err := completeJob(ctx, tx, job); err != nil {
			return err
		}
		return e.settle(ctx, tx, t.runID, parentID, "completed", out, nil)
	})
}

// failTurn records a failed attempt. On the last attempt the task fails
// and its parent or run learns of it, in one transaction fenced on the
// attempt; River then discards the job, which stays inspectable as a dead
// letter. If that transaction cannot commit, the reconciler finds the task
// without a live turn and fails it.
func (e *Engine) failTurn(turnCtx context.Context, job *river.Job[taskArgs], t *Task, parentID *uuid.UUID, runErr error) error {
	se := e.storedError(runErr, job.Attempt)
	errJSON, _ := json.Marshal(se)
	ctx, cancel := e.outcomeContext(turnCtx)
	defer cancel()
	if job.Attempt < job.MaxAttempts {
		// The error of the attempt, kept for operators while the task is
		// retried, in one statement that also tells whether the attempt
		// still owns its job: one that does not returns as superseded, so
		// that River records nothing over the attempt that replaced it.
		var owned, recorded bool
		err := e.pool.QueryRow(ctx, `
			WITH j AS (
			    SELECT 1 FROM river_job
			     WHERE id = $3 AND attempt = $4 AND attempted_at IS NOT DISTINCT FROM $5 AND state = 'running'
			), up AS (
			    UPDATE braid_tasks SET error = $2, updated_at = now()
			     WHERE id = $1 AND status = 'running' AND EXISTS (SELECT 1 FROM j)
			    RETURNING 1
			)
			SELECT EXISTS (SELECT 1 FROM j), EXISTS (SELECT 1 FROM up)`,
			t.id, errJSON, job.ID, job.Attempt, job.AttemptedAt).Scan(&owned, &recorded)
		switch {
		case err != nil:
			t.logger.WarnContext(ctx, "workflow: recording a failed attempt", "error", err)
		case !owned:
			return e.superseded(ctx, job, t.id)
		}
		return runErr
	}
	err := e.outcomeTx(ctx, job, t.id, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
			UPDATE braid_tasks SET status = 'failed', error = $2, remaining = 0, finished_at = now(), updated_at = now()
			 WHERE id = $1 AND status = 'running'`, t.id, errJSON)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		return e.settle(ctx, tx, t.runID, parentID, "failed", nil, errJSON)
	})
	if errors.Is(err, queue.ErrJobNotRunning) {
		return err
	}
	if err != nil {
		return fmt.Errorf("workflow: failing task after %d attempts: %w (attempt error: %s)", job.Attempt, err, se.Message)
	}
	return runErr
}

// storedError is how err is kept in a task's or a step's error column:
// its text sanitised and capped once, here, before it reaches jsonb.
func (e *Engine) storedError(err error, attempt int) storedError {
	se := storedError{Message: queue.SanitizeErrorText(err.Error(), e.cfg.MaxErrorBytes), Attempt: attempt}
	var pe *PanicError
	if errors.As(err, &pe) {
		se.Kind = "panic"
	}
	var ce *ChildError
	if errors.As(err, &ce) {
		se.Child = ce.Child
	}
	return se
}

// outcomeContext is the context of a turn's outcome transaction: not
// cancelled with the turn (a turn that timed out still records that it
// failed), bounded by OutcomeTimeout.
func (e *Engine) outcomeContext(turnCtx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(turnCtx), e.cfg.OutcomeTimeout)
}

// errNotOwner is returned inside an outcome transaction whose attempt no
// longer owns its job.
var errNotOwner = errors.New("workflow: the attempt no longer owns its job")

// outcomeTx runs fn in a transaction fenced on the turn's attempt
// (invariant 10): it first locks the turn's River job row by id, attempt
// and start time, and writes nothing when the job is no longer running at
// this attempt (rescued and retried, cancelled, finished). The job row is
// the first lock of the outcome, as the lock order requires.
func (e *Engine) outcomeTx(ctx context.Context, job *river.Job[taskArgs], taskID uuid.UUID, fn func(tx pgx.Tx) error) error {
	err := e.withTx(ctx, func(tx pgx.Tx) error {
		var owned bool
		err := tx.QueryRow(ctx, `
			SELECT true FROM river_job
			 WHERE id = $1 AND attempt = $2 AND attempted_at IS NOT DISTINCT FROM $3 AND state = 'running'
			   FOR UPDATE`, job.ID, job.Attempt, job.AttemptedAt).Scan(&owned)
		if errors.Is(err, pgx.ErrNoRows) {
			return errNotOwner
		}
		if err != nil {
			return fmt.Errorf("workflow: locking turn job %d: %w", job.ID, err)
		}
		return fn(tx)
	})
	if errors.Is(err, errNotOwner) {
		return e.superseded(ctx, job, taskID)
	}
	return err
}

// superseded ends a turn whose attempt lost its job: it says so at debug
// level and returns an error wrapping queue.ErrJobNotRunning, on which
// River records nothing for the attempt.
func (e *Engine) superseded(ctx context.Context, job *river.Job[taskArgs], taskID uuid.UUID) error {
	e.logger.DebugContext(ctx, "workflow: the turn's attempt no longer owns its job; its outcome is not recorded",
		"task.id", taskID, "job.id", job.ID, "attempt", job.Attempt)
	return fmt.Errorf("workflow: turn of task %s (job %d, attempt %d): %w", taskID, job.ID, job.Attempt, queue.ErrJobNotRunning)
}

// snoozeTurn puts the turn back for a step's retry, without spending the
// attempt, when the attempt still owns its job.
func (e *Engine) snoozeTurn(turnCtx context.Context, job *river.Job[taskArgs], t *Task) error {
	ctx, cancel := e.outcomeContext(turnCtx)
	defer cancel()
	var owned bool
	err := e.pool.QueryRow(ctx, `
		SELECT EXISTS (SELECT 1 FROM river_job
		                WHERE id = $1 AND attempt = $2 AND attempted_at IS NOT DISTINCT FROM $3 AND state = 'running')`,
		job.ID, job.Attempt, job.AttemptedAt).Scan(&owned)
	if err == nil && !owned {
		return e.superseded(ctx, job, t.id)
	}
	return river.JobSnooze(t.snooze)
}

// unknownWorkflow handles a turn of a workflow this process does not
// know, as during a rolling deploy or when services share a database. The
// task is left as it is and the turn is put back without spending an
// attempt, for a process that knows the workflow. Once the turn has waited
// UnknownWorkflowTimeout, the task fails (its run can be retried once the
// workflow is deployed) and the job ends as a dead letter.
func (e *Engine) unknownWorkflow(ctx context.Context, job *river.Job[taskArgs], taskID uuid.UUID) error {
	name := job.Args.Workflow
	if _, logged := e.unknownLogged.LoadOrStore(name, true); !logged {
		e.logger.WarnContext(ctx, "workflow: a turn's workflow is not registered in this process; leaving it to a process that knows it",
			"workflow", name, "task.id", taskID, "job.id", job.ID, "snooze", e.cfg.UnknownWorkflowSnooze)
	}
	var overdue bool
	err := e.pool.QueryRow(ctx, `SELECT created_at <= now() - $2::bigint * interval '1 microsecond' FROM river_job WHERE id = $1`,
		job.ID, e.cfg.UnknownWorkflowTimeout.Microseconds()).Scan(&overdue)
	if err != nil || !overdue {
		return river.JobSnooze(e.cfg.UnknownWorkflowSnooze)
	}
	msg := fmt.Sprintf("workflow %q is not registered in any process that took this turn within %s; deploy it, then retry the run", name, e.cfg.UnknownWorkflowTimeout)
	errJSON, _ := json.Marshal(storedError{Message: msg, Kind: "unknown_workflow", Attempt: job.Attempt})
	octx, cancel := e.outcomeContext(ctx)
	defer cancel()
	err = e.outcomeTx(octx, job, taskID, func(tx pgx.Tx) error {
		var runID uuid.UUID
		var parentID *uuid.UUID
		err := tx.QueryRow(octx, `
			UPDATE braid_tasks SET status = 'failed', error = $2, remaining = 0, finished_at = now(), updated_at = now()
			 WHERE id = $1 AND status IN ('pending', 'running')
			RETURNING run_id, parent_task_id`, taskID, errJSON).Scan(&runID, &parentID)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		return e.settle(octx, tx, runID, parentID, "failed", nil, errJSON)
	})
	if err != nil {
		return err
	}
	e.logger.ErrorContext(ctx, "workflow: no process took a turn of an unknown workflow in time; its task failed",
		"workflow", name, "task.id", taskID, "job.id", job.ID)
	return river.JobCancel(fmt.Errorf("%w: %s", ErrUnknownWorkflow, msg))
}

// settle finishes what a finished task finishes: its run when it is the
// root, or one count of its parent's join.
func (e *Engine) settle(ctx context.Context, tx pgx.Tx, runID uuid.UUID, parentID *uuid.UUID, status string, out json.RawMessage, errJSON []byte) error {
	if parentID == nil {
		// One round trip: the run's final state and the notification of
		// its waiters.
		batch := &pgx.Batch{}
		batch.Queue(`
			UPDATE braid_runs SET status = $2, output = $3, error = $4, finished_at = now(), updated_at = now()
			 WHERE id = $1 AND status NOT IN `+finalStatuses, runID, status, nullJSON(out), errJSON)
		batch.Queue(`SELECT pg_notify($1, $2)`, channelRunFinished, runID.String())
		if err := tx.SendBatch(ctx, batch).Close(); err != nil {
			return fmt.Errorf("workflow: finishing run: %w", err)
		}
		if status == "completed" {
			e.metrics.runsCompleted.Add(ctx, 1)
		} else {
			e.metrics.runsFailed.Add(ctx, 1)
		}
		return nil
	}
	return e.releaseParent(ctx, tx, *parentID)
}

// releaseParent counts one finished child off the parent's join. The lock
// on the parent row is taken in its own statement first, so the decrement
// that follows sees the parent's committed state: a parent that was
// counting its children while this child finished is either counted with
// this child finished, or is waiting by the time this child decrements.
// The child that brings the count to zero inserts the continuation.
func (e *Engine) releaseParent(ctx context.Context, tx pgx.Tx, parentID uuid.UUID) error {
	batch := &pgx.Batch{}
	batch.Queue(`SELECT 1 FROM braid_tasks WHERE id = $1 FOR UPDATE`, parentID)
	batch.Queue(`
		UPDATE braid_tasks
		   SET remaining = remaining - 1,
		       status = CASE WHEN remaining = 1 THEN 'pending' ELSE status END,
		       updated_at = now()
		 WHERE id = $1 AND status = 'waiting' AND remaining > 0
		RETURNING remaining, workflow, queue, priority, max_attempts`, parentID)
	br := tx.SendBatch(ctx, batch)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return fmt.Errorf("workflow: locking parent task: %w", err)
	}
	var (
		remaining, maxAttempts int
		workflow, q            string
		prio                   int16
	)
	err := br.QueryRow().Scan(&remaining, &workflow, &q, &prio, &maxAttempts)
	closeErr := br.Close()
	if errors.Is(err, pgx.ErrNoRows) {
		return closeErr // the parent is not waiting on children
	}
	if err != nil {
		return fmt.Errorf("workflow: releasing parent task: %w", err)
	}
	if closeErr != nil {
		return closeErr
	}
	if remaining > 0 {
		return nil
	}
	return e.wakeTurns(ctx, tx, []turn{{taskID: parentID, workflow: workflow, queue: q, priority: queue.Priority(prio), maxAttempts: maxAttempts}})
}

// suspendTurn ends a turn that must wait, on a delay or on children.
func (e *Engine) suspendTurn(job *river.Job[taskArgs], t *Task, parentID *uuid.UUID) error {
	spanCarrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(t.ctx, spanCarrier)
	ctx, cancel := e.outcomeContext(t.ctx)
	defer cancel()
	return e.outcomeTx(ctx, job, t.id, func(tx pgx.Tx) error {
		// Lock the task first, in its own statement, so the count below
		// sees every child that finished before the lock.
		var status string
		err := tx.QueryRow(ctx, `SELECT status FROM braid_tasks WHERE id = $1 FOR UPDATE`, t.id).Scan(&status)
		if err != nil {
			return fmt.Errorf("workflow: locking task to suspend: %w", err)
		}
		if status != "running" {
			t.logger.InfoContext(ctx, "workflow: task changed state during its turn (cancelled?); not suspending", "status", status)
			return completeJob(ctx, tx, job)
		}
		if err := e.insertSpawns(ctx, tx, t); err != nil {
			return err
		}
		if d := t.delay; d != nil && !d.existing {
			var until any
			if !d.until.IsZero() {
				until = d.until
			}
			if _, err := tx.Exec(ctx, `
				INSERT INTO braid_steps (task_id, name, kind, status, resume_at, attempts)
				VALUES ($1, $2, 'delay', 'waiting', coalesce($4::timestamptz, now() + $3::bigint * interval '1 microsecond'), 1)
				ON CONFLICT (task_id, name) DO NOTHING`,
				t.id, d.name, d.after.Microseconds(), until); err != nil {
				return fmt.Errorf("workflow: recording delay %q: %w", d.name, err)
			}
			if _, err := tx.Exec(ctx, `SELECT pg_notify($1, '')`, channelDelay); err != nil {
				return err
			}
		}
		var (
			remaining, maxAttempts int
			q                      string
			prio                   int16
		)
		err = tx.QueryRow(ctx, `
			UPDATE braid_tasks
			   SET status = 'waiting',
			       remaining = CASE WHEN $2 THEN (SELECT count(*) FROM braid_tasks c
			                                       WHERE c.parent_task_id = $1 AND c.status NOT IN `+finalStatuses+`)
			                        ELSE 0 END,
			       suspended_span = $3, updated_at = now()
			 WHERE id = $1
			RETURNING remaining, queue, priority, max_attempts`, t.id, t.waitChildren && t.delay == nil, nullString(spanCarrier.Get("traceparent"))).
			Scan(&remaining, &q, &prio, &maxAttempts)
		if err != nil {
			return fmt.Errorf("workflow: suspending task: %w", err)
		}
		if parentID == nil {
			if _, err := tx.Exec(ctx, `UPDATE braid_runs SET status = 'waiting', updated_at = now() WHERE id = $1 AND status = 'running'`, t.runID); err != nil {
				return err
			}
		}
		if err := completeJob(ctx, tx, job); err != nil {
			return err
		}
		if t.waitChildren && t.delay == nil && remaining == 0 {
			// Every awaited child finished during the turn: continue now.
			if _, err := tx.Exec(ctx, `UPDATE braid_tasks SET status = 'pending' WHERE id = $1`, t.id); err != nil {
				return err
			}
			return e.wakeTurns(ctx, tx, []turn{{taskID: t.id, workflow: t.workflow, queue: q, priority: queue.Priority(prio), maxAttempts: maxAttempts}})
		}
		return nil
	})
}

// insertSpawns creates the children started during the turn, and their
// first turns. A child that exists already (a turn that ran twice) is
// left alone.
func (e *Engine) insertSpawns(ctx context.Context, tx pgx.Tx, t *Task) error {
	if len(t.spawns) == 0 {
		return nil
	}
	n := len(t.spawns)
	ids := make([]uuid.UUID, n)
	keys := make([]string, n)
	workflows := make([]string, n)
	inputs := make([]string, n)
	maxAttempts := make([]int32, n)
	queues := make([]string, n)
	prios := make([]int16, n)
	byID := make(map[uuid.UUID]*spawn, n)
	for i := range t.spawns {
		s := &t.spawns[i]
		ids[i] = mustID()
		keys[i] = s.key
		workflows[i] = s.def.name
		inputs[i] = string(s.input)
		maxAttempts[i] = int32(s.def.maxAttempts)
		queues[i] = s.def.queue
		prios[i] = int16(s.def.priority)
		byID[ids[i]] = s
	}
	rows, err := tx.Query(ctx, `
		INSERT INTO braid_tasks (id, run_id, parent_task_id, key, workflow, status, input, max_attempts, queue, priority)
		SELECT unnest($1::uuid[]), $2::uuid, $3::uuid, unnest($4::text[]), unnest($5::text[]), 'pending',
		       unnest($6::text[])::jsonb, unnest($7::int[]), unnest($8::text[]), unnest($9::smallint[])
		ON CONFLICT (parent_task_id, key) WHERE parent_task_id IS NOT NULL DO NOTHING
		RETURNING id`, ids, t.runID, t.id, keys, workflows, inputs, maxAttempts, queues, prios)
	if err != nil {
		return fmt.Errorf("workflow: creating %d children: %w", n, err)
	}
	created, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return fmt.Errorf("workflow: creating %d children: %w", n, err)
	}
	turns := make([]turn, 0, len(created))
	for _, id := range created {
		s := byID[id]
		turns = append(turns, turn{taskID: id, workflow: s.def.name, queue: s.def.queue, priority: s.def.priority, maxAttempts: s.def.maxAttempts})
	}
	return e.insertTurns(ctx, tx, turns)
}

func completeJob(ctx context.Context, tx pgx.Tx, job *river.Job[taskArgs]) error {
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
		if errors.Is(err, rivertype.ErrNotFound) {
			// The job is no longer running (cancelled meanwhile): nothing
			// to complete.
			return nil
		}
		return fmt.Errorf("workflow: completing turn job %d: %w", job.ID, err)
	}
	return nil
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}
