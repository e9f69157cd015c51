package workflow

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivershared/uniquestates"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/braidflow/braid/queue"
)

// taskArgs are the args of a turn: one River job of kind braid_task.
//
// A turn job names its task in its unique key (turnKey), not in its args:
// River indexes every value of a job's args in a GIN index, from which
// PostgreSQL never deletes an entry, so a value unique to a task would
// stay in the index after its job is deleted and the index would grow
// with every task ever run. The args hold only the workflow, whose name
// many jobs share.
type taskArgs struct {
	// TaskID is the task of a turn job written before the task moved to
	// the unique key; such jobs keep it, and turnTask reads it from them.
	// New turn jobs leave it empty.
	TaskID   string `json:"task_id,omitempty"`
	Workflow string `json:"workflow"`

	// task is the task of a turn job being inserted. It is not encoded:
	// turnKeys moves it into the job's unique key.
	task uuid.UUID
}

func (taskArgs) Kind() string { return TaskKind }

// turnLiveStates are the states of a live turn job: River's unique index
// allows one job per task among them (design invariant 1).
var turnLiveStates = uniquestates.UniqueStatesToBitmask([]rivertype.JobState{
	rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
	rivertype.JobStateRetryable, rivertype.JobStateScheduled,
})

// turnKeys is the engine's insert middleware: it gives every turn job it
// inserts its unique key (turnKey), unique among live turn jobs. It is
// middleware of the engine's queue, not a hook of taskArgs, because River
// looks a kind's hooks up once, from the first args of that kind it
// inserts, and a job of kind braid_task inserted with other args (as by
// an operator's tool) must neither lose nor borrow them.
type turnKeys struct{ river.MiddlewareDefaults }

func (*turnKeys) InsertMany(ctx context.Context, params []*rivertype.JobInsertParams,
	doInner func(context.Context) ([]*rivertype.JobInsertResult, error)) ([]*rivertype.JobInsertResult, error) {
	for _, p := range params {
		if args, ok := p.Args.(taskArgs); ok {
			if args.task == uuid.Nil {
				return nil, fmt.Errorf("workflow: a turn job of workflow %q was inserted without its task", args.Workflow)
			}
			p.UniqueKey, p.UniqueStates = turnKey(args.task), turnLiveStates
			// A turn's span descends from its run's trace
			// (braid_runs.trace_parent), so the insert's trace context,
			// which the queue's middleware adds, is dropped, for the same
			// reason as the task in args.
			if bytes.Contains(p.Metadata, []byte(`"`+queue.MetadataTrace+`"`)) {
				var md map[string]json.RawMessage
				if err := json.Unmarshal(p.Metadata, &md); err != nil {
					return nil, fmt.Errorf("workflow: metadata of a turn job: %w", err)
				}
				delete(md, queue.MetadataTrace)
				b, err := json.Marshal(md)
				if err != nil {
					return nil, err
				}
				p.Metadata = b
			}
		}
	}
	return doInner(ctx)
}

// turnKey is the unique key of a turn of task: the 16 bytes of its ID.
// River's own keys are 32-byte hashes, so no other job's key equals it.
// SQL reads it back with braid_turn_task (migration 00111).
func turnKey(task uuid.UUID) []byte { return task[:] }

// turnTask returns the task of a turn job: the ID in its unique key, or,
// for a job written before the task moved there, the ID in its args.
func turnTask(job *rivertype.JobRow, args taskArgs) (uuid.UUID, error) {
	if len(job.UniqueKey) == len(uuid.UUID{}) {
		return uuid.UUID(job.UniqueKey), nil
	}
	id, err := uuid.Parse(args.TaskID)
	if err != nil {
		return uuid.Nil, fmt.Errorf("workflow: turn job %d names no task: its unique key has %d bytes and its args no valid task_id (%q)",
			job.ID, len(job.UniqueKey), args.TaskID)
	}
	return id, nil
}

// turn is a turn to insert.
type turn struct {
	taskID      uuid.UUID
	workflow    string
	queue       string
	priority    queue.Priority
	maxAttempts int
	// by is the outcome whose batch made the task runnable, if any: its
	// worker may run the turn next (claimContinuations).
	by *outcome
	// link is a turn span that the turn's span links to: the turn that
	// spawned a child, for a child's first turn; the child that released
	// a parent, for the parent's next turn. It is kept on the task, for
	// the turn's job (recordLinks).
	link *turnLink
	// wait is the wait on children that giving this turn ends, for its
	// span (recordWaits).
	wait *waitSpan
	// releasedBy is, for a DAG node released by the settle path, the node
	// whose turn released it.
	releasedBy uuid.UUID
}

// LinkAttribute is the attribute key that says, on every span link braid
// makes, what the linked span is to the linking one. Its values:
//
//   - "suspended turn": a task's turn links to the turn that suspended it;
//   - "spawning turn": a child's first turn links to the parent's turn that
//     started it;
//   - "releasing child": a parent's turn after a wait on children links to
//     the turn of the child whose finish released it;
//   - "releasing node": a DAG node's first turn links to the turn of the
//     node whose finish released it;
//   - "sending signal": a turn woken by a signal links to the span of its
//     send (braid.signal), in whichever process sent it;
//   - "publishing event": a turn woken by an event links to the span of its
//     publish (braid.publish).
//
// Code that links its own spans to braid's (the example links each
// digest's run to the fetch that found its entries) uses it too, so that
// a trace viewer shows every link under one key.
const LinkAttribute = "braid.link"

// Values of LinkAttribute.
const (
	linkSuspended = "suspended turn"
	linkSpawning  = "spawning turn"
	linkReleasing = "releasing child"
	linkNode      = "releasing node"
	linkSignal    = "sending signal"
	linkEvent     = "publishing event"
)

// tagFirstTurn is the River tag of the first turn job of a new task.
// Children are created only by an outcome that ends its turn's job (or,
// for a DAG, with the DAG's task), so the first attempt of a task's first
// turn has none to read, and its load skips them. It is a tag, not
// metadata, because every write of a job row indexes its metadata again.
const tagFirstTurn = "first_turn"

var firstTurnTags = []string{tagFirstTurn}

// readsChildren reports whether the turn job, of a task of definition d,
// may find children of its task: every turn but the first attempt of a
// function's first turn.
func readsChildren(job *rivertype.JobRow, d *definition) bool {
	return job.Attempt != 1 || mayHaveChildren(slices.Contains(job.Tags, tagFirstTurn), d)
}

// mayHaveChildren reports whether, on the first attempt of a turn, a task
// of definition d (nil when this process does not know it) may have
// children: unless the turn is the task's first and d a function.
func mayHaveChildren(firstTurn bool, d *definition) bool {
	return !firstTurn || d == nil || d.dag != nil
}

// turnLink is a span that a turn links to. It is kept on the turn's task
// (braid_tasks.turn_link, with the turn job's ID), not in the job's
// metadata: River indexes every metadata value in a GIN index, whose
// entries PostgreSQL never deletes, so a value unique to a job would stay
// there for good.
type turnLink struct {
	Job         int64  `json:"job"`
	TraceParent string `json:"traceparent"`
	Kind        string `json:"kind"`
}

// newTurnLink returns a link of kind to the span whose W3C traceparent is
// tp, or nil when there is none.
func newTurnLink(tp, kind string) *turnLink {
	if tp == "" {
		return nil
	}
	return &turnLink{TraceParent: tp, Kind: kind}
}

// recordLinks keeps the links of the inserted turns that have one on their
// tasks, which tx holds locked (enqueueTurns): queued on late when it is
// given (an outcome batch's last round trip, whose claims read them), else
// at once. Without tracing, no turn has a link, and this writes nothing.
func recordLinks(ctx context.Context, tx pgx.Tx, late *pgx.Batch, inserted []insertedTurn) error {
	var (
		ids   []uuid.UUID
		links [][]byte
	)
	for _, in := range inserted {
		if in.link == nil {
			continue
		}
		l := *in.link
		l.Job = in.jobID
		b, err := json.Marshal(l)
		if err != nil {
			return fmt.Errorf("workflow: encoding the link of task %s's turn: %w", in.taskID, err)
		}
		ids, links = append(ids, in.taskID), append(links, b)
	}
	if len(ids) == 0 {
		return nil
	}
	const record = `
		UPDATE braid_tasks t SET turn_link = u.link
		  FROM unnest($1::uuid[], $2::jsonb[]) AS u(id, link)
		 WHERE t.id = u.id`
	if late != nil {
		late.Queue(record, pgIDs(ids), links)
		return nil
	}
	if _, err := tx.Exec(ctx, record, pgIDs(ids), links); err != nil {
		return fmt.Errorf("workflow: recording the links of %d turns: %w", len(ids), err)
	}
	return nil
}

// recordClaimedLinks queues on late, after the statement that inserts the
// claimed turns (claimContinuations), the links of those among them that
// have one, each with the ID its job was given: the task's live turn job
// that this transaction wrote (its xmin; the batch takes no savepoint),
// which is the one it inserted: the batch's own turn jobs are finished
// before. That job is running, or, its queue being paused, available for
// River's fetch, whose turn links all the same. A turn the insert left
// out, its task having a live turn already, gets no link, as with River's
// insert.
func recordClaimedLinks(late *pgx.Batch, turns []insertedTurn) error {
	if len(turns) == 0 {
		return nil
	}
	ids := make([]uuid.UUID, len(turns))
	links := make([][]byte, len(turns))
	for i, in := range turns {
		b, err := json.Marshal(*in.link)
		if err != nil {
			return fmt.Errorf("workflow: encoding the link of task %s's turn: %w", in.taskID, err)
		}
		ids[i], links[i] = in.taskID, b
	}
	late.Queue(`
		UPDATE braid_tasks t SET turn_link = u.link || jsonb_build_object('job', j.id)
		  FROM unnest($1::uuid[], $2::jsonb[]) AS u(id, link)
		  JOIN river_job j ON j.kind = '`+TaskKind+`' AND braid_turn_task(j.unique_key, j.args) = u.id AND j.state IN ('running', 'available')
		                  AND j.xmin = pg_current_xact_id()::xid
		 WHERE t.id = u.id`, pgIDs(ids), links)
	return nil
}

// linkOf is the link of the turn of job, kept on its task, if any.
func linkOf(lt *loadedTask, job *rivertype.JobRow) (trace.Link, bool) {
	if lt.link == nil || lt.link.Job != job.ID {
		return trace.Link{}, false
	}
	return spanLink(lt.link.TraceParent, lt.link.Kind)
}

// spanLink is a link of kind to the span whose W3C traceparent is tp.
func spanLink(tp, kind string) (trace.Link, bool) {
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp}))
	if !sc.IsValid() {
		return trace.Link{}, false
	}
	return trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attribute.String(LinkAttribute, kind)}}, true
}

// traceParent is the W3C traceparent of the span in ctx, or "".
func traceParent(ctx context.Context) string {
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	return carrier.Get("traceparent")
}

// waitSpan is a wait of a task, from suspension to wake, recorded as a
// span once the wake has committed. A wait is an empty stretch of a
// trace otherwise: no turn runs while a task waits.
type waitSpan struct {
	runID       uuid.UUID
	taskID      uuid.UUID
	workflow    string
	traceParent *string // the run's braid.run.start
	// kind is "delay", "signal" or "event", and delay the step's name,
	// for a wait on a step; both are empty for a wait on children.
	kind  string
	delay string
	// children is how many children the task has started, for a wait on
	// children.
	children   int
	start, end time.Time
}

// recordWaits records waits as spans: braid.wait delay <name> or
// braid.wait children, children of the run's braid.run.start span, from
// the moment the task suspended to the moment it was woken (both by the
// database's clock, as recorded), so that nothing stays open while the
// task waits.
func (e *Engine) recordWaits(waits []waitSpan) {
	for _, w := range waits {
		if w.traceParent == nil || w.start.IsZero() || w.end.IsZero() {
			continue
		}
		parent := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": *w.traceParent})
		if !trace.SpanContextFromContext(parent).IsValid() {
			continue
		}
		name := "braid.wait children"
		attrs := []attribute.KeyValue{
			attribute.String("run.id", w.runID.String()),
			attribute.String("task.id", w.taskID.String()),
			attribute.String("workflow", w.workflow),
		}
		if w.delay != "" {
			kind := w.kind
			if kind == "" {
				kind = "delay"
			}
			name = "braid.wait " + kind + " " + w.delay
			attrs = append(attrs, attribute.String(kind, w.delay))
		} else {
			attrs = append(attrs, attribute.Int("children", w.children))
		}
		end := w.end
		if end.Before(w.start) {
			end = w.start
		}
		_, span := e.tracer.Start(parent, name, trace.WithTimestamp(w.start), trace.WithAttributes(attrs...))
		span.End(trace.WithTimestamp(end))
	}
}

// insertedTurn is a turn job enqueueTurns inserted, or, with claim, one
// it left for by's batch to insert claimed.
type insertedTurn struct {
	jobID    int64 // 0 with claim: the job is inserted later
	taskID   uuid.UUID
	workflow string
	by       *outcome
	// claim: the turn is by's next, inserted claimed in by's batch's last
	// round trip (claimContinuations), with tr's queue, priority and
	// attempts.
	claim bool
	tr    turn
	// first: the turn is its new task's first (tagFirstTurn).
	first bool
	// link is the turn's link, if any (recordLinks).
	link *turnLink
}

// wakeTurns gives existing tasks, which tx holds locked, their next turn;
// see enqueueTurns.
func (e *Engine) wakeTurns(ctx context.Context, tx pgx.Tx, turns []turn) error {
	_, err := e.enqueueTurns(ctx, tx, turns, nil, nil, nil)
	return err
}

// insertTurns inserts the first turns of new tasks; see enqueueTurns.
func (e *Engine) insertTurns(ctx context.Context, tx pgx.Tx, turns []turn) error {
	_, err := e.enqueueTurns(ctx, tx, nil, turns, nil, nil)
	return err
}

// enqueueTurns inserts, in tx and in one statement, the next turns of
// existing tasks (wake), which tx holds locked, and the first turns of
// new tasks (fresh), at most one live turn per task. An existing task
// that has a live turn job already (a turn left over from a rescue or a
// cancel that skipped it) is left to that turn. Checking first, with a
// plain read of River's unique index (the live job that holds the task's
// turn key), keeps River's unique insert from meeting the live job, which
// would lock the job row after the task row, against the lock order. No
// live turn can appear meanwhile: giving a task a turn takes its row lock,
// which tx holds. It returns the jobs it inserted.
//
// With claim, the first turn of each outcome (its by) for which claim
// holds is not inserted here: it is returned with claim set, for the batch
// of that outcome to insert already claimed, in its last round trip
// (claimContinuations). River's fetch never sees it, and no fetcher is
// woken for it. With late, the turns' links are written in that batch's
// last round trip (recordLinks).
func (e *Engine) enqueueTurns(ctx context.Context, tx pgx.Tx, wake, fresh []turn, claim func(turn) bool, late *pgx.Batch) ([]insertedTurn, error) {
	if len(wake) > 0 {
		ids := make([]uuid.UUID, len(wake))
		for i, tr := range wake {
			ids[i] = tr.taskID
		}
		// The live turns are the jobs River's unique insert would meet:
		// those that hold a task's key in River's unique index.
		keys := make([][]byte, len(ids))
		for i, id := range ids {
			keys[i] = turnKey(id)
		}
		rows, err := tx.Query(ctx, `
			SELECT braid_turn_task(unique_key, args) FROM river_job
			 WHERE unique_key = ANY($1) AND unique_states IS NOT NULL AND river_job_state_in_bitmask(unique_states, state)`, keys)
		if err != nil {
			return nil, fmt.Errorf("workflow: looking for live turns: %w", err)
		}
		live, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			return nil, fmt.Errorf("workflow: looking for live turns: %w", err)
		}
		if len(live) > 0 {
			kept := wake[:0:0]
			for _, tr := range wake {
				if slices.Contains(live, tr.taskID) {
					e.logger.DebugContext(ctx, "workflow: task has a live turn already; it runs the task", "task.id", tr.taskID)
					continue
				}
				kept = append(kept, tr)
			}
			wake = kept
		}
	}
	turns := append(append([]turn(nil), wake...), fresh...)
	if len(turns) == 0 {
		return nil, nil
	}
	var (
		inserted []insertedTurn
		params   []river.InsertManyParams
		of       []int // of[i] is the index in turns of params[i]
	)
	taken := map[*outcome]bool{}
	for i, tr := range turns {
		first := i >= len(wake)
		if claim != nil && tr.by != nil && !taken[tr.by] && claim(tr) {
			taken[tr.by] = true
			inserted = append(inserted, insertedTurn{taskID: tr.taskID, workflow: tr.workflow, by: tr.by, claim: true, tr: tr, first: first, link: tr.link})
			continue
		}
		p := river.InsertManyParams{
			Args: taskArgs{Workflow: tr.workflow, task: tr.taskID},
			InsertOpts: &river.InsertOpts{
				Queue:       tr.queue,
				Priority:    int(tr.priority),
				MaxAttempts: tr.maxAttempts,
			},
		}
		if first {
			p.InsertOpts.Tags = firstTurnTags
		}
		params, of = append(params, p), append(of, i)
	}
	if len(params) == 0 {
		return inserted, nil
	}
	res, err := e.queue.River().InsertManyTx(ctx, tx, params)
	if err != nil {
		return nil, fmt.Errorf("workflow: inserting %d turns: %w", len(params), err)
	}
	var added []insertedTurn
	for k, r := range res {
		tr := turns[of[k]]
		if r.UniqueSkippedAsDuplicate {
			// The task has a live turn already (for example a late
			// attempt that suspended after its job was rescued and
			// retried). That turn will run the task: there is nothing to
			// add and nothing to undo.
			e.logger.WarnContext(ctx, "workflow: task already has a live turn; not inserting another",
				"task.id", tr.taskID, "job.id", r.Job.ID)
			continue
		}
		added = append(added, insertedTurn{jobID: r.Job.ID, taskID: tr.taskID, workflow: tr.workflow, by: tr.by, first: of[k] >= len(wake), link: tr.link})
	}
	if err := recordLinks(ctx, tx, late, added); err != nil {
		return nil, err
	}
	return append(inserted, added...), nil
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
	return w.eng.nextRetry(job.JobRow, job.Args.Workflow)
}

func (e *Engine) nextRetry(job *rivertype.JobRow, workflow string) time.Time {
	if d, ok := e.registry[workflow]; ok && d.retry != nil {
		return d.retry.NextRetry(job)
	}
	return time.Time{}
}

// Timeout turns River's timeout off for turns: the engine bounds each turn
// itself (turnTimeout), so that a turn's worker can go on to run the turns
// its outcome made runnable, each with a timeout of its own.
func (w *taskWorker) Timeout(*river.Job[taskArgs]) time.Duration { return -1 }

// Work runs the turn River fetched, then, in the same worker slot, each
// turn that the previous one's outcome made runnable and claimed for this
// process (see claimContinuations), until an outcome claims none.
func (w *taskWorker) Work(ctx context.Context, job *river.Job[taskArgs]) error {
	next, err := w.eng.runTurn(ctx, job, false, nil)
	if next.row != nil {
		// The fetched turn's attempt ends here: each claimed turn is an
		// attempt of its own, timed alone.
		queue.EndAttempt(ctx)
	}
	w.eng.continueTurns(ctx, next)
	return err
}

// continuation is a turn claimed for this process by the batch of the
// turn before it, with its task as that batch read it (nil: not read).
type continuation struct {
	row  *rivertype.JobRow
	task *loadedTask
}

// continueTurns runs claimed turns one after the other. Each runs through
// the queue's middleware like a fetched job, on a context that keeps the
// worker's values but not its cancellation (the fetched job has finished;
// its worker's context ends with it), cancelled when Engine.Stop gives up
// waiting.
func (e *Engine) continueTurns(ctx context.Context, next continuation) {
	for next.row != nil {
		row, task := next.row, next.task
		next = continuation{}
		var args taskArgs
		if err := json.Unmarshal(row.EncodedArgs, &args); err != nil {
			args = taskArgs{} // runTurn cancels a turn it cannot read
		}
		if testHookBeforeContinuation != nil {
			testHookBeforeContinuation(row)
		}
		cctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
		hard := e.hardStop()
		stop := context.AfterFunc(hard, func() { cancel(errStopped) })
		if hard.Err() != nil {
			// Stop gave up waiting already: the turn starts cancelled
			// (AfterFunc would cancel it only once its own goroutine ran).
			cancel(errStopped)
		}
		_ = e.queue.WorkClaimed(cctx, row, queue.ClaimedWork{
			Work: func(ctx context.Context) error {
				n, err := e.runTurn(ctx, &river.Job[taskArgs]{JobRow: row, Args: args}, true, task)
				next = n
				return err
			},
			NextRetry: func(job *rivertype.JobRow) time.Time { return e.nextRetry(job, args.Workflow) },
			// A turn that returns nil has finished its job in its
			// outcome's batch.
			FinishedOnSuccess: true,
		})
		stop()
		cancel(nil)
	}
}

// testHookBeforeContinuation, when set (by tests), runs after a batch that
// claimed row committed and before its turn starts.
var testHookBeforeContinuation func(row *rivertype.JobRow)

// errStopped cancels a claimed turn when Engine.Stop stops waiting for it.
var errStopped = errors.New("workflow: the engine is stopping")

// turnTimeout is how long a turn of d may run: its definition's timeout,
// or the queue's job timeout.
func (e *Engine) turnTimeout(d *definition) time.Duration {
	if d.timeout > 0 {
		return d.timeout
	}
	return e.jobTimeout
}

const finalStatuses = `('completed', 'failed', 'cancelled', 'skipped')`

// runTurn executes one turn of a task; claimed is set for a turn this
// process claimed itself, and task for one whose task the claiming batch
// read. It returns the turn that its outcome claimed for this process to
// run next, if any.
func (e *Engine) runTurn(ctx context.Context, job *river.Job[taskArgs], claimed bool, task *loadedTask) (continuation, error) {
	taskID, err := turnTask(job.JobRow, job.Args)
	if err != nil {
		return continuation{}, river.JobCancel(err)
	}
	d, known := e.registry[job.Args.Workflow]
	if !known {
		return continuation{}, e.unknownWorkflow(ctx, job, taskID)
	}
	if timeout := e.turnTimeout(d); timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}

	// The turn writes nothing as it starts: River's fetch (or the claim of
	// a continuation) recorded the attempt, and the outcome is fenced on
	// it. The task, its steps and its children are read with the tasks of
	// the turns starting at the same time, or, for a continuation, by the
	// batch that claimed it.
	e.batcher.active.Add(1)
	handedIn := false
	defer func() {
		if !handedIn {
			e.batcher.active.Add(-1)
		}
	}()
	if err := e.interrupted(ctx, job, taskID); err != nil {
		return continuation{}, err
	}
	lt := task
	if lt == nil {
		lt, err = e.load(ctx, taskID, readsChildren(job.JobRow, d))
	}
	if err != nil {
		if ierr := e.interrupted(ctx, job, taskID); ierr != nil {
			return continuation{}, ierr
		}
		err = fmt.Errorf("workflow: loading task %s: %w", taskID, err)
		// The attempt fails: a span of its own says so.
		_, span := e.turnSpan(ctx, job, taskID, nil)
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		span.End()
		return continuation{}, err
	}
	if lt == nil || !isRunnable(lt.status) {
		e.logger.DebugContext(ctx, "workflow: turn for a task that is not runnable, or gone; nothing to do", "task.id", taskID, "job.id", job.ID)
		// An attempt that runs nothing is an attempt all the same.
		_, span := e.turnSpan(ctx, job, taskID, lt)
		defer span.End()
		span.SetAttributes(attribute.String("turn.outcome", "idle"))
		handedIn = true
		o := &outcome{kind: outcomeIdle, job: job.JobRow, taskID: taskID, claimed: claimed}
		if err := e.handIn(ctx, o); err != nil {
			if !errors.Is(err, queue.ErrJobNotRunning) {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			return continuation{}, err
		}
		return continuation{o.next, o.nextTask}, nil
	}
	t := &Task{
		eng: e, id: taskID, attempt: job.Attempt, job: job.JobRow, runID: lt.runID, parentID: lt.parentID,
		key: lt.key, workflow: lt.workflow,
		steps: lt.steps, children: lt.children,
		names: map[string]int{}, spawned: map[string]bool{}, input: lt.input, history: lt.history,
	}

	if lt.dag != nil {
		t.dag = *lt.dag
	}
	spanCtx, span := e.turnSpan(ctx, job, taskID, lt)
	defer span.End()
	t.ctx, t.span = spanCtx, span
	t.logger = e.logger.With("run.id", t.runID.String(), "task.id", taskID.String(), "workflow", t.workflow)
	e.metrics.turns.Add(ctx, 1)

	stopHeartbeat := e.heartbeat(ctx)
	out, runErr := callWorkflow(t, d, lt.input)
	stopHeartbeat()
	superseded := errors.Is(context.Cause(ctx), queue.ErrJobNotRunning)
	if runErr == nil && !t.suspended && !superseded {
		// The code may have completed on a step's failure (a fallback):
		// it goes into the history as a later call would put it there.
		_ = t.recordHandledFailure()
	}
	if t.halted != nil {
		// The code left its recorded history, or went on from a step's
		// failure that could not be recorded: the turn fails with that,
		// whatever the code made of the error, and records none of what
		// it did after it (no child, no wait).
		out, runErr = nil, t.halted
		t.suspended, t.snoozing = false, false
	}

	if superseded {
		// The attempt was rescued, or its job finished, while it ran:
		// another attempt owns the task now. Record nothing.
		span.SetAttributes(attribute.String("turn.outcome", "superseded"))
		return continuation{}, e.superseded(ctx, job, t.id)
	}
	if runErr != nil && e.stoppedBy(ctx) {
		// Stop cancelled the turn: it is not the task's failure. Put the
		// turn back without spending the attempt.
		span.SetAttributes(attribute.String("turn.outcome", "stopped"))
		return continuation{}, river.JobSnooze(stoppedTurnSnooze)
	}
	o := &outcome{job: job.JobRow, taskID: t.id, t: t, claimed: claimed}
	var ret error
	switch {
	case t.suspended && t.snoozing:
		span.SetAttributes(attribute.String("turn.outcome", "step retry"))
		o.kind, ret = outcomeSnooze, river.JobSnooze(t.snooze)
	case t.suspended:
		span.SetAttributes(attribute.String("turn.outcome", "suspended"))
		o.kind = outcomeSuspend
	case runErr != nil:
		span.RecordError(runErr)
		span.SetStatus(codes.Error, runErr.Error())
		e.metrics.failures.Add(ctx, 1)
		se := e.storedError(runErr, job.Attempt)
		if t.failedStep != "" && errors.Is(runErr, t.failedStepErr) {
			se.Step = t.failedStep
		}
		o.errJSON, _ = json.Marshal(se)
		o.kind, ret = outcomeFailAttempt, runErr
		if job.Attempt >= job.MaxAttempts || d.dag != nil {
			// The task fails, and its parent or run learns of it, fenced
			// on the attempt; River then discards the job, which stays
			// inspectable as a dead letter. Should the outcome not
			// commit, the reconciler finds the task without a live turn
			// and fails it. A DAG's root reads what its nodes recorded
			// and nothing else: its error is final at once, and its job
			// is cancelled with it (below) when attempts remain, as a
			// retry would only find the task failed.
			o.kind = outcomeFail
		}
	default:
		span.SetAttributes(attribute.String("turn.outcome", "completed"))
		o.kind, o.output = outcomeComplete, out
	}
	handedIn = true
	err = e.handIn(ctx, o)
	switch {
	case errors.Is(err, queue.ErrJobNotRunning):
		span.SetAttributes(attribute.String("turn.outcome", "superseded"))
	case err != nil:
		// The outcome was not recorded: the attempt fails with this
		// error (River retries the turn), whatever the code did.
		span.SetAttributes(attribute.String("turn.outcome", "not recorded"))
		span.RecordError(err)
		if runErr == nil {
			span.SetStatus(codes.Error, err.Error())
		}
	}
	switch {
	case errors.Is(err, queue.ErrJobNotRunning):
		return continuation{}, err
	case err != nil && o.kind == outcomeFail:
		return continuation{}, fmt.Errorf("workflow: failing task after %d attempts: %w (attempt error: %s)", job.Attempt, err, runErr)
	case err != nil && o.kind == outcomeFailAttempt:
		t.logger.WarnContext(ctx, "workflow: recording a failed attempt", "error", err)
		return continuation{}, runErr
	case err != nil:
		return continuation{}, err
	}
	if o.kind == outcomeFail && job.Attempt < job.MaxAttempts {
		// A DAG's root failed before its last attempt: River must not
		// retry the turn, and a Retry of the run must not find it still
		// live. The job is cancelled with the error, as the turn of an
		// unknown workflow is: the dead letter is the failed node's job.
		ret = river.JobCancel(runErr)
	}
	return continuation{o.next, o.nextTask}, ret
}

// turnSpan starts the span of a turn of task taskID, loaded as lt (nil
// when it could not be read). One trace per run: the span is a child of
// braid.run.start, linked to the turn that suspended, and to the turn that
// spawned the task or the child that released it, as its task records for
// its job.
func (e *Engine) turnSpan(ctx context.Context, job *river.Job[taskArgs], taskID uuid.UUID, lt *loadedTask) (context.Context, trace.Span) {
	parent := ctx
	var links []trace.Link
	name := job.Args.Workflow
	if lt != nil {
		name = lt.workflow
	}
	attrs := []attribute.KeyValue{
		attribute.String("task.id", taskID.String()),
		attribute.String("workflow", name),
		attribute.Int("attempt", job.Attempt),
		attribute.Int64("job.id", job.ID),
		attribute.String("queue", job.Queue),
	}
	if lt != nil {
		if lt.traceParent != nil {
			parent = propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": *lt.traceParent})
		}
		if lt.suspended != nil {
			if l, ok := spanLink(*lt.suspended, linkSuspended); ok {
				links = append(links, l)
			}
		}
		if l, ok := linkOf(lt, job.JobRow); ok {
			links = append(links, l)
		}
		attrs = append(attrs, attribute.String("run.id", lt.runID.String()), attribute.String("task.key", lt.key))
		if lt.dag != nil {
			attrs = append(attrs, attribute.String("dag", *lt.dag), attribute.String("dag.node", lt.key))
		}
	}
	return e.tracer.Start(parent, "braid.task "+name, trace.WithLinks(links...), trace.WithAttributes(attrs...))
}

// interrupted is what a turn whose context ended before it ran its code
// returns instead of an outcome, as the turn that ran its code does (see
// runTurn): an attempt that lost its job returns as superseded, recording
// nothing, and one that Stop cancelled is put back without spending the
// attempt. It is nil for a turn whose context has not ended, or ended for
// another reason.
func (e *Engine) interrupted(ctx context.Context, job *river.Job[taskArgs], taskID uuid.UUID) error {
	switch {
	case ctx.Err() == nil:
		return nil
	case errors.Is(context.Cause(ctx), queue.ErrJobNotRunning):
		return e.superseded(ctx, job, taskID)
	case e.stoppedBy(ctx):
		return river.JobSnooze(stoppedTurnSnooze)
	}
	return nil
}

// stoppedBy reports whether Stop cancelled the turn whose context is ctx:
// the engine is stopping and ctx was cancelled. A turn whose own timeout
// ended it while Stop waited for it timed out, and spends its attempt as
// at any other time.
func (e *Engine) stoppedBy(ctx context.Context) bool {
	return e.stopping.Load() && errors.Is(ctx.Err(), context.Canceled)
}

// handIn commits o with the outcomes of the turns that end at the same
// time, on a context not cancelled with the turn (a turn that timed out
// still records that it failed), bounded by OutcomeTimeout. An outcome
// whose attempt lost its job returns an error wrapping
// queue.ErrJobNotRunning, on which River records nothing.
func (e *Engine) handIn(turnCtx context.Context, o *outcome) error {
	ctx, cancel := e.outcomeContext(turnCtx)
	defer cancel()
	if err := e.batcher.submit(ctx, o); err != nil {
		return err
	}
	if o.err != nil {
		return o.err
	}
	if !o.owned {
		return e.superseded(ctx, &river.Job[taskArgs]{JobRow: o.job}, o.taskID)
	}
	return nil
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
	var ne *NodeError
	if errors.As(err, &ne) {
		se.Child = ne.Node
	}
	return se
}

// stepError is the stored error of a failed step: storedError, with the
// errors that err is (stepCauses), which the *StepError that replay
// returns matches with errors.Is.
func (e *Engine) stepError(err error, attempt int) storedError {
	se := e.storedError(err, attempt)
	se.Causes = stepCauses(err, e.cfg.MaxErrorBytes)
	return se
}

// stepCausesMax and stepCauseMaxBytes bound what stepCauses keeps: at most
// sixteen errors, each named in at most 1 KiB (a longer one is left out,
// as it could not be matched whole).
const (
	stepCausesMax     = 16
	stepCauseMaxBytes = 1024
)

// wellKnownErrors are sentinels that errors match through an Is method
// rather than by wrapping them (a *fs.PathError wrapping syscall.ENOENT
// is fs.ErrNotExist through Errno.Is), which stepCauses tests err against
// by name, as the chain does not hold them.
var wellKnownErrors = []error{
	fs.ErrNotExist, fs.ErrExist, fs.ErrPermission, fs.ErrInvalid, fs.ErrClosed,
	os.ErrDeadlineExceeded, context.Canceled, context.DeadlineExceeded,
	io.EOF, io.ErrUnexpectedEOF, net.ErrClosed, errors.ErrUnsupported,
}

// causeName names an error for StepError.Is: its dynamic type and its
// message, so that an error that merely reads like a sentinel (an RPC
// client's copy of a server's error) is not taken for it. ok is false for
// an error that cannot be named: one whose Error panics (a nil pointer
// wrapped as an error), or whose name jsonb cannot hold or is too long.
func causeName(err error) (name string, ok bool) {
	defer func() {
		if recover() != nil {
			name, ok = "", false
		}
	}()
	name = fmt.Sprintf("%T:%s", err, err.Error())
	if len(name) > stepCauseMaxBytes || !utf8.ValidString(name) || strings.ContainsRune(name, 0) {
		return "", false
	}
	return name, true
}

// stepCauses names (causeName) the errors that err is: err itself, the
// errors it wraps, through Unwrap() error and Unwrap() []error, and the
// wellKnownErrors it matches; each once, at most stepCausesMax of them, in
// at most budget bytes in all (on top of the error's message, which has a
// budget of its own). The shortest names are kept first: the sentinels
// that code tests for are short, and an error's outer layers, which repeat
// the inner ones' text, long.
func stepCauses(err error, budget int) []string {
	seen := map[string]bool{}
	var names []string
	add := func(e error) {
		if name, ok := causeName(e); ok && !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	var walk func(error, int)
	walk = func(e error, depth int) {
		// The depth bounds a chain that loops.
		if e == nil || depth > 100 {
			return
		}
		add(e)
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			walk(u.Unwrap(), depth+1)
		case interface{ Unwrap() []error }:
			for _, c := range u.Unwrap() {
				walk(c, depth+1)
			}
		}
	}
	func() {
		// An Unwrap or an Is method that panics (on a nil receiver, say)
		// ends the look, which keeps what it had.
		defer func() { _ = recover() }()
		walk(err, 0)
		for _, known := range wellKnownErrors {
			if errors.Is(err, known) {
				add(known)
			}
		}
	}()
	slices.SortStableFunc(names, func(a, b string) int { return len(a) - len(b) })
	var causes []string
	for _, name := range names {
		if len(causes) == stepCausesMax || len(name) > budget {
			break
		}
		budget -= len(name)
		causes = append(causes, name)
	}
	return causes
}

// outcomeContext is the context of a turn's outcome: not cancelled with
// the turn, bounded by OutcomeTimeout.
func (e *Engine) outcomeContext(turnCtx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(turnCtx), e.cfg.OutcomeTimeout)
}

// superseded ends a turn whose attempt lost its job: it says so at debug
// level and returns an error wrapping queue.ErrJobNotRunning, on which
// River records nothing for the attempt.
func (e *Engine) superseded(ctx context.Context, job *river.Job[taskArgs], taskID uuid.UUID) error {
	e.logger.DebugContext(ctx, "workflow: the turn's attempt no longer owns its job; its outcome is not recorded",
		"task.id", taskID, "job.id", job.ID, "attempt", job.Attempt)
	return fmt.Errorf("workflow: turn of task %s (job %d, attempt %d): %w", taskID, job.ID, job.Attempt, queue.ErrJobNotRunning)
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
	var (
		overdue bool
		runID   *uuid.UUID
		key     *string
		tp      *string
		lt      *loadedTask
	)
	err := e.pool.QueryRow(ctx, `
		SELECT j.created_at <= now() - $2::bigint * interval '1 microsecond', t.run_id, t.key,
		       (SELECT r.trace_parent FROM braid_runs r WHERE r.id = t.run_id)
		  FROM river_job j LEFT JOIN braid_tasks t ON t.id = $3
		 WHERE j.id = $1`,
		job.ID, e.cfg.UnknownWorkflowTimeout.Microseconds(), taskID).Scan(&overdue, &runID, &key, &tp)
	if runID != nil && key != nil {
		lt = &loadedTask{runID: *runID, key: *key, workflow: name, traceParent: tp}
	}
	// The attempt is a span of its run's trace, as any turn's.
	_, span := e.turnSpan(ctx, job, taskID, lt)
	defer span.End()
	if err != nil || !overdue {
		span.SetAttributes(attribute.String("turn.outcome", "unknown workflow"))
		return river.JobSnooze(e.cfg.UnknownWorkflowSnooze)
	}
	msg := fmt.Sprintf("workflow %q is not registered in any process that took this turn within %s; deploy it, then retry the run", name, e.cfg.UnknownWorkflowTimeout)
	errJSON, _ := json.Marshal(storedError{Message: msg, Kind: "unknown_workflow", Attempt: job.Attempt})
	e.batcher.active.Add(1)
	if err := e.handIn(ctx, &outcome{kind: outcomeFail, job: job.JobRow, taskID: taskID, errJSON: errJSON}); err != nil {
		if errors.Is(err, queue.ErrJobNotRunning) {
			span.SetAttributes(attribute.String("turn.outcome", "superseded"))
		} else {
			span.SetAttributes(attribute.String("turn.outcome", "not recorded"))
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		return err
	}
	e.logger.ErrorContext(ctx, "workflow: no process took a turn of an unknown workflow in time; its task failed",
		"workflow", name, "task.id", taskID, "job.id", job.ID)
	failure := fmt.Errorf("%w: %s", ErrUnknownWorkflow, msg)
	span.RecordError(failure)
	span.SetStatus(codes.Error, failure.Error())
	return river.JobCancel(failure)
}

// settlement is a task that has just finished.
type settlement struct {
	taskID    uuid.UUID
	runID     uuid.UUID
	parentID  *uuid.UUID
	status    string
	output    []byte
	errJSON   []byte
	startedAt *time.Time
	// key is the task's key; dag, for a DAG node, the name of its DAG.
	key string
	dag string
	// by is, for a node that the settle path skipped or failed, the node
	// whose settling led to it.
	by uuid.UUID
}

// origin is the node whose turn led to this settlement: the task itself,
// or the node whose settling skipped it.
func (s settlement) origin() uuid.UUID {
	if s.by != uuid.Nil {
		return s.by
	}
	return s.taskID
}

// settleTx is the one settle path: it finishes what finished tasks
// finish. A root task finishes its run, whose waiters are notified. A
// child counts off its parent's join: the children of one parent are
// summed, and the parent row is locked once, so a parent with many
// children finishing together is written once. The parent whose count
// reaches zero is pending again, and returned as a turn to give: exactly
// one transaction brings a count to zero (invariant 5). Parents are
// locked in their own statement first (unless parentsLocked: the caller
// holds them), so that the decrement sees each parent's committed state.
// With late, the runs' finishes and their notifications, which nothing
// later in the transaction reads, are queued on it for the caller to send
// with its last statements, rather than sent at once. The runs it finishes
// are counted in fin, for the caller to record once its transaction has
// committed.
func (e *Engine) settleTx(ctx context.Context, tx pgx.Tx, settled []settlement, parentsLocked bool, late *pgx.Batch, fin *txCounts) ([]turn, error) {
	var nodes []turn
	if slices.ContainsFunc(settled, func(s settlement) bool { return s.dag != "" }) {
		if !parentsLocked {
			if err := e.lockSettling(ctx, tx, settled); err != nil {
				return nil, err
			}
			parentsLocked = true
		}
		more, wake, err := e.settleNodes(ctx, tx, settled, fin)
		if err != nil {
			return nil, err
		}
		settled, nodes = append(slices.Clip(settled), more...), wake
	}
	var (
		runIDs             []uuid.UUID
		runStatus          []string
		runOutputs, runErr [][]byte
		runStarted         []*time.Time
		counts             = map[uuid.UUID]int32{}
		parents            []uuid.UUID
	)
	for _, s := range settled {
		if s.parentID == nil {
			runIDs = append(runIDs, s.runID)
			runStatus = append(runStatus, s.status)
			runOutputs = append(runOutputs, s.output)
			runErr = append(runErr, s.errJSON)
			runStarted = append(runStarted, s.startedAt)
			continue
		}
		if counts[*s.parentID] == 0 {
			parents = append(parents, *s.parentID)
		}
		counts[*s.parentID]++
	}
	if len(runIDs) > 0 {
		b := late
		if b == nil {
			b = &pgx.Batch{}
		}
		b.Queue(`
			UPDATE braid_runs r
			   SET status = u.status, output = u.output, error = u.error,
			       started_at = coalesce(r.started_at, u.started, braid_now()), finished_at = braid_now(), updated_at = braid_now()
			  FROM unnest($1::uuid[], $2::text[], $3::jsonb[], $4::jsonb[], $5::timestamptz[]) AS u(id, status, output, error, started)
			 WHERE r.id = u.id AND r.status NOT IN `+finalStatuses,
			pgIDs(runIDs), runStatus, runOutputs, runErr, runStarted)
		b.Queue(`SELECT pg_notify($1, id::text) FROM unnest($2::uuid[]) AS id`, channelRunFinished, pgIDs(runIDs))
		if late == nil {
			if err := tx.SendBatch(ctx, b).Close(); err != nil {
				return nil, fmt.Errorf("workflow: finishing %d runs: %w", len(runIDs), err)
			}
		}
		for _, st := range runStatus {
			fin.add(st)
		}
	}
	if len(parents) == 0 {
		return nodes, nil
	}
	ns := make([]int32, len(parents))
	for i, p := range parents {
		ns[i] = counts[p]
	}
	b := &pgx.Batch{}
	if !parentsLocked {
		b.Queue(`SELECT 1 FROM braid_tasks WHERE id = ANY($1) ORDER BY created_at DESC, id DESC FOR UPDATE`, pgIDs(parents))
	}
	// A released parent's wait on its children ends now: the wait's span
	// (recordWaits) needs the run's trace and the number of children,
	// read for the released parents only. A parent that Retry set waiting
	// (attempt 0) has no recorded start: its wait gets no span.
	b.Queue(`
		UPDATE braid_tasks t
		   SET remaining = greatest(t.remaining - u.n, 0),
		       status = CASE WHEN t.remaining <= u.n THEN 'pending' ELSE t.status END,
		       updated_at = braid_now()
		  FROM unnest($1::uuid[], $2::int[]) AS u(id, n)
		 WHERE t.id = u.id AND t.status = 'waiting' AND t.remaining > 0
		RETURNING t.id, t.status, t.workflow, t.queue, t.priority, t.max_attempts, t.run_id, t.waiting_since, braid_clock(),
		          CASE WHEN t.status = 'pending' AND t.waiting_since IS NOT NULL AND t.attempt > 0 THEN (SELECT r.trace_parent FROM braid_runs r WHERE r.id = t.run_id) END,
		          CASE WHEN t.status = 'pending' AND t.waiting_since IS NOT NULL AND t.attempt > 0 THEN (SELECT count(*)::int FROM braid_tasks k WHERE k.parent_task_id = t.id) END`,
		pgIDs(parents), ns)
	br := tx.SendBatch(ctx, b)
	defer func() { _ = br.Close() }()
	if !parentsLocked {
		if _, err := br.Exec(); err != nil {
			return nil, fmt.Errorf("workflow: locking %d parent tasks: %w", len(parents), err)
		}
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("workflow: releasing %d parent tasks: %w", len(parents), err)
	}
	defer rows.Close()
	var wake []turn
	for rows.Next() {
		var tr turn
		var status string
		var prio int16
		var w waitSpan
		var since *time.Time
		var children *int32
		if err := rows.Scan(&tr.taskID, &status, &tr.workflow, &tr.queue, &prio, &tr.maxAttempts,
			&w.runID, &since, &w.end, &w.traceParent, &children); err != nil {
			return nil, fmt.Errorf("workflow: releasing parent tasks: %w", err)
		}
		tr.priority = queue.Priority(prio)
		if status != "pending" {
			continue
		}
		if since != nil && children != nil {
			w.taskID, w.workflow, w.start, w.children = tr.taskID, tr.workflow, *since, int(*children)
			tr.wait = &w
		}
		wake = append(wake, tr)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("workflow: releasing %d parent tasks: %w", len(parents), err)
	}
	rows.Close()
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("workflow: releasing %d parent tasks: %w", len(parents), err)
	}
	return append(wake, nodes...), nil
}
