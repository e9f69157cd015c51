package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
)

// ProgressChannel is the PostgreSQL NOTIFY channel on which Progress
// announces every update. The payload is a JobProgress as JSON:
//
//	{"job_id": 42, "kind": "export", "attempt": 1, "percent": 50,
//	 "message": "halfway", "updated_at": "2025-01-02T15:04:05.123456+00:00"}
//
// Any process can LISTEN braid_job_progress to show live progress.
const ProgressChannel = "braid_job_progress"

// ProgressMessageMaxLength is the longest progress message accepted, in
// characters. It keeps every NOTIFY payload under PostgreSQL's 8000-byte
// limit.
const ProgressMessageMaxLength = 1000

// clearTimeout bounds the write that ends an attempt's heartbeat.
const clearTimeout = 5 * time.Second

var (
	// ErrNotJobContext is returned by Progress and Heartbeat when ctx is not
	// the context of a job worked by a Queue (for example a background
	// context, or a goroutine's context not derived from the worker's).
	ErrNotJobContext = errors.New("queue: ctx is not a job's context; Progress and Heartbeat work only inside a worker run by a queue.Queue")

	// ErrJobNotRunning is returned by Progress and Heartbeat when the attempt
	// no longer owns its job: the job was rescued, or finished, or another
	// attempt runs it. The attempt's context is cancelled with this cause
	// (also by the watch the Queue keeps over attempts of heartbeat kinds);
	// the worker should return.
	//
	// A worker that finds its attempt no longer owns its job returns an
	// error wrapping ErrJobNotRunning; River then records nothing for that
	// attempt. The same holds, whatever the worker returns, for an attempt
	// that Heartbeat, Progress or the watch found superseded before it
	// returned. River's own completer does not check which attempt runs a
	// job, so without this a rescued attempt that returns late would
	// complete, fail or snooze the attempt that replaced it. A worker that
	// returns ErrJobNotRunning while its attempt does own its job (checked
	// then, by job ID, attempt and start time) has the error recorded as
	// any other.
	ErrJobNotRunning = errors.New("queue: this attempt no longer owns its job (rescued, finished or superseded)")
)

// JobProgress is a job's latest progress report and heartbeat, as stored in
// braid_job_progress and as sent on ProgressChannel.
type JobProgress struct {
	// JobID is the River job's ID.
	JobID int64 `json:"job_id"`
	// Kind is the job's kind.
	Kind string `json:"kind"`
	// Attempt is the attempt that reported.
	Attempt int `json:"attempt"`
	// Percent is the last reported percentage, 0 to 100.
	Percent int `json:"percent"`
	// Message is the last reported message.
	Message string `json:"message"`
	// HeartbeatAt is the last heartbeat of the running attempt; nil once the
	// attempt has ended. Not part of the NOTIFY payload.
	HeartbeatAt *time.Time `json:"heartbeat_at,omitempty"`
	// UpdatedAt is when the row last changed, on the database clock.
	UpdatedAt time.Time `json:"updated_at"`
}

type jobContextKey struct{}

// jobContext is what the middleware puts in a worker's context.
type jobContext struct {
	q        *Queue
	job      *rivertype.JobRow
	cancel   context.CancelCauseFunc
	interval time.Duration // declared heartbeat interval, or zero
	claimed  bool          // claimed by this process (WorkClaimed), not fetched by River
	touched  atomic.Bool   // Progress or Heartbeat wrote a row

	start time.Time // when the middleware began the attempt (monotonic)
	// lastBeat is when (since start) a heartbeat or progress report last
	// confirmed that the attempt owns its job; beating counts those in
	// flight. The watch skips its own poll while either is recent.
	lastBeat atomic.Int64
	beating  atomic.Int32
	// confirmed is when (since start) the last read or write that found
	// the attempt owning its job was sent: a heartbeat, a progress report
	// or a poll of the watch. An attempt that returns with none for a
	// whole heartbeat interval reads its ownership again (see
	// supersededOnReturn).
	confirmed atomic.Int64
	// superseded is set once Heartbeat, Progress or the watch found that
	// the attempt no longer owns its job.
	superseded atomic.Bool
	// cancelRequested is set once the watch ended a claimed attempt whose
	// job River's JobCancel asked to stop.
	cancelRequested atomic.Bool
	// ended is when (since start, plus one nanosecond; zero while unset)
	// the worker said its attempt's own work ended (EndAttempt).
	ended atomic.Int64
}

// EndAttempt tells the queue that the work of the attempt that ctx (the
// context River passed to Work) carries has ended, although its worker
// has not returned yet: a worker that goes on to run, in the slot it
// holds, jobs it claimed itself (WorkClaimed), each an attempt of its own,
// calls it first, so that its own attempt's duration and span end with
// its own work. The first call counts; outside an attempt it does nothing.
func EndAttempt(ctx context.Context) {
	if jc, ok := ctx.Value(jobContextKey{}).(*jobContext); ok {
		jc.ended.CompareAndSwap(0, int64(time.Since(jc.start))+1)
	}
}

// end is when the attempt ended: when EndAttempt was called, or now.
func (jc *jobContext) end() time.Time {
	if e := jc.ended.Load(); e > 0 {
		return jc.start.Add(time.Duration(e - 1))
	}
	return time.Now()
}

// confirm records that a read or write sent at sent (since start) found
// the attempt owning its job. confirmed only moves forward.
func (jc *jobContext) confirm(sent time.Duration) {
	for {
		last := jc.confirmed.Load()
		if int64(sent) <= last || jc.confirmed.CompareAndSwap(last, int64(sent)) {
			return
		}
	}
}

// unconfirmed reports whether the attempt has gone longer than its
// heartbeat interval without confirming that it owns its job: its
// heartbeats and the watch's polls failed, as they do while the process is
// cut off from the database, or stalled. The rescuer may have taken the
// job, and another attempt may run it, without this attempt knowing.
func (jc *jobContext) unconfirmed() bool {
	return jc.interval > 0 && time.Since(jc.start)-time.Duration(jc.confirmed.Load()) > jc.interval
}

// lose marks the attempt superseded and cancels its context.
func (jc *jobContext) lose() {
	jc.superseded.Store(true)
	jc.cancel(ErrJobNotRunning)
}

func fromContext(ctx context.Context) (*jobContext, error) {
	jc, ok := ctx.Value(jobContextKey{}).(*jobContext)
	if !ok {
		return nil, ErrNotJobContext
	}
	return jc, nil
}

// JobFromContext returns the job whose attempt ctx belongs to, or false
// when ctx is not a job's context.
func JobFromContext(ctx context.Context) (*rivertype.JobRow, bool) {
	jc, err := fromContext(ctx)
	if err != nil {
		return nil, false
	}
	return jc.job, true
}

// FromContext returns the Queue working the job whose attempt ctx belongs
// to, or false when ctx is not a job's context.
func FromContext(ctx context.Context) (*Queue, bool) {
	jc, err := fromContext(ctx)
	if err != nil {
		return nil, false
	}
	return jc.q, true
}

// Progress records the running job's progress: percent (0 to 100) and a
// message of at most ProgressMessageMaxLength characters. It writes at once,
// in its own statement rather than in any transaction of the worker's, so
// other processes see it while the job runs, and it sends a NOTIFY on
// ProgressChannel with the JobProgress as JSON. A progress report also
// counts as a heartbeat.
//
// ctx must be the worker's context (or derived from it); otherwise Progress
// returns ErrNotJobContext. When the attempt no longer owns its job it
// returns ErrJobNotRunning and cancels the attempt's context.
func Progress(ctx context.Context, percent int, message string) error {
	jc, err := fromContext(ctx)
	if err != nil {
		return err
	}
	if percent < 0 || percent > 100 {
		return fmt.Errorf("queue: progress percent %d is out of range; it must be 0 to 100", percent)
	}
	if err := validateMessage(message); err != nil {
		return err
	}
	return jc.record(ctx, &progressUpdate{percent: percent, message: message})
}

func validateMessage(message string) error {
	switch {
	case !utf8.ValidString(message):
		return errors.New("queue: progress message is not valid UTF-8")
	case utf8.RuneCountInString(message) > ProgressMessageMaxLength:
		return fmt.Errorf("queue: progress message is %d characters; the limit is %d", utf8.RuneCountInString(message), ProgressMessageMaxLength)
	case strings.IndexByte(message, 0) >= 0:
		return errors.New("queue: progress message contains a NUL character")
	}
	return nil
}

// Heartbeat records that the running job is alive. A job whose kind has a
// heartbeat interval in Config.Heartbeats must call it (or Progress) at
// least once per interval, or the heartbeat rescuer takes the job back. Each
// call is one database write, so call it about once per interval rather than
// in a tight loop. Jobs of other kinds may call it too; it then only
// records the time.
//
// ctx must be the worker's context (or derived from it); otherwise Heartbeat
// returns ErrNotJobContext. When the attempt no longer owns its job it
// returns ErrJobNotRunning and cancels the attempt's context.
func Heartbeat(ctx context.Context) error {
	jc, err := fromContext(ctx)
	if err != nil {
		return err
	}
	return jc.record(ctx, nil)
}

type progressUpdate struct {
	percent int
	message string
}

// The job row is locked FOR SHARE, so a heartbeat and the rescuer's fenced
// update (which locks the job row first) are serialized: either the
// heartbeat lands first and the rescuer sees a fresh heartbeat, or the
// rescue lands first and the heartbeat finds the attempt gone.
const heartbeatSQL = `
WITH j AS (
	SELECT id, kind, attempt FROM river_job
	WHERE id = $1 AND state = 'running' AND attempt = $2
	FOR SHARE
), up AS (
	INSERT INTO braid_job_progress AS p (job_id, kind, attempt, heartbeat_at, heartbeat_interval, updated_at)
	SELECT id, kind, attempt, now(), $3::bigint * interval '1 microsecond', now() FROM j
	ON CONFLICT (job_id) DO UPDATE SET
		percent            = CASE WHEN p.attempt = excluded.attempt THEN p.percent END,
		message            = CASE WHEN p.attempt = excluded.attempt THEN p.message END,
		attempt            = excluded.attempt,
		heartbeat_at       = now(),
		heartbeat_interval = excluded.heartbeat_interval,
		updated_at         = now()
	RETURNING p.job_id
)
SELECT count(*) FROM up`

const progressSQL = `
WITH j AS (
	SELECT id, kind, attempt FROM river_job
	WHERE id = $1 AND state = 'running' AND attempt = $2
	FOR SHARE
), up AS (
	INSERT INTO braid_job_progress AS p (job_id, kind, attempt, percent, message, heartbeat_at, heartbeat_interval, updated_at)
	SELECT id, kind, attempt, $4, $5, now(), $3::bigint * interval '1 microsecond', now() FROM j
	ON CONFLICT (job_id) DO UPDATE SET
		attempt            = excluded.attempt,
		percent            = excluded.percent,
		message            = excluded.message,
		heartbeat_at       = now(),
		heartbeat_interval = excluded.heartbeat_interval,
		updated_at         = now()
	RETURNING p.job_id, p.kind, p.attempt, p.percent, p.message, p.updated_at
)
SELECT count(pg_notify('` + ProgressChannel + `', json_build_object(
	'job_id', job_id, 'kind', kind, 'attempt', attempt,
	'percent', percent, 'message', message, 'updated_at', updated_at)::text))
FROM up`

// record writes a heartbeat, or a progress report when p is set, fenced on
// the attempt still running.
func (jc *jobContext) record(ctx context.Context, p *progressUpdate) error {
	var interval *int64
	if jc.interval > 0 {
		us := jc.interval.Microseconds()
		interval = &us
	}
	var n int
	var err error
	jc.beating.Add(1)
	defer jc.beating.Add(-1)
	sent := time.Since(jc.start)
	if p == nil {
		err = jc.q.pool.QueryRow(ctx, heartbeatSQL, jc.job.ID, jc.job.Attempt, interval).Scan(&n)
	} else {
		err = jc.q.pool.QueryRow(ctx, progressSQL, jc.job.ID, jc.job.Attempt, interval, p.percent, p.message).Scan(&n)
	}
	if err != nil {
		what := "heartbeat"
		if p != nil {
			what = "progress"
		}
		return fmt.Errorf("queue: recording %s of job %d: %w", what, jc.job.ID, err)
	}
	jc.touched.Store(true)
	if n == 0 {
		jc.lose()
		return ErrJobNotRunning
	}
	jc.lastBeat.Store(int64(time.Since(jc.start)))
	jc.confirm(sent)
	return nil
}

// clear ends the attempt's heartbeat, which gives River's completer 5 s
// to write the outcome before the rescuer may take the job back (see
// lastSignSQL). It runs after the worker returned, whatever its context's
// state, and retries a failed write for up to clearTimeout: while the
// database restarts, the attempt's last heartbeat ages, and once the
// server is back the rescuer would otherwise take back a job whose
// outcome River's completer is about to write.
func (jc *jobContext) clear() {
	ctx, cancel := context.WithTimeout(context.Background(), clearTimeout)
	defer cancel()
	err := retry(ctx, func() error {
		_, err := jc.q.pool.Exec(ctx,
			`UPDATE braid_job_progress SET heartbeat_at = NULL, updated_at = now() WHERE job_id = $1 AND attempt = $2 AND heartbeat_at IS NOT NULL`,
			jc.job.ID, jc.job.Attempt)
		return err
	})
	if err != nil {
		jc.q.logger.WarnContext(ctx, "queue: ending the heartbeat of an attempt failed",
			"job_id", jc.job.ID, "attempt", jc.job.Attempt, "error", err)
	}
}

// ownership is what the watch and the middleware learn of an attempt's
// hold on its job.
type ownership int

const (
	owned    ownership = iota // running as this attempt
	finished                  // finished by this attempt itself (JobCompleteTx and the like)
	lost                      // rescued, finished by someone else, or run by another attempt
	// cancelling: running as this attempt, and River's JobCancel has asked
	// for it to stop (cancel_attempted_at in its metadata).
	cancelling
)

// ErrCancelRequested is the cause of the context of an attempt that this
// process claimed (WorkClaimed) once River's JobCancel asked for its job to
// stop. River ends the attempts it fetched itself that way; the ownership
// watch does it for claimed ones, and the attempt's error then records the
// job as cancelled, as River's executor would.
var ErrCancelRequested = errors.New("queue: the job was cancelled while it ran")

// ownershipSQL reads the job row once. The attempt is told apart from a
// later one with the same number (River reuses the number after a snooze)
// by its start, attempted_at. A job finalized at this attempt without an
// error recorded for it was finished by the attempt itself; a rescue
// always records one.
const ownershipSQL = `
SELECT state::text, attempt = $2 AND attempted_at IS NOT DISTINCT FROM $3,
       COALESCE((errors[cardinality(errors)]->>'attempt')::integer, 0) = $2,
       metadata ? 'cancel_attempted_at'
FROM river_job WHERE id = $1`

// ownership reads whether the attempt still owns its job.
func (jc *jobContext) ownership(ctx context.Context) (ownership, error) {
	var (
		state                      string
		same, errorHere, cancelled bool
	)
	err := jc.q.pool.QueryRow(ctx, ownershipSQL, jc.job.ID, jc.job.Attempt, jc.job.AttemptedAt).Scan(&state, &same, &errorHere, &cancelled)
	if errors.Is(err, pgx.ErrNoRows) {
		return lost, nil // deleted
	}
	if err != nil {
		return owned, fmt.Errorf("queue: reading the state of job %d: %w", jc.job.ID, err)
	}
	switch {
	case !same:
		return lost, nil
	case rivertype.JobState(state) == rivertype.JobStateRunning && cancelled:
		return cancelling, nil
	case rivertype.JobState(state) == rivertype.JobStateRunning:
		return owned, nil
	case rivertype.JobState(state) == rivertype.JobStateCompleted,
		(rivertype.JobState(state) == rivertype.JobStateCancelled || rivertype.JobState(state) == rivertype.JobStateDiscarded) && !errorHere:
		return finished, nil
	default:
		return lost, nil
	}
}

// watch polls, a few times per heartbeat interval, whether the attempt
// still owns its job, and cancels the attempt's context with
// ErrJobNotRunning once it does not (after a rescue by braid or by River).
// A worker stuck without heartbeating, but waiting on its context, is thus
// released. When the attempt has finished its job itself (the workflow
// engine completes its turn's job in its own transaction before the worker
// returns), the watch stops quietly.
//
// A heartbeat or progress report checks ownership in the same statement,
// so the watch skips its poll while one is in flight or one confirmed
// ownership within the last poll period: an attempt that heartbeats costs
// at most one background query at a time. It returns a function that
// stops the watch and waits for it.
func (jc *jobContext) watch(ctx context.Context) func() {
	ctx, stop := context.WithCancel(ctx)
	period := max(jc.interval/4, 5*time.Millisecond)
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if jc.beating.Load() > 0 || time.Since(jc.start)-time.Duration(jc.lastBeat.Load()) < period {
				continue
			}
			jc.q.watchPolls.Add(1)
			sent := time.Since(jc.start)
			o, err := jc.ownership(ctx)
			if err != nil {
				continue // transient; the next tick tries again
			}
			switch o {
			case owned:
				jc.confirm(sent)
			case finished:
				return
			case cancelling:
				jc.confirm(sent)
				if jc.claimed {
					// River's JobCancel cannot reach an attempt that
					// its producer did not start: end it here.
					jc.cancelRequested.Store(true)
					jc.cancel(ErrCancelRequested)
					return
				}
			case lost:
				jc.q.logger.WarnContext(ctx, "queue: attempt lost its job; cancelling it",
					"job_id", jc.job.ID, "kind", jc.job.Kind, "attempt", jc.job.Attempt)
				jc.lose()
				return
			}
		}
	})
	return func() {
		stop()
		wg.Wait()
	}
}

// JobProgress returns the latest progress and heartbeat recorded for a job.
// An attempt of a heartbeat kind that returned after a heartbeat interval
// without confirming that it owned its job records the end of its
// heartbeat even if it never reported (percent and message empty).
// It returns an error matching rivertype.ErrNotFound when the job never
// reported.
func (q *Queue) JobProgress(ctx context.Context, jobID int64) (*JobProgress, error) {
	var p JobProgress
	var percent *int
	var message *string
	err := q.pool.QueryRow(ctx, `
		SELECT job_id, kind, attempt, percent, message, heartbeat_at, updated_at
		FROM braid_job_progress WHERE job_id = $1`, jobID).
		Scan(&p.JobID, &p.Kind, &p.Attempt, &percent, &message, &p.HeartbeatAt, &p.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("queue: no progress recorded for job %d: %w", jobID, rivertype.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("queue: reading progress of job %d: %w", jobID, err)
	}
	if percent != nil {
		p.Percent = *percent
	}
	if message != nil {
		p.Message = *message
	}
	return &p, nil
}
