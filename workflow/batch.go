package workflow

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/codes"

	"github.com/braidflow/braid/queue"
)

// outcomeKind is what a turn ended with.
type outcomeKind int

const (
	// outcomeComplete: the task completed with an output.
	outcomeComplete outcomeKind = iota
	// outcomeSuspend: the task waits on a delay or on its children.
	outcomeSuspend
	// outcomeFail: the task failed (its last attempt, or a turn that no
	// process could run).
	outcomeFail
	// outcomeFailAttempt: an attempt failed and River retries it; the
	// error is kept on the task for operators.
	outcomeFailAttempt
	// outcomeSnooze: a step is retried later; River snoozes the turn.
	// Nothing is written: the batch only checks that the attempt still
	// owns its job.
	outcomeSnooze
	// outcomeIdle: the turn found its task not runnable (cancelled,
	// finished, waiting) and ran nothing. Its job completes; if the task
	// has become runnable meanwhile (a Retry that left the task to this
	// live turn), it gets a new turn.
	outcomeIdle
)

// outcome is one turn's outcome, handed to the batcher.
type outcome struct {
	kind    outcomeKind
	job     *rivertype.JobRow
	taskID  uuid.UUID
	t       *Task // nil for a turn that did not load its task
	output  json.RawMessage
	errJSON []byte

	// claimed is set for a turn this process claimed itself
	// (continueTurns), whose job River's completer never sees.
	claimed bool

	// Set by the flush.
	owned bool
	// finished: the batch completed the turn's job.
	finished bool
	err      error
	// next is a turn this outcome made runnable, claimed for this
	// process: the turn's worker runs it next, in the same slot.
	// nextTask is its task, read by the batch that claimed it.
	next     *rivertype.JobRow
	nextTask *loadedTask
	done     chan struct{}

	// tp is the W3C traceparent of the turn's span, once traceParent
	// has read it.
	tp     string
	tpRead bool

	// waiter says whether the turn still waits for the outcome's batch:
	// waiterWaiting, waiterGone once it stopped waiting (its outcome
	// deadline passed), or waiterBound once a batch gave the outcome a
	// next turn, after which it waits whatever its deadline (see submit).
	waiter atomic.Int32
}

// The states of outcome.waiter.
const (
	waiterWaiting int32 = iota
	waiterGone
	waiterBound
)

// traceParent returns the W3C traceparent of the turn's span, or "" for
// a turn that did not load its task.
func (o *outcome) traceParent() string {
	if !o.tpRead {
		o.tpRead = true
		if o.t != nil && o.t.ctx != nil {
			o.tp = traceParent(o.t.ctx)
		}
	}
	return o.tp
}

// batcher commits the outcomes of concurrent turns together: one
// transaction carries many turns' task updates, their jobs' completions,
// their runs' finishes and their parents' joins. Up to batcher.flushes
// batches are in flight at a time: the next batch collects, and commits,
// while the last one waits on the database. A batch begins to collect once
// a flush is free, and is flushed when it holds OutcomeBatchSize outcomes,
// when OutcomeLinger has passed since it began, or as soon as no other
// turn of this process is running (no outcome could join it).
type batcher struct {
	e  *Engine
	in chan *outcome
	// flushes is how many batches may commit at once: OutcomeFlushes, but
	// at most half the pool's connections (and at least one), so that
	// batches waiting on locks never hold every connection that turns,
	// River's fetches and the leases need.
	flushes int
	// active counts the turns of this process that have loaded their task
	// and not yet handed in their outcome.
	active atomic.Int64
	// cleanup tracks the cancels of cancelled children's turns that run
	// after their batch (cancelTurnsOf).
	cleanup sync.WaitGroup
	// alone holds a slot for each try of flushAlone, one at a time: the
	// outcomes tried beside the batches, however many, hold one of the
	// pool's connections at most, beside the batches' flushes.
	alone chan struct{}

	mu   sync.Mutex
	stop context.CancelFunc
	done chan struct{}
}

func newBatcher(e *Engine) *batcher {
	flushes := max(1, min(e.cfg.OutcomeFlushes, int(e.pool.Config().MaxConns)/2))
	return &batcher{e: e, in: make(chan *outcome, e.cfg.OutcomeBatchSize), flushes: flushes, alone: make(chan struct{}, 1)}
}

func (b *batcher) start() {
	b.mu.Lock()
	defer b.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	b.stop, b.done = cancel, make(chan struct{})
	go b.run(ctx, b.done)
}

// halt stops the batcher once the outcomes handed in are flushed. Call it
// after every turn has returned.
func (b *batcher) halt() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stop != nil {
		b.stop()
		<-b.done
		b.cleanup.Wait()
		b.stop, b.done = nil, nil
	}
}

// submit hands in an outcome and waits until its batch has committed, or
// failed. It returns the outcome with its result set.
func (b *batcher) submit(ctx context.Context, o *outcome) error {
	o.done = make(chan struct{})
	// The turn stops counting as active only once its outcome is in the
	// channel, so that a batcher that sees no active turn finds every
	// outcome handed in.
	select {
	case b.in <- o:
		b.active.Add(-1)
	case <-ctx.Done():
		b.active.Add(-1)
		return fmt.Errorf("workflow: handing in the outcome of task %s: %w", o.taskID, context.Cause(ctx))
	}
	select {
	case <-o.done:
		return nil
	case <-ctx.Done():
		if !o.waiter.CompareAndSwap(waiterWaiting, waiterGone) {
			// The batch has given this worker its next turn, which only
			// this worker will run: wait for the batch, which ends within
			// its own deadline.
			<-o.done
			return nil
		}
		// The batch may still commit: the job is then finished, or, when
		// it is not, the attempt's error makes River retry the turn,
		// which finds the task settled or runs it again. It gives this
		// worker no next turn.
		return fmt.Errorf("workflow: waiting for the outcome of task %s: %w", o.taskID, context.Cause(ctx))
	}
}

func (b *batcher) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	size, linger := b.e.cfg.OutcomeBatchSize, b.e.cfg.OutcomeLinger
	flushes := make(chan struct{}, b.flushes)
	var inFlight sync.WaitGroup
	defer inFlight.Wait()
	var pending []*outcome
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		if len(pending) == 0 {
			select {
			case o := <-b.in:
				pending = append(pending, o)
			case <-ctx.Done():
				return
			}
		}
		// The batch waits for a free flush before it collects: while
		// every flush is busy, the outcomes handed in meanwhile wait in
		// the channel, and join it.
		flushes <- struct{}{}
		timer.Reset(linger)
	collect:
		for len(pending) < size {
			select {
			case o := <-b.in:
				pending = append(pending, o)
				continue
			default:
			}
			if b.active.Load() == 0 {
				// No turn is left to join this batch: take what was
				// handed in before the last one stopped counting.
				for len(pending) < size {
					select {
					case o := <-b.in:
						pending = append(pending, o)
						continue
					default:
					}
					break
				}
				break collect
			}
			select {
			case o := <-b.in:
				pending = append(pending, o)
			case <-timer.C:
				break collect
			case <-ctx.Done():
				break collect
			}
		}
		timer.Stop()
		n := min(len(pending), size)
		batch := slices.Clone(pending[:n])
		pending = append(pending[:0], pending[n:]...)
		inFlight.Go(func() {
			defer func() { <-flushes }()
			b.e.flush(batch)
		})
	}
}

// flush commits a batch of outcomes in one transaction. When that fails,
// each outcome is committed alone, so that one bad outcome fails only its
// own turn. An outcome whose wait on a message needs a lock that another
// transaction holds (a caller's SignalTx still open) is left out of the
// batch, and recorded alone, beside the batches, once the lock is free
// (flushAlone): the other turns of the batch, and the batches after it, do
// not wait for that transaction.
func (e *Engine) flush(batch []*outcome) {
	for _, o := range e.flushSome(batch, e.batchLockTimeout()) {
		e.batcher.cleanup.Go(func() { e.flushAlone(o) })
	}
}

// Pauses of flushAlone between two tries.
const (
	busyPauseMin = 5 * time.Millisecond
	busyPauseMax = 200 * time.Millisecond
)

// flushAlone records an outcome that its batch left out, its wait's lock
// or a row it needs being held: it tries again after a pause, which
// doubles up to busyPauseMax, for OutcomeTimeout at most, and then fails
// the outcome. Between two tries it holds no connection, and it holds
// none of the batches' flushes; each try waits aloneLockTimeout at most
// for a row, and the tries of every outcome left out go one at a time:
// however many outcomes wait on one held lock, they hold one connection
// at most, a moment at a time, and the engine's connections go on
// serving the others.
func (e *Engine) flushAlone(o *outcome) {
	deadline := time.Now().Add(e.cfg.OutcomeTimeout)
	for pause := busyPauseMin; ; pause = min(2*pause, busyPauseMax) {
		time.Sleep(pause)
		e.batcher.alone <- struct{}{}
		busy := e.flushSome([]*outcome{o}, aloneLockTimeout)
		<-e.batcher.alone
		if len(busy) == 0 {
			return
		}
		if time.Now().After(deadline) {
			o.err = fmt.Errorf("workflow: recording the outcome of task %s: a lock it needs (its wait's mailbox or topic, or a row) stayed held for %s", o.taskID, e.cfg.OutcomeTimeout)
			o.next, o.nextTask, o.finished = nil, nil, false
			o.endDetachedStarts()
			close(o.done)
			return
		}
	}
}

// flushSome is flush but for the outcomes whose wait's lock another
// transaction held: it returns them, unrecorded, their turns still
// waiting.
//
// Its transaction waits for no row lock longer than lockTimeout: a batch
// held up by one outcome's row (a task that another transaction holds)
// fails while its turns still wait for their outcomes, and its outcomes
// are recorded again one at a time, each waiting aloneLockTimeout at most
// for a row; one whose row is still held is returned with the busy ones,
// to be tried beside the batches (flushAlone), so that it holds up no
// other outcome, and fails, if its row stays held, its own turn only.
func (e *Engine) flushSome(batch []*outcome, lockTimeout time.Duration) (busy []*outcome) {
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.OutcomeTimeout)
	defer cancel()
	start := time.Now()
	waits, orphans, fin, busy, err := e.flushTx(ctx, batch, lockTimeout)
	// A batch of one outcome has no one-at-a-time to fall back on: when
	// it lost a conflict with another transaction, it is tried again,
	// rather than spend its turn's attempt; one whose row lock stayed
	// held is left to flushAlone, which tries it again later.
	for try := 1; err != nil && len(batch) == 1 && try < outcomeTries && lostConflict(err) && !isLockNotAvailable(err); try++ {
		e.logger.DebugContext(ctx, "workflow: a turn's outcome lost a conflict; trying it again", "try", try, "error", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(try) * 10 * time.Millisecond):
		}
		if ctx.Err() != nil {
			break
		}
		waits, orphans, fin, busy, err = e.flushTx(ctx, batch, lockTimeout)
	}
	// The outcomes left out for a held lock were not in the transaction,
	// and a try that left out every one recorded nothing.
	if n := len(batch) - len(busy); err != nil || n > 0 {
		if err != nil {
			n = len(batch)
		}
		e.metrics.recordBatch(ctx, n, time.Since(start), err)
	}
	if err == nil {
		fin.record(ctx, e.metrics)
		e.recordWaits(waits)
		if len(orphans) > 0 {
			// Beside the next batches, not in their way: a parent that
			// leaves many children may take a while to cancel their
			// turns, and a turn not cancelled yet does nothing anyway.
			e.batcher.cleanup.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), e.cfg.OutcomeTimeout)
				defer cancel()
				e.cancelTurnsOf(ctx, orphans)
			})
		}
	}
	if err != nil && len(batch) > 1 {
		e.logger.WarnContext(ctx, "workflow: a batch of turn outcomes failed; recording them one at a time", "outcomes", len(batch), "error", err)
		busy = nil
		for _, o := range batch {
			busy = append(busy, e.flushSome([]*outcome{o}, min(lockTimeout, aloneLockTimeout))...)
		}
		return busy
	}
	if err != nil && isLockNotAvailable(err) {
		// Its row lock stayed held: tried again beside the batches.
		e.logger.DebugContext(ctx, "workflow: a turn's outcome waits for a row lock; trying it again beside the batches", "error", err)
		for _, o := range batch {
			o.next, o.nextTask, o.finished = nil, nil, false
		}
		return batch
	}
	if err != nil {
		busy = nil
	}
	if err == nil {
		var done []*rivertype.JobRow
		for _, o := range batch {
			if o.finished && !o.claimed {
				done = append(done, o.job)
			}
		}
		e.queue.Finished(done)
	}
	for _, o := range batch {
		if slices.Contains(busy, o) {
			continue
		}
		o.err = err
		if err != nil {
			o.next, o.nextTask, o.finished = nil, nil, false
		}
		o.endDetachedStarts()
		close(o.done)
	}
	return busy
}

// endDetachedStarts ends the braid.run.start spans of the detached
// children that the outcome's batches started (queueDetached), once its
// last batch has committed or failed for good: the span is made once per
// turn, whatever the number of batches that try to record the outcome, so
// that a run has one braid.run.start span, the one it keeps as its
// trace. When the outcome was not recorded, neither were the runs: the
// span says so.
func (o *outcome) endDetachedStarts() {
	if o.t == nil {
		return
	}
	for i := range o.t.detached {
		s := &o.t.detached[i]
		if s.start == nil {
			continue
		}
		if o.err != nil {
			s.start.SetStatus(codes.Error, "the run was not started: the outcome of the turn that started it was not recorded")
		}
		s.start.End()
		s.start = nil
	}
}

// batchLockTimeout is the lock_timeout of a batch's transaction: a
// quarter of OutcomeTimeout, so that a batch that one outcome's held row
// holds up fails, and its other outcomes are recorded one at a time, well
// before their turns stop waiting for them.
func (e *Engine) batchLockTimeout() time.Duration {
	return max(e.cfg.OutcomeTimeout/4, time.Millisecond)
}

// aloneLockTimeout bounds the wait for a row lock of each outcome that a
// failed batch records alone: they are tried one after another, and a
// row held by another transaction must not hold up those after it. An
// outcome that it fails is tried again beside the batches (flushAlone),
// whose every try waits as long at most, until OutcomeTimeout has passed.
const aloneLockTimeout = 100 * time.Millisecond

// outcomeTries bounds how often a batch of one outcome is tried when it
// keeps losing conflicts (lostConflict).
const outcomeTries = 5

// lostConflict reports whether err is PostgreSQL's verdict on a conflict
// with another transaction, which a new try may not meet: a serialization
// failure, a deadlock, or a lock taken NOWAIT (or under a lock timeout)
// that another transaction held.
func lostConflict(err error) bool {
	switch sqlState(err) {
	case "40001", "40P01", "55P03":
		return true
	}
	return false
}

// batchState is what a flush learns as it goes.
type batchState struct {
	owned    []*outcome
	status   map[uuid.UUID]string // locked tasks' statuses
	turnOf   map[uuid.UUID]turn   // locked tasks' next turns, were they given one
	wake     []turn               // existing tasks made runnable
	fresh    []turn               // new tasks' first turns
	byTask   map[uuid.UUID]*outcome
	complete []*rivertype.JobRow // jobs this batch finished (see lock)
	// delayDue is when the earliest timer the batch recorded (a delay, a
	// wait's timeout) is due, by the database's clock; nil for none.
	delayDue *time.Time
	// parentsLocked: the batch's lock took the parents its finishing
	// tasks settle too (see lock).
	parentsLocked bool
	// finished counts the runs the batch finishes, recorded once it has
	// committed.
	finished txCounts
	// mayOrphan are the tasks this batch finishes that may leave
	// unfinished children; orphans are those children (and their
	// descendants), which it cancelled.
	mayOrphan []uuid.UUID
	orphans   []uuid.UUID
}

// flushTx is the transaction of one batch. Its locks follow the lock order
// (invariant 9): the turns' job rows by ID, then the tasks it changes
// children first (the turns' tasks and the parents they settle, but for
// the parents older than all of them, which come later), then the runs.
// It returns the waits on children that the batch ended, to record once
// it has committed.
func (e *Engine) flushTx(ctx context.Context, all []*outcome, lockTimeout time.Duration) (waits []waitSpan, orphans []uuid.UUID, fin txCounts, busy []*outcome, err error) {
	err = e.withPipeTx(ctx, lockTimeout, func(tx *pipeTx) error {
		waits = nil
		for _, o := range all {
			o.owned, o.next, o.nextTask, o.finished = false, nil, nil, false
		}
		st := &batchState{byTask: map[uuid.UUID]*outcome{}}
		defer func() { orphans, fin = st.orphans, st.finished }()
		var err error
		if busy, err = e.lockMessages(ctx, tx, all); err != nil {
			return err
		}
		batch := all
		if len(busy) > 0 {
			// Left out, for flushAlone: nothing of theirs is written here.
			batch = slices.DeleteFunc(slices.Clone(all), func(o *outcome) bool { return slices.Contains(busy, o) })
			if len(batch) == 0 {
				return nil
			}
		}
		if err := e.lock(ctx, tx, batch, st); err != nil {
			return err
		}
		var settled []settlement
		var suspends []*outcome
		for _, o := range st.owned {
			live := isRunnable(st.status[o.taskID])
			switch o.kind {
			case outcomeIdle:
				st.complete, o.finished = append(st.complete, o.job), true
				if live {
					tr := st.turnOf[o.taskID]
					tr.by = o
					st.wake = append(st.wake, tr)
				}
			case outcomeComplete, outcomeSuspend:
				st.complete, o.finished = append(st.complete, o.job), true
				if !live {
					o.logf(ctx, "workflow: task changed state during its turn (cancelled?); its outcome is dropped", "status", st.status[o.taskID])
					continue
				}
				if o.kind == outcomeSuspend {
					suspends = append(suspends, o)
				}
			}
		}
		if err := e.insertSpawns(ctx, tx, st); err != nil {
			return err
		}
		// The finished tasks and the detached children's runs go in one
		// round trip, unless a finished task may leave children that the
		// batch cancels (whose detached children must not start): the runs
		// then come after the cancel.
		b := &pgx.Batch{}
		fin := e.queueFinishTasks(b, st)
		var detached []*runsCreation
		if len(st.mayOrphan) == 0 {
			if detached, err = e.queueDetached(ctx, b, st); err != nil {
				return err
			}
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		settled = *fin
		if st.orphans, err = e.cancelOrphansTx(ctx, tx, settled, st.mayOrphan); err != nil {
			return err
		}
		if len(st.orphans) > 0 {
			// A cancelled child whose own turn ends in this batch
			// suspends no more, and children it started in this batch
			// get no turn.
			orphan := make(map[uuid.UUID]bool, len(st.orphans))
			for _, id := range st.orphans {
				orphan[id] = true
				if _, ok := st.status[id]; ok {
					st.status[id] = "cancelled"
				}
			}
			suspends = slices.DeleteFunc(suspends, func(o *outcome) bool { return orphan[o.taskID] })
			st.fresh = slices.DeleteFunc(st.fresh, func(tr turn) bool { return orphan[tr.taskID] })
		}
		if len(st.mayOrphan) > 0 {
			b := &pgx.Batch{}
			if detached, err = e.queueDetached(ctx, b, st); err != nil {
				return err
			}
			if err := tx.SendBatch(ctx, b).Close(); err != nil {
				return err
			}
		}
		if err := e.startDetached(ctx, tx, st, detached); err != nil {
			return err
		}
		// Statements whose results nothing later in the transaction
		// reads (the runs' finishes, the attempts' errors, the
		// notifications) go in its last round trip, with the claims.
		late := &pgx.Batch{}
		wake, err := e.settleTx(ctx, tx, settled, st.parentsLocked, late, &st.finished)
		if err != nil {
			return err
		}
		for i := range wake {
			if r := wake[i].releasedBy; r != uuid.Nil {
				// A released DAG node starts in the worker of the node
				// that released it, and links to that node's turn.
				if by := st.byTask[r]; by != nil {
					wake[i].by, wake[i].link = by, newTurnLink(by.traceParent(), linkNode)
				}
				continue
			}
			// The parent continues in the worker of one of its children
			// that finished in this batch, and its turn links to that
			// child's turn: the last to finish, which released it.
			for _, s := range settled {
				if s.parentID != nil && *s.parentID == wake[i].taskID {
					if by := st.byTask[s.taskID]; by != nil {
						wake[i].by, wake[i].link = by, newTurnLink(by.traceParent(), linkReleasing)
					}
					break
				}
			}
			if wake[i].wait != nil {
				waits = append(waits, *wake[i].wait)
			}
		}
		st.wake = append(st.wake, wake...)
		taken, err := e.suspendTasks(ctx, tx, suspends, st)
		if err != nil {
			return err
		}
		waits = append(waits, taken...)
		e.recordAttemptErrors(late, st)
		// The batch's own jobs completed with its locks (see lock), before
		// its new turns are inserted: a task woken here must not find its
		// finished turn still live. The turns this batch will claim are
		// inserted claimed, in its last round trip (see
		// claimContinuations).
		stopping := e.stopping.Load()
		inserted, err := e.enqueueTurns(ctx, tx, st.wake, st.fresh, func(tr turn) bool {
			_, known := e.registry[tr.workflow]
			// A worker runs a next turn of its own queue only, so that no
			// queue runs more turns at once than its MaxWorkers.
			return !stopping && known && tr.by.owned && e.queue.Claims(TaskKind) && e.queue.Works(tr.queue) &&
				tr.queue == tr.by.job.Queue && tr.by.mayGoOn()
		}, late)
		if err != nil {
			return err
		}
		if st.delayDue != nil {
			// The delay processor learns when: a delay due after the
			// timer it has armed costs it nothing.
			late.Queue(`SELECT pg_notify($1, $2)`, channelDelay, delayNote(*st.delayDue))
		}
		return e.claimContinuations(ctx, tx, inserted, st, late, stopping)
	})
	return waits, orphans, fin, busy, err
}

// mayGoOn reports whether the outcome's worker may run a next turn once
// the batch commits: only when the turn's result is then on record. It is
// for a job the batch finished, and for a claimed turn, whose result
// WorkClaimed records before its worker goes on. A turn River fetched that
// failed or snoozes has its result recorded by River only when its worker
// returns: a next turn run first would leave its job running, without a
// heartbeat, for as long as that turn ran.
//
// It also binds the turn to wait for the batch: a next turn claimed for a
// worker that no longer waits would be left running with no one to run it.
// It reports false for a turn that has stopped waiting.
func (o *outcome) mayGoOn() bool {
	if !o.finished && !o.claimed {
		return false
	}
	return o.waiter.CompareAndSwap(waiterWaiting, waiterBound) || o.waiter.Load() == waiterBound
}

// logf logs at info level with the turn's task.
func (o *outcome) logf(ctx context.Context, msg string, args ...any) {
	if o.t != nil && o.t.logger != nil {
		o.t.logger.InfoContext(ctx, msg, args...)
	}
}

// lock takes the batch's first locks in one round trip, in the lock order
// (invariant 9). First the turn jobs, by ID, that still run the attempt
// that handed in the outcome: the others lost their job (rescued,
// cancelled, finished), so their outcomes are dropped and their turns
// return as superseded. Then the turns' tasks, newest first: a child is
// always created after its parent, so that is children first, the order
// every writer of tasks follows. The same round trip completes the jobs of
// the turns that ended.
//
// A parent that a finishing task settles is locked here too, unless it is
// older than every task of the batch: such a parent comes after all of
// them in the lock order, so the settle (settleTx) locks it, later in the
// transaction, and a batch holds it, when the batches of the parent's other
// children want it too, for less time. (A fan-out's children, which all
// settle one older parent, are such a batch.) A batch that finishes a DAG
// node, or a task that may leave unfinished children, locks every parent
// here: its settle reads the node's DAG, and its cancel of the orphans
// writes their steps, before the settle; st.parentsLocked says so.
func (e *Engine) lock(ctx context.Context, tx pgx.Tx, batch []*outcome, st *batchState) error {
	ids := make([]int64, len(batch))
	attempts := make([]int32, len(batch))
	ats := make([]*time.Time, len(batch))
	var tasks, finishing, nodes []uuid.UUID
	for i, o := range batch {
		ids[i], attempts[i], ats[i] = o.job.ID, int32(o.job.Attempt), o.job.AttemptedAt
		if o.kind == outcomeSnooze {
			continue
		}
		tasks = append(tasks, o.taskID)
		if o.kind == outcomeComplete || o.kind == outcomeFail {
			finishing = append(finishing, o.taskID)
			// What the turn loaded says whether the settle may change
			// more rows: the blocked nodes of a node's DAG, the
			// unfinished children of a task. A turn that loaded nothing
			// (an unknown workflow's) may have either.
			if o.t == nil || o.t.dag != "" {
				nodes = append(nodes, o.taskID)
			}
			if o.t == nil || o.t.mayLeaveChildren() {
				st.mayOrphan = append(st.mayOrphan, o.taskID)
			}
		}
	}
	// The rows the batch changes besides its tasks and their parents: only
	// when there may be any, the blocked nodes of their DAGs and their
	// unfinished descendants, so that a batch with neither pays nothing
	// for them.
	lockTasks := `SELECT unnest($1::uuid[])`
	lockArgs := []any{pgIDs(tasks)}
	switch {
	case len(nodes) > 0 || len(st.mayOrphan) > 0:
		// Every parent now: the settle of a DAG node reads its DAG, and
		// the cancel of orphans writes their steps, before the settle.
		lockArgs = append(lockArgs, pgIDs(finishing))
		lockTasks += ` UNION SELECT parent_task_id FROM braid_tasks WHERE id = ANY($2)`
		st.parentsLocked = true
	case len(finishing) > 0:
		// Only the parents that do not come after every task of the batch
		// in the lock order: those that are older than its oldest task
		// the settle locks, and locking them last keeps the order.
		lockArgs = append(lockArgs, pgIDs(finishing))
		// (The parents are read by key, each once: a join of the children
		// to their parents would be planned as a merge over the whole
		// primary key.)
		lockTasks += `
			UNION SELECT p.id FROM braid_tasks p
			 WHERE p.id = ANY(ARRAY(SELECT parent_task_id FROM braid_tasks WHERE id = ANY($2)))
			   AND (p.created_at, p.id) >= (SELECT created_at, id FROM braid_tasks WHERE id = ANY($1) ORDER BY created_at, id LIMIT 1)`
	}
	if len(nodes) > 0 {
		lockArgs = append(lockArgs, pgIDs(nodes))
		lockTasks += ` UNION ` + lockNodesSQL(fmt.Sprintf("$%d", len(lockArgs)))
	}
	if len(st.mayOrphan) > 0 {
		lockArgs = append(lockArgs, pgIDs(st.mayOrphan))
		lockTasks += ` UNION ` + unfinishedDescendantsSQL(fmt.Sprintf("$%d::uuid[]", len(lockArgs)))
	}
	b := &pgx.Batch{}
	b.Queue(`
		SELECT j.id FROM river_job j
		  JOIN unnest($1::bigint[], $2::int[], $3::timestamptz[]) AS u(id, attempt, at)
		    ON j.id = u.id AND j.attempt = u.attempt AND j.attempted_at IS NOT DISTINCT FROM u.at
		 WHERE j.state = 'running'
		 ORDER BY j.id
		   FOR UPDATE OF j`, ids, attempts, ats)
	b.Queue(`
		SELECT id, status, workflow, queue, priority, max_attempts FROM braid_tasks
		 WHERE id = ANY(ARRAY(`+lockTasks+`))
		 ORDER BY created_at DESC, id DESC
		   FOR UPDATE`, lockArgs...)
	// The jobs of the turns that end (completed, suspended, idle) complete
	// in the same round trip, each only while it runs the outcome's
	// attempt, which the first statement has just locked: whatever else
	// the batch writes, their jobs are done.
	var completing []*rivertype.JobRow
	for _, o := range batch {
		switch o.kind {
		case outcomeComplete, outcomeSuspend, outcomeIdle:
			completing = append(completing, o.job)
		}
	}
	e.queue.QueueComplete(b, completing)
	br := tx.SendBatch(ctx, b)
	defer func() { _ = br.Close() }()
	rows, err := br.Query()
	if err != nil {
		return fmt.Errorf("workflow: locking %d turn jobs: %w", len(batch), err)
	}
	locked, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return fmt.Errorf("workflow: locking %d turn jobs: %w", len(batch), err)
	}
	for _, o := range batch {
		if slices.Contains(locked, o.job.ID) {
			o.owned = true
			st.owned = append(st.owned, o)
			st.byTask[o.taskID] = o
		}
	}
	st.status, st.turnOf = map[uuid.UUID]string{}, map[uuid.UUID]turn{}
	rows, err = br.Query()
	if err != nil {
		return fmt.Errorf("workflow: locking %d tasks: %w", len(tasks), err)
	}
	defer rows.Close()
	for rows.Next() {
		tr, status, err := scanTaskTurn(rows)
		if err != nil {
			return fmt.Errorf("workflow: locking %d tasks: %w", len(tasks), err)
		}
		st.status[tr.taskID], st.turnOf[tr.taskID] = status, tr
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("workflow: locking %d tasks: %w", len(tasks), err)
	}
	rows.Close()
	return br.Close()
}

// scanTaskTurn reads a task's id, status, workflow, queue, priority and
// max_attempts: the turn it would be given, and its status.
func scanTaskTurn(rows pgx.Rows) (turn, string, error) {
	var tr turn
	var status string
	var prio int16
	err := rows.Scan(&tr.taskID, &status, &tr.workflow, &tr.queue, &prio, &tr.maxAttempts)
	tr.priority = queue.Priority(prio)
	return tr, status, err
}

// isRunnable reports whether a task of this status takes turns. A task
// is pending from the moment it is given a turn until it finishes or
// waits; "running" is what the inspection shows while its turn runs (older
// versions wrote it).
func isRunnable(status string) bool { return status == "pending" || status == "running" }

// insertSpawns creates the children the batch's live turns started, and
// their first turns. A child that exists already (a turn that ran twice)
// is left alone. It also creates the nodes of the DAG roots whose turn
// found none (see dagSpec.result): the turn's outcome is fenced on its
// attempt, so they are created once.
func (e *Engine) insertSpawns(ctx context.Context, tx pgx.Tx, st *batchState) error {
	var (
		ids, runIDs, parents            []uuid.UUID
		keys, workflows, inputs, queues []string
		maxAttempts, remaining, poss    []int32
		calls                           []string
		statuses                        []string
		prios                           []int16
		defs                            = map[uuid.UUID]*definition{}
		owners                          = map[uuid.UUID]*outcome{}
		inputOf                         = map[uuid.UUID]json.RawMessage{}
		dags                            []dagRoot
	)
	for _, o := range st.owned {
		if o.t == nil || (o.kind != outcomeComplete && o.kind != outcomeSuspend) || !isRunnable(st.status[o.taskID]) {
			continue
		}
		if o.t.nodes != nil && o.kind == outcomeSuspend {
			dags = append(dags, dagRoot{spec: o.t.nodes, runID: o.t.runID, rootID: o.taskID, input: string(o.t.input), by: o})
		}
		for i := range o.t.spawns {
			s := &o.t.spawns[i]
			id := mustID()
			ids = append(ids, id)
			runIDs = append(runIDs, o.t.runID)
			parents = append(parents, o.taskID)
			keys = append(keys, s.key)
			workflows = append(workflows, s.def.name)
			inputs = append(inputs, string(s.input))
			maxAttempts = append(maxAttempts, int32(s.def.maxAttempts))
			queues = append(queues, s.def.queue)
			prios = append(prios, int16(s.def.priority))
			// A DAG child waits for its nodes from the start, as a DAG
			// run's root does.
			if s.def.dag != nil {
				statuses, remaining = append(statuses, "waiting"), append(remaining, int32(len(s.def.dag.nodes)))
			} else {
				statuses, remaining = append(statuses, "pending"), append(remaining, 0)
			}
			poss, calls = append(poss, int32(s.position)), append(calls, s.call)
			defs[id] = s.def
			owners[id] = o
			inputOf[id] = s.input
		}
	}
	if len(ids) == 0 {
		return e.insertNodes(ctx, tx, st, dags)
	}
	rows, err := tx.Query(ctx, `
		INSERT INTO braid_tasks (id, run_id, parent_task_id, key, workflow, status, input, max_attempts, queue, priority, remaining, position, call)
		SELECT unnest($1::uuid[]), unnest($2::uuid[]), unnest($3::uuid[]), unnest($4::text[]), unnest($5::text[]), unnest($10::text[]),
		       unnest($6::text[])::jsonb, unnest($7::int[]), unnest($8::text[]), unnest($9::smallint[]), unnest($11::int[]),
		       unnest($12::int[]), unnest($13::text[])
		ON CONFLICT (parent_task_id, key) WHERE parent_task_id IS NOT NULL DO NOTHING
		RETURNING id`, pgIDs(ids), pgIDs(runIDs), pgIDs(parents), keys, workflows, inputs, maxAttempts, queues, prios, statuses, remaining, poss, calls)
	if err != nil {
		return fmt.Errorf("workflow: creating %d children: %w", len(ids), err)
	}
	created, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return fmt.Errorf("workflow: creating %d children: %w", len(ids), err)
	}
	for _, id := range created {
		d := defs[id]
		o := owners[id]
		if d.dag != nil {
			dags = append(dags, dagRoot{spec: d.dag, runID: o.t.runID, rootID: id, input: string(inputOf[id]), by: o})
			continue
		}
		st.fresh = append(st.fresh, turn{taskID: id, workflow: d.name, queue: d.queue, priority: d.priority, maxAttempts: d.maxAttempts,
			by: o, link: newTurnLink(o.traceParent(), linkSpawning)})
	}
	return e.insertNodes(ctx, tx, st, dags)
}

// insertNodes creates the nodes of the DAG roots of insertSpawns, and
// their first turns.
func (e *Engine) insertNodes(ctx context.Context, tx pgx.Tx, st *batchState, dags []dagRoot) error {
	if len(dags) == 0 {
		return nil
	}
	turns, err := e.createNodesTx(ctx, tx, dags, &st.finished)
	if err != nil {
		return err
	}
	for i := range turns {
		turns[i].link = newTurnLink(turns[i].by.traceParent(), linkSpawning)
	}
	st.fresh = append(st.fresh, turns...)
	return nil
}

// queueFinishTasks queues on b the statement that records the batch's
// completed and failed tasks, with the attempt that finished them; once b
// is sent, the settlements it returns hold them, to settle.
func (e *Engine) queueFinishTasks(b *pgx.Batch, st *batchState) *[]settlement {
	var (
		ids      []uuid.UUID
		statuses []string
		outputs  [][]byte
		errs     [][]byte
		attempts []int32
		jobIDs   []int64
		ats      []*time.Time
	)
	for _, o := range st.owned {
		var status string
		switch o.kind {
		case outcomeComplete:
			status = "completed"
		case outcomeFail:
			status = "failed"
		default:
			continue
		}
		if !isRunnable(st.status[o.taskID]) {
			continue
		}
		ids = append(ids, o.taskID)
		statuses = append(statuses, status)
		outputs = append(outputs, nullBytes(o.output))
		errs = append(errs, o.errJSON)
		attempts = append(attempts, int32(o.job.Attempt))
		jobIDs = append(jobIDs, o.job.ID)
		ats = append(ats, o.job.AttemptedAt)
	}
	settled := new([]settlement)
	if len(ids) == 0 {
		return settled
	}
	b.Queue(`
		UPDATE braid_tasks t
		   SET status = u.status, output = u.output, error = u.error, remaining = 0,
		       attempt = u.attempt, job_id = u.job_id, turns = t.turns + 1,
		       started_at = coalesce(t.started_at, u.at, braid_now()), finished_at = braid_now(), updated_at = braid_now()
		  FROM unnest($1::uuid[], $2::text[], $3::jsonb[], $4::jsonb[], $5::int[], $6::bigint[], $7::timestamptz[])
		       AS u(id, status, output, error, attempt, job_id, at)
		 WHERE t.id = u.id AND t.status IN ('pending', 'running')
		RETURNING t.id, t.run_id, t.parent_task_id, u.status, u.output, u.error, u.at, t.key, `+nodeDAGSQL,
		pgIDs(ids), statuses, outputs, errs, attempts, jobIDs, ats).Query(func(rows pgx.Rows) error {
		var err error
		*settled, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (settlement, error) {
			var s settlement
			var dag *string
			err := row.Scan(&s.taskID, &s.runID, &s.parentID, &s.status, &s.output, &s.errJSON, &s.startedAt, &s.key, &dag)
			if dag != nil {
				s.dag = *dag
			}
			return s, err
		})
		if err != nil {
			return fmt.Errorf("workflow: finishing %d tasks: %w", len(ids), err)
		}
		return nil
	})
	return settled
}

func nullBytes(b json.RawMessage) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// suspendTasks records the batch's suspended tasks: their new delays, then
// each task waiting with the count of its children not yet finished,
// counted after the batch's own finished children were settled. A task
// whose awaited children have all finished continues at once: it gets its
// next turn in this transaction.
func (e *Engine) suspendTasks(ctx context.Context, tx pgx.Tx, suspends []*outcome, st *batchState) ([]waitSpan, error) {
	if len(suspends) == 0 {
		return nil, nil
	}
	var (
		wTasks, wRuns            []uuid.UUID
		wNames, wKinds, wOn, wFi []string
		wAfter                   []int64
		wPos                     []int32
		wUntil, wSince           []*time.Time
		ids                      []uuid.UUID
		waits                    []bool
		spans                    []*string
		attempts                 []int32
		jobIDs                   []int64
		ats                      []*time.Time
		roots                    []uuid.UUID
	)
	for _, o := range suspends {
		t := o.t
		if w := t.wait; w != nil && !w.existing {
			var until *time.Time
			if !w.until.IsZero() {
				u := w.until
				until = &u
			}
			wTasks, wRuns = append(wTasks, o.taskID), append(wRuns, t.runID)
			wNames, wKinds, wOn, wFi = append(wNames, w.name), append(wKinds, w.kind), append(wOn, w.on), append(wFi, w.filter)
			// A wait's started_at is when its attempt began; an event
			// wait's in a turn that ran before (see ranBefore), when the
			// turn was given, so that it loses none of the events
			// published during the earlier attempts.
			since := o.job.AttemptedAt
			if w.kind == "event" && ranBefore(o.job) {
				given := o.job.CreatedAt
				since = &given
			}
			wAfter, wUntil, wSince = append(wAfter, timeoutMicros(w.after)), append(wUntil, until), append(wSince, since)
			wPos = append(wPos, int32(w.position))
		}
		var span *string
		if tp := o.traceParent(); tp != "" {
			span = &tp
		}
		ids = append(ids, o.taskID)
		waits = append(waits, t.waitChildren && t.wait == nil)
		spans = append(spans, span)
		attempts = append(attempts, int32(o.job.Attempt))
		jobIDs = append(jobIDs, o.job.ID)
		ats = append(ats, o.job.AttemptedAt)
		if t.parentID == nil {
			roots = append(roots, t.runID)
		}
	}
	if len(wTasks) > 0 {
		// A delay is due after its duration or at its time; a wait on a
		// message, after its timeout when it has one. An event wait's
		// started_at is when the turn that suspends on it began (see
		// above), or, when later, when the task's last wait on the topic
		// took its event (the turn may have been given in that
		// transaction, which began before the event was published): the
		// wait sees the events published since, and never one that the
		// task took before. The earliest timer recorded is read back for
		// the delay processor's NOTIFY.
		var due *time.Time
		if err := tx.QueryRow(ctx, `
			WITH w AS (
			    INSERT INTO braid_steps (task_id, name, kind, status, resume_at, attempts, wait_on, wait_run, wait_filter, started_at, position)
			    SELECT u.task_id, u.name, u.kind, 'waiting',
			           CASE WHEN u.until IS NOT NULL THEN u.until
			                WHEN u.kind = 'delay' OR u.after > 0 THEN braid_now() + u.after * interval '1 microsecond' END,
			           1, nullif(u.wait_on, ''), CASE WHEN u.kind = 'signal' THEN u.run_id END, nullif(u.filter, ''),
			           CASE WHEN u.kind = 'event'
			                THEN greatest(u.since + (braid_now() - now()),
			                              (SELECT max(p.finished_at) FROM braid_steps p
			                                WHERE p.task_id = u.task_id AND p.kind = 'event' AND p.wait_on = u.wait_on AND p.status = 'completed'))
			                ELSE u.since + (braid_now() - now()) END,
			           u.position
			      FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bigint[], $5::timestamptz[], $6::text[], $7::uuid[], $8::text[], $9::timestamptz[], $10::int[])
			           AS u(task_id, name, kind, after, until, wait_on, run_id, filter, since, position)
			    ON CONFLICT (task_id, name) DO NOTHING
			    RETURNING resume_at
			)
			SELECT min(resume_at) FROM w`, pgIDs(wTasks), wNames, wKinds, wAfter, wUntil, wOn, pgIDs(wRuns), wFi, wSince, wPos).Scan(&due); err != nil {
			return nil, fmt.Errorf("workflow: recording %d waits: %w", len(wTasks), err)
		}
		if due != nil && (st.delayDue == nil || due.Before(*st.delayDue)) {
			st.delayDue = due
		}
	}
	rows, err := tx.Query(ctx, `
		UPDATE braid_tasks t
		   SET status = CASE WHEN u.wait AND c.n = 0 THEN 'pending' ELSE 'waiting' END,
		       remaining = CASE WHEN u.wait THEN c.n ELSE 0 END,
		       waiting_since = CASE WHEN u.wait AND c.n > 0 THEN braid_now() END,
		       suspended_span = u.span, attempt = u.attempt, job_id = u.job_id, turns = t.turns + 1,
		       started_at = coalesce(t.started_at, u.at, braid_now()), updated_at = braid_now()
		  FROM unnest($1::uuid[], $2::bool[], $3::text[], $4::int[], $5::bigint[], $6::timestamptz[])
		       AS u(id, wait, span, attempt, job_id, at)
		  CROSS JOIN LATERAL (SELECT count(*)::int AS n FROM braid_tasks k
		                       WHERE k.parent_task_id = u.id AND k.status NOT IN `+finalStatuses+`) c
		 WHERE t.id = u.id AND t.status IN ('pending', 'running')
		RETURNING t.id, t.status, t.workflow, t.queue, t.priority, t.max_attempts`,
		pgIDs(ids), waits, spans, attempts, jobIDs, ats)
	if err != nil {
		return nil, fmt.Errorf("workflow: suspending %d tasks: %w", len(ids), err)
	}
	defer rows.Close()
	for rows.Next() {
		tr, status, err := scanTaskTurn(rows)
		if err != nil {
			return nil, fmt.Errorf("workflow: suspending %d tasks: %w", len(ids), err)
		}
		if status == "pending" {
			// Every awaited child finished during the turn: continue now.
			tr.by = st.byTask[tr.taskID]
			st.wake = append(st.wake, tr)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("workflow: suspending %d tasks: %w", len(ids), err)
	}
	rows.Close()
	if len(roots) > 0 {
		// The runs are read by key: the status is tested as no index
		// condition (IS TRUE), which the batch's generic plan could
		// otherwise prefer while the table is young (see "Plans of the
		// turns' statements").
		if _, err := tx.Exec(ctx, `
			UPDATE braid_runs SET status = 'waiting', started_at = coalesce(started_at, braid_now()), updated_at = braid_now()
			 WHERE id = ANY($1) AND (status IN ('pending', 'running')) IS TRUE`, roots); err != nil {
			return nil, fmt.Errorf("workflow: marking %d runs waiting: %w", len(roots), err)
		}
	}
	// A wait whose message came before it ends at once.
	return e.takeMessagesTx(ctx, tx, messageWaits(suspends), st)
}

// recordAttemptErrors queues on b the error of each failed attempt that
// River retries, kept on its task for operators.
func (e *Engine) recordAttemptErrors(b *pgx.Batch, st *batchState) {
	var ids []uuid.UUID
	var errs [][]byte
	for _, o := range st.owned {
		if o.kind == outcomeFailAttempt && isRunnable(st.status[o.taskID]) {
			ids = append(ids, o.taskID)
			errs = append(errs, o.errJSON)
		}
	}
	if len(ids) == 0 {
		return
	}
	b.Queue(`
		UPDATE braid_tasks t SET error = u.error, updated_at = braid_now()
		  FROM unnest($1::uuid[], $2::jsonb[]) AS u(id, error)
		 WHERE t.id = u.id AND t.status IN ('pending', 'running')`, pgIDs(ids), errs)
}

// claimContinuations claims, for each owned turn of the batch, one of the
// turns its outcome made runnable (a child it started, the parent it
// woke, its own next turn) in the queue of the turn's own job, when this
// process runs that workflow and is not stopping; or else the next turn
// waiting in its queue; never one of a queue River has paused; but only for
// an outcome whose own turn's result is on record once the batch commits
// (mayGoOn). The turn's worker runs the claimed turn as soon as the batch
// commits, in the worker slot it holds, without a trip through River's
// fetch loop. The claims go in the batch's last round trip, with the
// statements queued on late and the commit.
func (e *Engine) claimContinuations(ctx context.Context, tx *pipeTx, inserted []insertedTurn, st *batchState, late *pgx.Batch, stopping bool) error {
	var (
		claims         []queue.ClaimedInsert
		tasks, parents []uuid.UUID
		linked         []insertedTurn
	)
	picked := map[uuid.UUID]*outcome{}
	taken := map[*outcome]bool{}
	for _, it := range inserted {
		// enqueueTurns left to this batch the turn to claim of each
		// outcome that may claim one: it is inserted claimed here.
		if !it.claim {
			continue
		}
		o := it.by
		taken[o] = true
		args, err := json.Marshal(taskArgs{Workflow: it.workflow})
		if err != nil {
			return fmt.Errorf("workflow: encoding a turn of workflow %q: %w", it.workflow, err)
		}
		c := queue.ClaimedInsert{
			Kind: TaskKind, EncodedArgs: args, Queue: it.tr.queue, Priority: int(it.tr.priority), MaxAttempts: it.tr.maxAttempts,
			UniqueKey: turnKey(it.taskID), UniqueStates: turnLiveStates,
		}
		if it.first {
			c.Tags = firstTurnTags
		}
		claims, tasks = append(claims, c), append(tasks, it.taskID)
		if it.link != nil {
			linked = append(linked, it)
		}
		// A claimed turn runs its first attempt.
		if mayHaveChildren(it.first, e.registry[it.workflow]) {
			parents = append(parents, it.taskID)
		}
		picked[it.taskID] = o
	}
	// The claimed turns, their links, and their tasks, read as they stand
	// once this batch has written them, go in the same round trip, so that
	// the turns start without a load of their own: nothing else runs their
	// tasks once the batch commits.
	var claimed []*rivertype.JobRow
	var loaded map[uuid.UUID]*loadedTask
	if len(claims) > 0 {
		if err := e.queue.QueueInsertClaimed(late, claims, func(jobs []*rivertype.JobRow) { claimed = jobs }); err != nil {
			return fmt.Errorf("workflow: claiming %d turns: %w", len(claims), err)
		}
		if err := recordClaimedLinks(late, linked); err != nil {
			return err
		}
		loaded = queueLoad(late, tasks, parents)
	}
	// A worker whose outcome made nothing runnable takes the next turn
	// waiting in its queue, as River's fetch would give its slot, without
	// waiting for the fetch loop. (The turns inserted claimed above are
	// never available, so this claim cannot take one.)
	idle := map[string][]*outcome{}
	var queues []string
	for _, o := range st.owned {
		if !stopping && !taken[o] && o.mayGoOn() {
			if len(idle[o.job.Queue]) == 0 {
				queues = append(queues, o.job.Queue)
			}
			idle[o.job.Queue] = append(idle[o.job.Queue], o)
		}
	}
	for _, q := range queues {
		e.queue.QueueClaimAvailable(late, q, len(idle[q]), []string{TaskKind}, func(jobs []*rivertype.JobRow) {
			for i, j := range jobs {
				idle[q][i].next = j
			}
		})
	}
	if err := tx.commitWith(ctx, late); err != nil {
		return fmt.Errorf("workflow: finishing the batch (runs, attempt errors, claims) and committing: %w", err)
	}
	for _, j := range claimed {
		// Each claimed turn is the one this batch inserted for its task,
		// which its unique key names. One inserted available, its queue
		// paused, is River's to run once the queue is resumed.
		if len(j.UniqueKey) != len(uuid.UUID{}) {
			continue
		}
		task := uuid.UUID(j.UniqueKey)
		if o := picked[task]; o != nil {
			if j.State == rivertype.JobStateRunning {
				o.next, o.nextTask = j, loaded[task]
			}
			delete(picked, task)
		}
	}
	for task := range picked {
		// The task had a live turn already (a late attempt that
		// suspended after its job was rescued and retried): that turn
		// runs it.
		e.logger.WarnContext(ctx, "workflow: task already has a live turn; not inserting another", "task.id", task)
	}
	return nil
}
