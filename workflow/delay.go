package workflow

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/braidflow/braid/leases"
	"github.com/braidflow/braid/queue"
)

// processDelays is the delay processor. It runs while this process holds
// the lease braid:delays: it wakes due delays in batches, each batch in one
// transaction with the turns it inserts, then cancels the runs whose
// deadline has passed (cancelOverdueRuns, which wakes the delays that fall
// due meanwhile between two cancels that wait on locks), then sleeps until
// the earliest waiting delay or deadline (at most DelayPollInterval), or
// until a NOTIFY says a nearer one was written. A batch that fails is
// retried one delay at a time, and a delay (or a run's cancel) that fails
// on its own is set aside for a while (setAside), so that one bad row never
// holds back the others: it neither takes a place in their batches nor
// keeps the processor from its next due time. When the database itself
// fails, the processor sleeps a full poll interval rather than spin.
//
// The NOTIFYs only hasten it. They arrive on a connection of their own
// (listenDelays), which may be unavailable for a while (a server at its
// connection limit, a proxy that drops idle connections); meanwhile the
// processor polls every DelayPollInterval, and the connection is opened
// again in the background. Every statement of a pass runs on the pool, so
// nothing but the lease ends the processor.
func (e *Engine) processDelays(ctx context.Context, l *leases.Lease) error {
	e.logger.InfoContext(ctx, "workflow: delay processor started", "lease.holder", l.Holder, "lease.generation", l.Generation)
	defer e.logger.InfoContext(context.WithoutCancel(ctx), "workflow: delay processor stopped", "lease.holder", l.Holder)

	wake, stopListening := e.listenDelays(ctx)
	defer stopListening()
	p := &delayPass{e: e}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		n, err := p.fireDueDelays(ctx)
		failed := false
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			e.logger.WarnContext(ctx, "workflow: waking due delays; retrying them one by one", "error", err)
			n, failed = p.fireDueDelaysOneByOne(ctx)
		}
		cancelled, full, cancelFailed := p.cancelOverdueRuns(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if (n >= e.cfg.DelayBatchSize && !failed) || (full && cancelled > 0 && !cancelFailed) {
			continue // more are due
		}
		failed = failed || cancelFailed
		n += cancelled
		wait := e.cfg.DelayPollInterval
		delays, nextDelay := p.delays.held(time.Now())
		runs, nextRun := p.runs.held(time.Now())
		tasks, names := stepKeyArrays(delays)
		var next *float64
		err = e.pool.QueryRow(ctx, nextDueSQL, tasks, names, pgIDs(runs)).Scan(&next)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			e.logger.WarnContext(ctx, "workflow: finding the next delay or deadline failed; looking again after the poll interval", "error", err)
			next, failed = nil, true
		}
		if next != nil && !failed {
			if d := time.Duration(*next * float64(time.Second)); d < wait {
				wait = d
			}
		}
		// A row set aside may be tried again then.
		for _, at := range []time.Time{nextDelay, nextRun} {
			if d := time.Until(at); !at.IsZero() && d < wait {
				wait = max(d, delaySkippedPause)
			}
		}
		if wait <= 0 {
			if n > 0 {
				continue
			}
			// Due delays or deadlines that this tick skipped: their rows
			// are locked (by Cancel, Retry or a turn). Pause briefly
			// rather than spin until the lock is gone.
			wait = delaySkippedPause
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		case <-wake:
			timer.Stop()
		}
	}
}

// listenDelays listens, until ctx ends or stop is called, for the NOTIFYs
// that say a nearer delay or deadline was written, and sends on wake for
// each of them, and each time it starts to listen (a NOTIFY sent while it
// did not was lost). stop returns once the connection is closed.
func (e *Engine) listenDelays(ctx context.Context) (wake <-chan struct{}, stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	ch := make(chan struct{}, 1)
	l := &listener{
		pool:     e.pool,
		logger:   e.logger,
		what:     "new delays and deadlines",
		channels: []string{channelDelay},
		ready:    func() { nudge(ch) },
		note:     func(*pgconn.Notification) { nudge(ch) },
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.run(ctx)
	}()
	return ch, func() {
		cancel()
		<-done
	}
}

// delayPass is the state that the delay processor keeps from one pass to
// the next: the delays and the runs it has set aside.
type delayPass struct {
	e      *Engine
	delays setAside[stepKey]
	runs   setAside[uuid.UUID]
}

// fireDueDelays wakes up to DelayBatchSize due delays, leaving out those
// set aside.
func (p *delayPass) fireDueDelays(ctx context.Context) (int, error) {
	held, _ := p.delays.held(time.Now())
	return p.e.fireDueDelays(ctx, nil, held)
}

// delaySkippedPause is how long the delay processor pauses when due
// delays and deadlines are all locked by others.
const delaySkippedPause = 10 * time.Millisecond

// stepKey names one step of a task: a step, a delay, a wait.
type stepKey struct {
	taskID uuid.UUID
	name   string
}

// fireDueDelaysSQL claims due timers and their tasks: delays, and the
// timeouts of waits on messages. It marks them fired (a wait's timeout
// won) and the waiting tasks pending. It locks with SKIP LOCKED and so
// never waits: a processor that lost its lease cannot wake a delay twice,
// and a task locked by Cancel, Retry or its own turn is left for the next
// tick. $2 and $3, when not NULL, pick one delay; $4 and $5 are the task
// IDs and names of the delays set aside (setAside), which it leaves out.
//
// The clock is read once, by a subquery (see dueNowSQL), so that the scan
// of braid_steps_timers stops at the first timer not yet due.
const fireDueDelaysSQL = `
	WITH due AS (
	    SELECT s.task_id, s.name FROM braid_steps s JOIN braid_tasks t ON t.id = s.task_id
	     WHERE s.status = 'waiting' AND s.resume_at <= ` + dueNowSQL + `
	       AND ($2::uuid IS NULL OR (s.task_id = $2 AND s.name = $3))
	       AND (s.task_id, s.name) NOT IN (SELECT * FROM unnest($4::uuid[], $5::text[]))
	     ORDER BY s.resume_at
	     LIMIT $1
	       FOR UPDATE OF s, t SKIP LOCKED
	), fired AS (
	    UPDATE braid_steps s SET status = 'fired', finished_at = braid_clock()
	      FROM due WHERE s.task_id = due.task_id AND s.name = due.name
	    RETURNING s.task_id, s.name, s.kind, s.resume_at, s.created_at, s.finished_at
	)
	UPDATE braid_tasks t SET status = 'pending', updated_at = braid_now()
	  FROM fired
	 WHERE t.id = fired.task_id AND t.status = 'waiting'
	RETURNING t.id, t.workflow, t.queue, t.priority, t.max_attempts,
	          extract(epoch FROM (braid_clock() - fired.resume_at))::float8,
	          t.run_id, fired.name, fired.kind, fired.created_at, fired.finished_at,
	          (SELECT r.trace_parent FROM braid_runs r WHERE r.id = t.run_id)`

// fireDueDelays wakes up to DelayBatchSize due delays (or only the one
// named by only), but none of skip, and inserts their tasks' turns, in one
// transaction. Once it has committed, each delay's wait becomes a span,
// from the moment the delay was recorded as its task suspended to the
// moment it fired.
func (e *Engine) fireDueDelays(ctx context.Context, only *stepKey, skip []stepKey) (int, error) {
	var taskID, name any
	if only != nil {
		taskID, name = only.taskID, only.name
	}
	skipTasks, skipNames := stepKeyArrays(skip)
	var n int
	var waits []waitSpan
	err := e.withTx(ctx, func(tx pgx.Tx) error {
		waits = nil
		rows, err := tx.Query(ctx, fireDueDelaysSQL, e.cfg.DelayBatchSize, taskID, name, skipTasks, skipNames)
		if err != nil {
			return err
		}
		var turns []turn
		var lateness []float64
		for rows.Next() {
			var tr turn
			var prio int16
			var late float64
			var w waitSpan
			if err := rows.Scan(&tr.taskID, &tr.workflow, &tr.queue, &prio, &tr.maxAttempts, &late,
				&w.runID, &w.delay, &w.kind, &w.start, &w.end, &w.traceParent); err != nil {
				rows.Close()
				return err
			}
			tr.priority = queue.Priority(prio)
			turns = append(turns, tr)
			lateness = append(lateness, late)
			w.taskID, w.workflow = tr.taskID, tr.workflow
			waits = append(waits, w)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		n = len(turns)
		if err := e.wakeTurns(ctx, tx, turns); err != nil {
			return err
		}
		for _, l := range lateness {
			e.metrics.delayLateness.Record(ctx, l)
		}
		return nil
	})
	if err == nil {
		e.recordWaits(waits)
	}
	return n, err
}

// dueDelaysSQL lists up to $1 due timers, earliest first, leaving out
// those set aside ($2 and $3: their task IDs and names).
const dueDelaysSQL = `
	SELECT task_id, name FROM braid_steps
	 WHERE status = 'waiting' AND resume_at <= ` + dueNowSQL + `
	   AND (task_id, name) NOT IN (SELECT * FROM unnest($2::uuid[], $3::text[]))
	 ORDER BY resume_at LIMIT $1`

// dueNowSQL is the time against which the delay processor finds due timers
// and overdue deadlines: braid_clock(), read once per statement by a
// subquery. The function itself is volatile (it is clock_timestamp() in
// production), and PostgreSQL never makes a comparison with a volatile
// expression an index condition: resume_at <= braid_clock() would be a
// filter on the timers' index, and every pass, which runs at every NOTIFY
// of a new delay, would read every waiting timer, due or not. The value of
// an uncorrelated subquery is a parameter of the scan, which the index
// bounds.
const dueNowSQL = `(SELECT braid_clock())`

// fireDueDelaysOneByOne wakes the due delays each in its own transaction,
// after a batch failed. A delay that fails again with a fault of its own
// (rowFault) is logged and set aside; the others go on. It returns how many
// it woke, and whether the database failed: the due delays could not be
// listed, or one failed for a reason that is not its own.
func (p *delayPass) fireDueDelaysOneByOne(ctx context.Context) (int, bool) {
	e := p.e
	held, _ := p.delays.held(time.Now())
	tasks, names := stepKeyArrays(held)
	rows, err := e.pool.Query(ctx, dueDelaysSQL, e.cfg.DelayBatchSize, tasks, names)
	if err != nil {
		e.logger.WarnContext(ctx, "workflow: listing due delays", "error", err)
		return 0, true
	}
	keys, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (stepKey, error) {
		var k stepKey
		return k, r.Scan(&k.taskID, &k.name)
	})
	if err != nil {
		e.logger.WarnContext(ctx, "workflow: listing due delays", "error", err)
		return 0, true
	}
	total, failed := 0, false
	for _, k := range keys {
		n, err := e.fireDueDelays(ctx, &k, nil)
		switch {
		case err == nil:
			p.delays.done(k)
			total += n
		case ctx.Err() != nil:
			return total, false
		case rowFault(err):
			p.delays.fail(k, time.Now())
			e.logger.ErrorContext(ctx, "workflow: waking a due delay failed; it is set aside and the others go on",
				"task.id", k.taskID, "delay", k.name, "error", err)
		default:
			failed = true
			e.logger.WarnContext(ctx, "workflow: waking a due delay failed; the next tick retries it", "task.id", k.taskID, "delay", k.name, "error", err)
		}
	}
	return total, failed
}
