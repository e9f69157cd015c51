package workflow

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/braidflow/braid/internal/listen"
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
// It wakes at every due time, so a pass costs as few commits as it can:
// the transaction that wakes the due delays also reads when the next delay
// and the next deadline are due (a dueReading), and the pass looks for
// overdue runs only when that reading says a deadline may be due by now,
// when a run set aside may be tried again, or in a full pass. A full pass
// looks for everything, as every pass once did: the first, one at least
// every DelayPollInterval, one after a failure, and one at each NOTIFY
// that does not say when its timer is due (a new deadline, the test kit's
// move of the clock, a writer of an older version: see delayNote) or that
// comes while no reading holds, and whenever the listener starts to
// listen. A NOTIFY that says when its new delay is due costs no statement
// at all: the processor sets its timer earlier when the delay is due
// before the timer goes off, and otherwise leaves it, for the pass at the
// timer reads the new delay. The times of a reading are the database's;
// this process's clock only counts how long to sleep until them, from the
// moment the reading came back, as the sleep always did.
//
// The NOTIFYs only hasten it. They arrive on a connection of their own
// (listenDelays), which may be unavailable for a while (a server at its
// connection limit, a proxy that drops idle connections); meanwhile the
// processor polls every DelayPollInterval, and the connection is opened
// again in the background. A row whose NOTIFY is lost is read by the
// next pass, and the next full pass, a poll interval away at most, looks
// for everything due. So is a delay whose NOTIFY the processor judged by
// a reading from before the database's clock stepped forward (a delay due
// now taken for one due later): the next reading sees the step. Every
// statement of a pass runs on the pool, so nothing but the lease ends the
// processor; and each is bounded by the lease's TTL (see bounded), so that
// a connection that stops answering mid-statement holds it no longer.
func (e *Engine) processDelays(ctx context.Context, l *leases.Lease) error {
	e.logger.InfoContext(ctx, "workflow: delay processor started", "lease.holder", l.Holder, "lease.generation", l.Generation)
	defer e.logger.InfoContext(context.WithoutCancel(ctx), "workflow: delay processor stopped", "lease.holder", l.Holder)

	notes, stopListening := e.listenDelays(ctx)
	defer stopListening()
	p := &delayPass{e: e}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	// full: this pass looks at everything. fullBy: the next full pass is
	// due then at the latest. cancelAt: a deadline may be due then (or a
	// run set aside tried again), by the last reading. mustCancel: the
	// last pass took no reading, so the next looks for overdue runs
	// whatever wakes it.
	full, mustCancel := true, false
	var fullBy, cancelAt time.Time
	for {
		full = full || !time.Now().Before(fullBy)
		cancel := full || mustCancel || !time.Now().Before(cancelAt)
		var rd dueReading
		n, err := p.fireDueDelays(ctx, &rd)
		failed := false
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			e.logger.WarnContext(ctx, "workflow: waking due delays; retrying them one by one", "error", err)
			n, failed = p.fireDueDelaysOneByOne(ctx)
			rd = dueReading{}
		}
		var cancelled, found int
		cancelFailed := false
		if cancel {
			cancelled, found, cancelFailed = p.cancelOverdueRuns(ctx)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if (n >= e.cfg.DelayBatchSize && !failed) || (found >= e.cfg.DelayBatchSize && cancelled > 0 && !cancelFailed) {
			// More are due. A NOTIFY that said no due time (a new deadline)
			// makes the next pass a full one, even in a long burst; the
			// delays the others announced are read by the passes anyway.
			if lost, _, _ := notes.take(); lost {
				full = true
			}
			continue
		}
		if full {
			fullBy = time.Now().Add(e.cfg.DelayPollInterval)
		}
		full = false
		failed = failed || cancelFailed
		n += cancelled
		if !rd.ok || found > 0 {
			// The pass read nothing, or its cancels changed what is due
			// since it read.
			rd, err = p.readDue(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				e.logger.WarnContext(ctx, "workflow: finding the next delay or deadline failed; looking again after the poll interval", "error", err)
			}
		}
		if failed {
			rd = dueReading{}
		}
		now := time.Now()
		wait := fullBy.Sub(now)
		mustCancel, cancelAt = !rd.ok, fullBy
		if rd.ok {
			if rd.deadline != nil {
				cancelAt = earliest(cancelAt, rd.when(*rd.deadline))
			}
			next := cancelAt
			if rd.delay != nil {
				next = earliest(next, rd.when(*rd.delay))
			}
			wait = min(wait, next.Sub(now))
		}
		// A row set aside may be tried again then.
		_, nextDelay := p.delays.held(now)
		_, nextRun := p.runs.held(now)
		if !nextRun.IsZero() {
			cancelAt = earliest(cancelAt, nextRun)
		}
		for _, at := range []time.Time{nextDelay, nextRun} {
			if d := at.Sub(now); !at.IsZero() && d < wait {
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
		armed := now.Add(wait)
		timer.Reset(wait)
	sleep:
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-timer.C:
				break sleep
			case <-notes.wake:
				lost, due, has := notes.take()
				if lost || !rd.ok {
					timer.Stop()
					full = true
					break sleep
				}
				if !has {
					continue
				}
				at := rd.when(due)
				if !at.Before(armed) {
					continue // the timer goes off first, and reads it
				}
				if d := time.Until(at); d > 0 {
					armed = at
					timer.Reset(d)
					continue
				}
				timer.Stop()
				break sleep
			}
		}
	}
}

// dueReading is what the delay processor last read of its timers: the
// database's clock (braid_clock()), when the earliest waiting delay and
// the earliest deadline of an unfinished run are due by it (nil for none;
// the rows set aside left out), and when the reading came back, by this
// process's clock. ok is false when there is no reading.
type dueReading struct {
	ok              bool
	back            time.Time
	clock           time.Time
	delay, deadline *time.Time
}

// when is the moment of this process at which t, a time on the
// database's clock, falls by the reading: how long the processor sleeps
// until t is counted from when the reading came back.
func (r *dueReading) when(t time.Time) time.Time { return r.back.Add(t.Sub(r.clock)) }

// scan reads row, a row of dueReadingSQL.
func (r *dueReading) scan(row pgx.Row) error {
	*r = dueReading{}
	if err := row.Scan(&r.clock, &r.delay, &r.deadline); err != nil {
		return err
	}
	r.ok, r.back = true, time.Now()
	return nil
}

// dueReadingSQL reads the database's clock and when the earliest waiting
// delay and the earliest deadline of an unfinished run are due, leaving
// out the delays ($1 and $2: task IDs and names) and the runs ($3) set
// aside.
const dueReadingSQL = `
	SELECT braid_clock(),
	       (SELECT min(resume_at) FROM braid_steps WHERE status = 'waiting' AND resume_at IS NOT NULL
	           AND (task_id, name) NOT IN (SELECT * FROM unnest($1::uuid[], $2::text[]))),
	       (SELECT min(deadline_at) FROM braid_runs
	         WHERE deadline_at IS NOT NULL AND status IN ('pending', 'running', 'waiting') AND id <> ALL($3::uuid[]))`

// readDue takes a dueReading on its own.
func (p *delayPass) readDue(ctx context.Context) (dueReading, error) {
	ctx, cancel := p.bounded(ctx)
	defer cancel()
	delays, _ := p.delays.held(time.Now())
	runs, _ := p.runs.held(time.Now())
	tasks, names := stepKeyArrays(delays)
	var rd dueReading
	err := rd.scan(p.e.pool.QueryRow(ctx, dueReadingSQL, tasks, names, pgIDs(runs)))
	return rd, err
}

// bounded bounds one statement or transaction of the delay processor by
// its lease's TTL. The processor's context ends only with the lease, and
// a statement that gets no answer (its connection cut mid-statement,
// which the kernel may take many minutes to notice) would hold the
// processor meanwhile, while the lease's renewals go on, on other
// connections: no process would wake a delay or end a run at its
// deadline. A holder that cannot act within the TTL is as good as gone;
// the bounded statement fails, its connection is closed, and the next pass
// tries again. A run's deadline cancel, which may change many rows, is
// bounded as a turn's outcome is, by Config.OutcomeTimeout.
func (p *delayPass) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, p.e.leases.TTL())
}

// delayNote is the payload of a NOTIFY on channelDelay that says when the
// earliest of the timers it announces (delays and waits' timeouts, rows of
// braid_steps) is due, on the database's clock: microseconds since the
// Unix epoch, in decimal. The timers' writer reads due from the rows it
// wrote. A NOTIFY with another payload (an empty one: a new deadline, the
// test kit's move of the clock, a writer of an older version) says nothing
// of when, and the delay processor looks for everything due. A deadline's
// NOTIFY must be such a one: the pass at a timer that a delayNote set
// looks for overdue runs only when its last reading says one may be due.
func delayNote(due time.Time) string { return strconv.FormatInt(due.UnixMicro(), 10) }

// parseDelayNote reads a delayNote; ok is false for any other payload.
func parseDelayNote(s string) (due time.Time, ok bool) {
	us, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.UnixMicro(us), true
}

// delayNotes gathers the NOTIFYs on channelDelay that came since the delay
// processor last took them: the earliest due time they said, and whether
// one said none, or notifications were lost (the listener started to
// listen: those sent before were never heard). wake receives when there
// is something to take.
type delayNotes struct {
	wake chan struct{}
	mu   sync.Mutex
	lost bool
	// due is the earliest due time the notifications said, when has.
	due time.Time
	has bool
}

// add records a notification's payload.
func (n *delayNotes) add(payload string) {
	due, ok := parseDelayNote(payload)
	n.mu.Lock()
	switch {
	case !ok:
		n.lost = true
	case !n.has || due.Before(n.due):
		n.due, n.has = due, true
	}
	n.mu.Unlock()
	nudge(n.wake)
}

// missed records that notifications may have been lost.
func (n *delayNotes) missed() {
	n.mu.Lock()
	n.lost = true
	n.mu.Unlock()
	nudge(n.wake)
}

// take returns what the notifications said since the last take, and
// forgets it: whether one said no due time (or some were lost), and the
// earliest due time said, when has.
func (n *delayNotes) take() (lost bool, due time.Time, has bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	lost, due, has = n.lost, n.due, n.has
	n.lost, n.due, n.has = false, time.Time{}, false
	return lost, due, has
}

// listenDelays listens, until ctx ends or stop is called, for the NOTIFYs
// that say a nearer delay or deadline was written, and gathers them in
// notes, with each time it starts to listen (a NOTIFY sent while it did
// not was lost). stop returns once the connection is closed.
func (e *Engine) listenDelays(ctx context.Context) (notes *delayNotes, stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	notes = &delayNotes{wake: make(chan struct{}, 1)}
	l := &listen.Listener{
		Pool:     e.pool,
		Logger:   e.logger,
		Subject:  "workflow",
		What:     "new delays and deadlines",
		Channels: []string{channelDelay},
		Ready:    notes.missed,
		Note:     func(n *pgconn.Notification) { notes.add(n.Payload) },
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Run(ctx)
	}()
	return notes, func() {
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
// set aside. With rd, the same transaction then takes a dueReading into
// rd.
func (p *delayPass) fireDueDelays(ctx context.Context, rd *dueReading) (int, error) {
	ctx, cancel := p.bounded(ctx)
	defer cancel()
	held, _ := p.delays.held(time.Now())
	var runs []uuid.UUID
	if rd != nil {
		runs, _ = p.runs.held(time.Now())
	}
	return p.e.fireDueDelays(ctx, nil, held, rd, runs)
}

// earliest returns the earlier of a and b.
func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
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
//
// With rd, the transaction also takes a dueReading into rd, leaving out
// skip and skipRuns, in the round trip of its first statement: after it,
// so that the delays it fires are no longer waiting. The reading holds
// only once the transaction has committed.
func (e *Engine) fireDueDelays(ctx context.Context, only *stepKey, skip []stepKey, rd *dueReading, skipRuns []uuid.UUID) (int, error) {
	var taskID, name any
	if only != nil {
		taskID, name = only.taskID, only.name
	}
	skipTasks, skipNames := stepKeyArrays(skip)
	var n int
	var waits []waitSpan
	var lateness []float64
	err := e.withTx(ctx, func(tx pgx.Tx) error {
		waits, lateness = nil, nil
		b := &pgx.Batch{}
		b.Queue(fireDueDelaysSQL, e.cfg.DelayBatchSize, taskID, name, skipTasks, skipNames)
		if rd != nil {
			b.Queue(dueReadingSQL, skipTasks, skipNames, pgIDs(skipRuns))
		}
		br := tx.SendBatch(ctx, b)
		defer func() { _ = br.Close() }()
		rows, err := br.Query()
		if err != nil {
			return err
		}
		var turns []turn
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
		if rd != nil {
			if err := rd.scan(br.QueryRow()); err != nil {
				return err
			}
		}
		if err := br.Close(); err != nil {
			return err
		}
		n = len(turns)
		return e.wakeTurns(ctx, tx, turns)
	})
	if err == nil {
		// Once the wakes have committed: a transaction that fails, and
		// whose delays are woken again one by one, counts none.
		for _, l := range lateness {
			e.metrics.delayLateness.Record(ctx, l)
		}
		e.recordWaits(waits)
	} else if rd != nil {
		*rd = dueReading{}
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
	keys, err := func() ([]stepKey, error) {
		ctx, cancel := p.bounded(ctx)
		defer cancel()
		rows, err := e.pool.Query(ctx, dueDelaysSQL, e.cfg.DelayBatchSize, tasks, names)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, func(r pgx.CollectableRow) (stepKey, error) {
			var k stepKey
			return k, r.Scan(&k.taskID, &k.name)
		})
	}()
	if err != nil {
		e.logger.WarnContext(ctx, "workflow: listing due delays", "error", err)
		return 0, true
	}
	total, failed := 0, false
	for _, k := range keys {
		n, err := func() (int, error) {
			ctx, cancel := p.bounded(ctx)
			defer cancel()
			return e.fireDueDelays(ctx, &k, nil, nil, nil)
		}()
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
