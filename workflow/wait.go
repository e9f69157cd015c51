package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"

	"github.com/braidflow/braid/queue"
)

// A wait on a message is a step of kind signal or event, recorded waiting
// when its task suspends, like a delay. It has one or two wake sources:
// the message, and the timer of its timeout when it has one. Whichever
// comes first settles the step (completed with the message as its output,
// or fired by the delay processor) and gives the task its next turn, in
// one transaction fenced on the step still waiting; the other finds it
// settled and does nothing (invariant 2).
//
// A message and the suspension of a task that waits for it meet under one
// transaction-scoped advisory lock: the run's mailbox lock for a signal,
// the topic's lock for an event. A sender or publisher takes it before
// anything else; a batch of outcomes takes the locks of its waits before
// its turn jobs (the first entry of the lock order), or leaves out, to be
// tried again alone until it has the lock, an outcome whose lock another
// transaction holds. So either the message
// commits first, and the suspension finds it in the mailbox (or among the
// topic's recent events) and wakes the task at once, or the suspension
// commits first, and the message finds the wait. No message is lost
// between the two.

// MessageNameMax bounds a signal's name and an event's topic, in bytes.
const MessageNameMax = 200

// checkMessageName refuses an empty or too long signal name or topic, and
// one that PostgreSQL's text cannot hold (not UTF-8, or with a NUL): such a
// name would fail only later, in the batch that records the wait.
func checkMessageName(what, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("workflow: %s is empty", what)
	case len(name) > MessageNameMax:
		return fmt.Errorf("workflow: %s %.40q… is %d bytes, over the limit of %d", what, name, len(name), MessageNameMax)
	case !isText(name):
		return fmt.Errorf("workflow: %s %q is not UTF-8 text without NUL characters", what, name)
	}
	return nil
}

// waitMessage is the durable call behind WaitSignal and WaitEvent: it
// returns the recorded message, reports a recorded timeout (ok false), or
// suspends the task on w.
func waitMessage[T any](t *Task, w *pendingWait) (out T, ok bool, err error) {
	if t.suspended {
		return out, false, ErrSuspended
	}
	what := w.kind + " " + fmt.Sprintf("%q", w.on)
	if w.after < 0 {
		return out, false, fmt.Errorf("workflow: wait on %s has a negative timeout %s", what, w.after)
	}
	name := t.uniqueName(w.kind + ":" + w.on)
	w.name = name
	p, err := t.enter(w.kind, name)
	if err != nil {
		return out, false, err
	}
	w.position = p
	if rec := t.steps[name]; rec != nil {
		if rec.kind != w.kind {
			return out, false, fmt.Errorf("workflow: %q is recorded as a %s, not a wait on a %s: %w", name, rec.kind, w.kind, errNotDeterministic)
		}
		switch rec.status {
		case "completed":
			if len(rec.output) > 0 {
				if err := json.Unmarshal(rec.output, &out); err != nil {
					return out, false, &EncodeError{What: "the payload of the " + what + " that woke " + fmt.Sprintf("%q", name), Err: err}
				}
			}
			return out, true, nil
		case "fired":
			return out, false, nil
		case "cancelled":
			return out, false, fmt.Errorf("workflow: wait on %s: %w", what, ErrCancelled)
		}
		w.existing = true
	}
	t.wait = w
	return out, false, t.suspend()
}

// messageLockSQL takes the advisory locks, transaction-scoped, of the
// mailboxes and topics named in $1 (as messageLock makes them), in the
// order of their keys, so that two transactions taking several never
// deadlock.
const messageLockSQL = `
	SELECT pg_advisory_xact_lock(k)
	  FROM (SELECT DISTINCT hashtextextended(n, 0) AS k FROM unnest($1::text[]) AS n ORDER BY 1) AS l`

// mailboxLock names the lock of a run's mailbox, topicLock the lock of a
// topic.
func mailboxLock(runID uuid.UUID) string { return "braid.mailbox/" + runID.String() }
func topicLock(topic string) string      { return "braid.topic/" + topic }

// messageTryLockSQL is messageLockSQL that waits for no lock: it returns
// each name of $1 whose lock another transaction holds.
const messageTryLockSQL = `
	SELECT n FROM (SELECT DISTINCT n, hashtextextended(n, 0) AS k FROM unnest($1::text[]) AS n ORDER BY 2) AS l
	 WHERE NOT pg_try_advisory_xact_lock(k)`

// checkReadCommitted refuses, for SignalTx and PublishTx (what), a
// caller's transaction whose isolation is not READ COMMITTED. Under
// REPEATABLE READ or SERIALIZABLE, its statements read the snapshot taken
// by its first one, and not the waits that committed since: a wait that
// its task recorded while the send waited for the mailbox's or topic's
// lock would find no message, and the send would find no wait, leaving
// the message where no one looks for it. (PostgreSQL's READ UNCOMMITTED is
// READ COMMITTED.)
func checkReadCommitted(ctx context.Context, tx pgx.Tx, what string) error {
	var level string
	if err := tx.QueryRow(ctx, `SELECT current_setting('transaction_isolation')`).Scan(&level); err != nil {
		return fmt.Errorf("workflow: %s: reading the isolation of the transaction: %w", what, err)
	}
	switch level {
	case "read committed", "read uncommitted":
		return nil
	}
	return fmt.Errorf("workflow: %s needs a READ COMMITTED transaction, and tx is %s: its snapshot does not show the waits recorded since it was taken, so nothing is sent", what, level)
}

// messageLock names the lock that o's wait on a message needs, if any.
func messageLock(o *outcome) (string, bool) {
	if o.kind != outcomeSuspend || o.t == nil || o.t.wait == nil {
		return "", false
	}
	switch w := o.t.wait; w.kind {
	case "signal":
		return mailboxLock(o.t.runID), true
	case "event":
		return topicLock(w.on), true
	}
	return "", false
}

// lockMessages takes the locks that the waits on messages of a batch's
// suspending outcomes need; see the comment at the top of this file. It
// waits for no lock that another transaction holds (a caller's SignalTx
// or PublishTx still open): it returns the outcomes that need one, which
// the batch leaves out, to be tried again each on its own, beside the
// batches (see flush). So one open transaction of a caller delays the
// outcomes that wait on its mailbox or topic, and no others.
func (e *Engine) lockMessages(ctx context.Context, tx pgx.Tx, batch []*outcome) (busy []*outcome, err error) {
	var names []string
	for _, o := range batch {
		if name, ok := messageLock(o); ok {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	rows, err := tx.Query(ctx, messageTryLockSQL, names)
	if err != nil {
		return nil, fmt.Errorf("workflow: locking %d mailboxes and topics: %w", len(names), err)
	}
	held, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("workflow: locking %d mailboxes and topics: %w", len(names), err)
	}
	for _, o := range batch {
		if name, ok := messageLock(o); ok && slices.Contains(held, name) {
			busy = append(busy, o)
		}
	}
	return busy, nil
}

// delivery is a message that settles one waiting step.
type delivery struct {
	taskID  uuid.UUID
	step    string
	payload []byte
	// tp is the traceparent of the send or publish, for the link of the
	// turn it gives.
	tp   string
	kind string // "signal" or "event"
}

// settleWaitSQL completes waiting steps with their messages, fenced on
// each step still waiting, and returns the tasks whose step it settled.
const settleWaitSQL = `
	UPDATE braid_steps s
	   SET status = 'completed', output = u.payload, woken_by = nullif(u.tp, ''), finished_at = braid_clock()
	  FROM unnest($1::uuid[], $2::text[], $3::jsonb[], $4::text[]) AS u(task_id, name, payload, tp)
	 WHERE s.task_id = u.task_id AND s.name = u.name AND s.status = 'waiting'
	RETURNING s.task_id, s.name, s.created_at, s.finished_at`

// deliverTx settles waiting steps with their messages and gives their
// tasks, which must be waiting, their next turns; it returns the turns,
// with the wait spans to record once tx commits. The tasks are locked
// first, in the lock order, unless tx holds them already (locked). A
// delivery whose step is no longer waiting (its timeout fired, the task
// was cancelled) is dropped: the caller learns so from the turns.
func (e *Engine) deliverTx(ctx context.Context, tx pgx.Tx, ds []delivery, locked bool) ([]turn, []waitSpan, error) {
	if len(ds) == 0 {
		return nil, nil, nil
	}
	var (
		tasks, ids []uuid.UUID
		names, tps []string
		payloads   [][]byte
		byKey      = map[stepKey]delivery{}
	)
	for _, d := range ds {
		if !slices.Contains(tasks, d.taskID) {
			tasks = append(tasks, d.taskID)
		}
		ids, names, payloads, tps = append(ids, d.taskID), append(names, d.step), append(payloads, d.payload), append(tps, d.tp)
		byKey[stepKey{d.taskID, d.step}] = d
	}
	if !locked {
		if _, err := tx.Exec(ctx, `
			SELECT 1 FROM braid_tasks WHERE id = ANY($1) ORDER BY created_at DESC, id DESC FOR UPDATE`, tasks); err != nil {
			return nil, nil, fmt.Errorf("workflow: locking %d waiting tasks: %w", len(tasks), err)
		}
	}
	rows, err := tx.Query(ctx, settleWaitSQL, ids, names, payloads, tps)
	if err != nil {
		return nil, nil, fmt.Errorf("workflow: settling %d waits: %w", len(ids), err)
	}
	type settledWait struct {
		key        stepKey
		start, end time.Time
	}
	settled, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (settledWait, error) {
		var s settledWait
		return s, r.Scan(&s.key.taskID, &s.key.name, &s.start, &s.end)
	})
	if err != nil {
		return nil, nil, fmt.Errorf("workflow: settling %d waits: %w", len(ids), err)
	}
	if len(settled) == 0 {
		return nil, nil, nil
	}
	woken := make([]uuid.UUID, len(settled))
	for i, s := range settled {
		woken[i] = s.key.taskID
	}
	rows, err = tx.Query(ctx, `
		UPDATE braid_tasks t SET status = 'pending', updated_at = braid_now()
		 WHERE t.id = ANY($1) AND t.status = 'waiting'
		RETURNING t.id, t.status, t.workflow, t.queue, t.priority, t.max_attempts, t.run_id,
		          (SELECT r.trace_parent FROM braid_runs r WHERE r.id = t.run_id)`, woken)
	if err != nil {
		return nil, nil, fmt.Errorf("workflow: waking %d tasks: %w", len(woken), err)
	}
	defer rows.Close()
	type wokenTask struct {
		tr    turn
		runID uuid.UUID
		tp    *string
	}
	byTask := map[uuid.UUID]wokenTask{}
	for rows.Next() {
		var w wokenTask
		var status string
		var prio int16
		if err := rows.Scan(&w.tr.taskID, &status, &w.tr.workflow, &w.tr.queue, &prio, &w.tr.maxAttempts, &w.runID, &w.tp); err != nil {
			return nil, nil, fmt.Errorf("workflow: waking tasks: %w", err)
		}
		w.tr.priority = queue.Priority(prio)
		byTask[w.tr.taskID] = w
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("workflow: waking tasks: %w", err)
	}
	rows.Close()
	var turns []turn
	var spans []waitSpan
	for _, s := range settled {
		w, ok := byTask[s.key.taskID]
		if !ok {
			continue
		}
		d := byKey[s.key]
		tr := w.tr
		tr.link = newTurnLink(d.tp, linkMessage(d.kind))
		turns = append(turns, tr)
		spans = append(spans, waitSpan{runID: w.runID, taskID: tr.taskID, workflow: tr.workflow, traceParent: w.tp,
			kind: d.kind, delay: s.key.name, start: s.start, end: s.end})
	}
	return turns, spans, nil
}

// linkMessage is the kind of link a turn woken by a message of kind makes
// to the span of its send or publish.
func linkMessage(kind string) string {
	if kind == "signal" {
		return linkSignal
	}
	return linkEvent
}

// messageWait is a wait on a message that a batch records as its task
// suspends.
type messageWait struct {
	o *outcome
	w *pendingWait
}

// takeMessagesTx wakes, in the batch that records them, the waits on
// messages whose message is already there: the oldest undelivered signal
// of its name in the run's mailbox, or the first matching event published
// on its topic since the turn that suspended began. The batch holds the
// tasks, which it has just set waiting, and the mailbox and topic locks.
func (e *Engine) takeMessagesTx(ctx context.Context, tx pgx.Tx, waits []messageWait, st *batchState) ([]waitSpan, error) {
	if len(waits) == 0 {
		return nil, nil
	}
	var ds []delivery
	b := &pgx.Batch{}
	var signals []messageWait
	for _, mw := range waits {
		switch mw.w.kind {
		case "signal":
			b.Queue(takeSignalSQL, mw.o.taskID, mw.w.name, mw.o.t.runID, mw.w.on)
			signals = append(signals, mw)
		case "event":
			d, ok, err := e.matchPublished(ctx, tx, mw)
			if err != nil {
				return nil, err
			}
			if ok {
				ds = append(ds, d)
			}
		}
	}
	if len(signals) > 0 {
		br := tx.SendBatch(ctx, b)
		for _, mw := range signals {
			d := delivery{taskID: mw.o.taskID, step: mw.w.name, kind: "signal"}
			var tp *string
			err := br.QueryRow().Scan(&d.payload, &tp)
			if errors.Is(err, pgx.ErrNoRows) {
				continue
			}
			if err != nil {
				_ = br.Close()
				return nil, fmt.Errorf("workflow: reading the mailbox of run %s: %w", mw.o.t.runID, err)
			}
			if tp != nil {
				d.tp = *tp
			}
			ds = append(ds, d)
		}
		if err := br.Close(); err != nil {
			return nil, fmt.Errorf("workflow: reading mailboxes: %w", err)
		}
	}
	turns, spans, err := e.deliverTx(ctx, tx, ds, true)
	if err != nil {
		return nil, err
	}
	for i := range turns {
		turns[i].by = st.byTask[turns[i].taskID]
	}
	st.wake = append(st.wake, turns...)
	return spans, nil
}

// ranBefore reports whether the turn that job runs has run before, in an
// attempt that failed or whose process died (its attempt is past the
// first), or that was put back to run later (River counts the snoozes in
// its metadata, and gives the attempt back). Such a turn's attempt did not
// begin the turn.
func ranBefore(job *rivertype.JobRow) bool {
	if job.Attempt > 1 {
		return true
	}
	var md struct {
		Snoozes int64 `json:"snoozes"`
	}
	_ = json.Unmarshal(job.Metadata, &md)
	return md.Snoozes > 0
}

// messageWaits lists the waits on messages among suspends.
func messageWaits(suspends []*outcome) []messageWait {
	var ws []messageWait
	for _, o := range suspends {
		if w := o.t.wait; w != nil && (w.kind == "signal" || w.kind == "event") {
			ws = append(ws, messageWait{o: o, w: w})
		}
	}
	return ws
}
