package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/braidflow/braid/leases"
)

const (
	// rescueBatch and ageBatch bound the rows one statement handles.
	rescueBatch = 100
	ageBatch    = 1000

	// schedulerInterval mirrors River's job scheduler interval: a retry due
	// sooner than this is made available at once rather than retryable, as
	// River's own executor does, so short retries do not wait for River's
	// scheduler.
	schedulerInterval = 5 * time.Second
)

// maintain runs under MaintenanceLease: the heartbeat rescuer every
// HeartbeatCheckInterval, in this goroutine; when aging is on, an aging
// pass four times per AgeInterval, in a goroutine of its own; and each
// Maintenance task in a goroutine of its own. So a slow task, or a large
// backlog of jobs to age, delays neither the rescuer nor another task, and
// a new term rescues first: after a crash, which is when the lease changes
// hands, the silent attempts of the dead process are taken back without
// waiting for aging. All are safe to run twice at once (a lease lost in
// the middle of a pass): every rescue is fenced on the attempt it saw, a
// raise is fenced on the job's last raise, and tasks promise it. maintain
// returns when ctx ends (the lease was lost or the Queue stops), after
// every task, and aging, has returned.
func (q *Queue) maintain(ctx context.Context, _ *leases.Lease) error {
	// A new term of the lease that follows an outage this process lived
	// through (its leases failed to reach the database lately) counts
	// silence from its own first look: the lease changed hands because the
	// database was out of reach of every process, this one's attempts
	// included (see rescueSince). After a mere death of the previous
	// holder, its attempts are rescued as usual.
	if f := q.leases.LastFailure(); !f.IsZero() && time.Since(f) < q.leases.TTL()+q.outageMemory() {
		q.rescueTrouble.Store(true)
	}
	ctx, cancel := context.WithCancel(ctx)
	waitTasks := q.runTasks(ctx)
	var aging sync.WaitGroup
	defer func() {
		cancel()
		waitTasks()
		aging.Wait()
	}()
	rescueTicker := time.NewTicker(q.check)
	defer rescueTicker.Stop()
	q.runRescue(ctx)
	if q.ageAfter > 0 {
		aging.Go(func() { q.ageLoop(ctx) })
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-rescueTicker.C:
			q.runRescue(ctx)
		}
	}
}

// ageLoop runs an aging pass at once, then four times per AgeInterval,
// until ctx ends.
func (q *Queue) ageLoop(ctx context.Context) {
	t := time.NewTicker(max(q.ageEvery/4, time.Millisecond))
	defer t.Stop()
	for {
		q.runAging(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (q *Queue) runRescue(ctx context.Context) {
	if _, err := q.rescueStale(ctx); err != nil && ctx.Err() == nil {
		q.logger.ErrorContext(ctx, "queue: heartbeat rescue failed", "error", err)
	}
}

func (q *Queue) runAging(ctx context.Context) {
	if _, err := q.ageOnce(ctx); err != nil && ctx.Err() == nil {
		q.logger.ErrorContext(ctx, "queue: priority aging failed", "error", err)
	}
}

// staleAttempt is an attempt the rescuer found silent: the job and the
// attempt number it saw.
type staleAttempt struct {
	id      int64
	attempt int
}

// silentSQL is the liveness rule, shared by the search and the fenced
// re-check. Only a progress row written during the current execution of
// the job counts: the same attempt, and updated no earlier than River's
// attempted_at. River reuses an attempt number after a snooze (and after a
// stop interrupts a job), so a row of the same attempt may be left over
// from an execution that has already ended; such a row is ignored.
//
// An execution's last sign of life is its last heartbeat; or, once its
// heartbeat was ended (the worker returned and River has yet to record the
// outcome), the time it ended plus a grace of 5 s; or, with no row of its own,
// its start (attempted_at). Its interval is the one stored with its heartbeats, else
// the one this process declares for its kind. $1 and $2 are the declared
// kinds and intervals (microseconds), $3 the misses, and the parameter
// named by since the rescuer's own start of trouble (see lastSignSQL).
func silentSQL(since string) string {
	return `
	FROM river_job j
	LEFT JOIN braid_job_progress p ON p.job_id = j.id AND p.attempt = j.attempt AND p.updated_at >= j.attempted_at
	LEFT JOIN unnest($1::text[], $2::bigint[]) AS d(kind, micros) ON d.kind = j.kind
	WHERE j.state = 'running'
	  AND COALESCE(p.heartbeat_interval, d.micros * interval '1 microsecond') IS NOT NULL
	  AND ` + lastSignSQL(since) + `
	      < now() - COALESCE(p.heartbeat_interval, d.micros * interval '1 microsecond') * $3::integer`
}

// lastSignSQL is an execution's last sign of life; see silentSQL. An
// ended execution (its worker returned) gets 5 s more than a running one
// for River to record its outcome before the rescuer takes the job back:
// River's completer writes outcomes in batches, every 250 ms when idle,
// and retries a batch that failed. Were the process to die in between,
// the job is still rescued.
//
// No sign counts as older than the database server's start
// (pg_postmaster_start_time), nor than 5 s after the rescuer's first look
// after a look that failed, or after an outage its leases lived through
// (the parameter named by since): while the server was down or out of reach, after a
// restart, a crash restart or a failover, no attempt could heartbeat and
// no outcome could be written. Every attempt then gets its full
// HeartbeatMisses intervals to heartbeat again, and River's completer,
// whose tries of a batch come 1 and 3 s after its first, its 5 s to write
// what it holds, rather than the jobs being rescued the moment the
// database is back.
func lastSignSQL(since string) string {
	return `greatest(COALESCE(p.heartbeat_at, p.updated_at + interval '5 seconds', j.attempted_at),
	         pg_postmaster_start_time(), ` + since + `::timestamptz + interval '5 seconds')`
}

// outageMemory is how long after a failure of its leases a new term of
// the maintenance lease still counts silence from its own first look: the
// longest that an attempt's silence could span, HeartbeatMisses of the
// longest declared heartbeat interval.
func (q *Queue) outageMemory() time.Duration {
	var longest time.Duration
	for _, us := range q.declaredMicros {
		longest = max(longest, time.Duration(us)*time.Microsecond)
	}
	return time.Duration(q.misses) * longest
}

// rescueSince returns the moment, on the database clock, from which the
// rescuer counts silence: at its first look after one that failed, or
// after its leases failed to reach the database (see maintain), it reads
// the database's time, and no sign counts as older than that (see
// lastSignSQL).
func (q *Queue) rescueSince(ctx context.Context) (*time.Time, error) {
	if q.rescueTrouble.Load() {
		var now time.Time
		if err := q.pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
			return nil, err
		}
		q.since.Store(&now)
		q.rescueTrouble.Store(false)
	}
	return q.since.Load(), nil
}

// findStale lists running attempts that have been silent for longer than
// HeartbeatMisses of their heartbeat intervals, on the database clock.
func (q *Queue) findStale(ctx context.Context) ([]staleAttempt, error) {
	since, err := q.rescueSince(ctx)
	if err != nil {
		return nil, fmt.Errorf("queue: finding silent attempts: %w", err)
	}
	rows, err := q.pool.Query(ctx, `SELECT j.id, j.attempt`+silentSQL("$5")+`
		ORDER BY `+lastSignSQL("$5")+`
		LIMIT $4`, q.declaredKinds, q.declaredMicros, q.misses, rescueBatch, since)
	var stale []staleAttempt
	if err == nil {
		stale, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (staleAttempt, error) {
			var s staleAttempt
			err := row.Scan(&s.id, &s.attempt)
			return s, err
		})
	}
	if err != nil {
		// A statement can fail as it is sent or as its rows are read.
		q.rescueTrouble.Store(true)
		return nil, fmt.Errorf("queue: finding silent attempts: %w", err)
	}
	return stale, nil
}

// rescueStale finds silent attempts and rescues them, batch by batch.
func (q *Queue) rescueStale(ctx context.Context) (int, error) {
	total := 0
	for {
		stale, err := q.findStale(ctx)
		if err != nil {
			return total, err
		}
		n, err := q.rescue(ctx, stale)
		total += n
		if err != nil || len(stale) < rescueBatch || n == 0 {
			return total, err
		}
	}
}

// rescue takes back each attempt in stale that is, on a fresh look under
// lock, still running, still the same attempt, and still silent. An
// attempt that completed, failed, or heartbeated since it was listed is
// left untouched. It returns how many jobs it rescued.
func (q *Queue) rescue(ctx context.Context, stale []staleAttempt) (int, error) {
	n := 0
	var errs []error
	for _, s := range stale {
		ok, err := q.rescueOne(ctx, s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			n++
		}
	}
	return n, errors.Join(errs...)
}

func (q *Queue) rescueOne(ctx context.Context, s staleAttempt) (bool, error) {
	tx, err := q.pool.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	// Lock the job row first (as Heartbeat and Progress do), then fence on
	// the state and attempt seen. A row that another transaction holds is
	// skipped, and looked at again at the next pass: one job held for long
	// (an operator's open transaction, a backend of a process cut off
	// mid-batch) must not keep every other silent job from its rescue.
	var locked int64
	err = tx.QueryRow(ctx, `
		SELECT id FROM river_job
		WHERE id = $1 AND state = 'running' AND attempt = $2
		FOR UPDATE SKIP LOCKED`, s.id, s.attempt).Scan(&locked)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil // finished, superseded or held meanwhile: not ours to touch now
	}
	if err != nil {
		return false, fmt.Errorf("queue: locking job %d for rescue: %w", s.id, err)
	}
	var (
		silentFor time.Duration
		interval  time.Duration
		now       time.Time
	)
	err = tx.QueryRow(ctx, `
		SELECT (extract(epoch FROM now() - `+lastSignSQL("$6")+`) * 1000000)::bigint,
		       (extract(epoch FROM COALESCE(p.heartbeat_interval, d.micros * interval '1 microsecond')) * 1000000)::bigint,
		       now()`+silentSQL("$6")+`
		  AND j.id = $4 AND j.attempt = $5`,
		q.declaredKinds, q.declaredMicros, q.misses, s.id, s.attempt, q.since.Load()).Scan((*micros)(&silentFor), (*micros)(&interval), &now)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil // it heartbeated meanwhile
	}
	if err != nil {
		return false, fmt.Errorf("queue: checking the heartbeat of job %d: %w", s.id, err)
	}
	job, err := q.client.JobGetTx(ctx, tx, s.id)
	if err != nil {
		return false, fmt.Errorf("queue: loading job %d for rescue: %w", s.id, err)
	}

	attemptErr, err := json.Marshal(rivertype.AttemptError{
		At:      now,
		Attempt: job.Attempt,
		Error: fmt.Sprintf("heartbeat lost: none for %s, more than %d intervals of %s; attempt rescued by braid's heartbeat rescuer",
			silentFor.Round(time.Millisecond), q.misses, interval),
	})
	if err != nil {
		return false, err
	}
	var md struct {
		CancelAttemptedAt *time.Time `json:"cancel_attempted_at"`
	}
	_ = json.Unmarshal(job.Metadata, &md)

	state := rivertype.JobStateRetryable
	scheduledAt := job.ScheduledAt
	var finalizedAt *time.Time
	switch {
	case md.CancelAttemptedAt != nil:
		state, finalizedAt = rivertype.JobStateCancelled, &now
	case job.Attempt >= job.MaxAttempts:
		state, finalizedAt = rivertype.JobStateDiscarded, &now
	default:
		// Soon: should the rescued attempt be alive after all, its outcome
		// is dropped (the watch marks it superseded), so it cannot harm the
		// next attempt.
		scheduledAt = now.Add(q.rescueDelay)
		if q.rescueDelay <= schedulerInterval {
			state = rivertype.JobStateAvailable
		}
	}
	if _, err := tx.Exec(ctx, `
		UPDATE river_job
		SET state = $2::text::river_job_state,
		    scheduled_at = $3,
		    finalized_at = $4,
		    errors = array_append(errors, $5::jsonb)
		WHERE id = $1`, job.ID, string(state), scheduledAt, finalizedAt, attemptErr); err != nil {
		return false, fmt.Errorf("queue: rescuing job %d: %w", job.ID, err)
	}
	if _, err := tx.Exec(ctx, `UPDATE braid_job_progress SET heartbeat_at = NULL, updated_at = now() WHERE job_id = $1`, job.ID); err != nil {
		return false, fmt.Errorf("queue: ending the heartbeat of job %d: %w", job.ID, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("queue: committing the rescue of job %d: %w", job.ID, err)
	}
	q.metrics.rescues.Add(ctx, 1, metric.WithAttributes(
		attribute.String("job.kind", job.Kind), attribute.String("state", string(state))))
	q.logger.WarnContext(ctx, "queue: job's heartbeat stopped; rescued",
		"job_id", job.ID, "kind", job.Kind, "attempt", job.Attempt,
		"silent_for", silentFor, "state", string(state), "scheduled_at", scheduledAt)
	return true, nil
}

// micros scans a bigint count of microseconds into a time.Duration.
type micros time.Duration

func (m *micros) ScanInt64(v pgtype.Int8) error {
	*m = micros(time.Duration(v.Int64) * time.Microsecond)
	return nil
}

// ageOnce raises, by one level, every available job that has waited longer
// than AgeAfter and was not raised within the last AgeInterval. It returns
// how many jobs it raised.
func (q *Queue) ageOnce(ctx context.Context) (int, error) {
	total := 0
	for {
		rows, err := q.pool.Query(ctx, `
			WITH due AS (
				SELECT id FROM river_job
				WHERE state = 'available'
				  AND priority > 1
				  AND scheduled_at <= now() - $1::bigint * interval '1 microsecond'
				  AND (NOT metadata ? '`+metadataAgedAt+`'
				       OR (metadata->>'`+metadataAgedAt+`')::timestamptz <= now() - $2::bigint * interval '1 microsecond')
				ORDER BY priority, scheduled_at, id
				LIMIT $3
				FOR UPDATE SKIP LOCKED
			)
			UPDATE river_job j
			SET priority = j.priority - 1,
			    metadata = j.metadata || jsonb_build_object('`+metadataAgedAt+`', now())
			FROM due
			WHERE j.id = due.id
			RETURNING j.queue`,
			q.ageAfter.Microseconds(), q.ageEvery.Microseconds(), ageBatch)
		if err != nil {
			return total, fmt.Errorf("queue: aging priorities: %w", err)
		}
		queues, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return total, fmt.Errorf("queue: aging priorities: %w", err)
		}
		byQueue := make(map[string]int64)
		for _, qn := range queues {
			byQueue[qn]++
		}
		for qn, n := range byQueue {
			q.metrics.aged.Add(ctx, n, metric.WithAttributes(attribute.String("queue", qn)))
		}
		total += len(queues)
		if len(queues) > 0 {
			q.logger.DebugContext(ctx, "queue: aging raised waiting jobs", "count", len(queues))
		}
		if len(queues) < ageBatch {
			return total, nil
		}
	}
}
