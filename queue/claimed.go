package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"runtime/debug"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivertype"
)

// SchedulerIntervalDefault is River's scheduler interval, which braid does
// not change: a retry or a snooze due sooner than this is made available
// at once rather than scheduled, as River does.
const SchedulerIntervalDefault = 5 * time.Second

// ClaimTx claims jobs for this process in tx, by ID, as River's fetch
// claims a job: each job of the list that is available (or pending: see
// QueueClaim) moves to running,
// its attempt counted, its attempted_at set to the moment of the claim on
// the database clock (not the transaction's start) and this client added
// to attempted_by. Jobs that are not available, whose kind declares no
// heartbeat (Config.Heartbeats), whose queue this Queue does not work
// (see Works), or whose queue is paused (River's QueuePause), are left to
// River's fetch. It returns the claimed jobs.
//
// A claimed job belongs to this process once tx commits, and must then be
// worked with WorkClaimed. Should the process die first, nothing is lost:
// the job is running without heartbeats, so the heartbeat rescuer returns
// it to the queue after HeartbeatMisses intervals, and another process
// works it. That is why only kinds with a declared heartbeat are claimed.
func (q *Queue) ClaimTx(ctx context.Context, tx pgx.Tx, ids []int64) ([]*rivertype.JobRow, error) {
	var jobs []*rivertype.JobRow
	b := &pgx.Batch{}
	if !q.QueueClaim(b, ids, func(claimed []*rivertype.JobRow) { jobs = claimed }) {
		return nil, nil
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("queue: claiming %d jobs: %w", len(ids), err)
	}
	return jobs, nil
}

// QueueClaim queues on b the statement of ClaimTx, so that a caller that
// sends other statements in the same transaction claims its jobs in the
// same round trip; once b is sent, claimed gets the claimed jobs. It
// queues nothing and returns false when there is nothing to claim, or
// when the Queue does not work jobs.
//
// A job inserted pending (river.InsertOpts.Pending) is claimed too: a
// caller that inserts jobs only to claim them in the same transaction
// inserts them pending, which River's fetch never takes and which wakes
// no fetcher. Such a job that the statement does not claim (its kind is
// not claimable, or its queue not worked here) is made available, so that
// none stays pending. Insert jobs pending only when [Queue.Claims] their
// kind and [Queue.Works] their queue.
func (q *Queue) QueueClaim(b *pgx.Batch, ids []int64, claimed func([]*rivertype.JobRow)) bool {
	if len(ids) == 0 || !q.working {
		return false
	}
	b.Queue(`
		WITH claimed AS (
		    UPDATE river_job
		       SET state = 'running', attempt = attempt + 1, attempted_at = clock_timestamp(),
		           attempted_by = array_append(attempted_by, $2::text)
		     WHERE id = ANY($1) AND state IN ('available', 'pending') AND kind = ANY($3) AND queue = ANY($4)
		       AND NOT EXISTS (SELECT 1 FROM river_queue p WHERE p.name = river_job.queue AND p.paused_at IS NOT NULL)
		    RETURNING id, args, attempt, attempted_at, attempted_by, created_at, kind, max_attempts,
		              metadata, priority, queue, scheduled_at, tags, unique_key, state
		), released AS (
		    UPDATE river_job SET state = 'available'
		     WHERE id = ANY($1) AND state = 'pending' AND id NOT IN (SELECT id FROM claimed)
		)
		SELECT * FROM claimed`,
		ids, q.client.ID(), q.declaredKinds, q.workedNames).Query(func(rows pgx.Rows) error {
		jobs, err := collectClaimed(rows)
		claimed(jobs)
		return err
	})
	return true
}

// ClaimedInsert is a job that QueueInsertClaimed inserts already claimed.
type ClaimedInsert struct {
	// Kind is the job's kind; the Queue must claim it (Claims).
	Kind string
	// EncodedArgs is the job's args, encoded as River encodes them.
	EncodedArgs []byte
	// Queue is the job's queue; the Queue must work it (Works).
	Queue string
	// Priority is River's priority, 1 to 4.
	Priority int
	// MaxAttempts is how many attempts the job gets, at least 1.
	MaxAttempts int
	// Tags are the job's tags, each as River's insert accepts them (see
	// claimedTag).
	Tags []string
	// UniqueKey and UniqueStates are River's unique key and the bitmask of
	// the states in which it is unique. A job whose key is taken by a job
	// in one of those states is not inserted.
	UniqueKey    []byte
	UniqueStates byte
}

// claimedTag and maxTagBytes are the rule River's insert applies to a
// tag, which QueueInsertClaimed applies in its place. The statement also
// relies on it: it sends each job's tags joined by commas, which a tag
// never holds.
var claimedTag = regexp.MustCompile(`\A[\w][\w\-]+[\w]\z`)

const maxTagBytes = 255

// QueueInsertClaimed queues on b one statement that inserts jobs already
// claimed by this process: running, on their first attempt, attempted now
// on the database clock by this client, as if River had inserted them
// available and ClaimTx had claimed them in the same transaction, but in
// one statement and without the round trip that River's insert takes. A
// job whose unique key a job in one of its unique states holds is left out.
// A job whose queue is paused (River's QueuePause) is inserted available
// instead, unclaimed, as River's insert would have left it: River's fetch
// takes it once the queue is resumed. Once b is sent, claimed gets the
// inserted jobs, each with its state; only those running are claimed.
//
// As with ClaimTx, a job belongs to this process once the transaction
// commits, must then be worked with WorkClaimed, and goes back to the queue
// through the heartbeat rescuer should the process die first. The jobs do
// not go through River's insert: River's insert middleware and hooks do not
// see them, and no fetcher is woken, as none needs to be. It returns an
// error, and queues nothing, when a job's kind is not one this Queue
// claims or its queue not one it works.
func (q *Queue) QueueInsertClaimed(b *pgx.Batch, jobs []ClaimedInsert, claimed func([]*rivertype.JobRow)) error {
	if len(jobs) == 0 {
		return nil
	}
	n := len(jobs)
	var (
		kinds, queues, tags = make([]string, n), make([]string, n), make([]string, n)
		args, keys          = make([][]byte, n), make([][]byte, n)
		prios, maxAttempts  = make([]int16, n), make([]int16, n)
		states              = make([]int32, n)
	)
	for i, j := range jobs {
		if !q.Claims(j.Kind) {
			return fmt.Errorf("queue: cannot insert a claimed job of kind %q: this Queue claims no such jobs", j.Kind)
		}
		if !q.Works(j.Queue) {
			return fmt.Errorf("queue: cannot insert a claimed job in queue %q: this Queue does not work it", j.Queue)
		}
		if j.MaxAttempts < 1 || j.Priority < 1 || j.Priority > 4 {
			return fmt.Errorf("queue: a claimed job of kind %q needs max attempts of at least 1 (got %d) and a priority of 1 to 4 (got %d)", j.Kind, j.MaxAttempts, j.Priority)
		}
		for _, tag := range j.Tags {
			if len(tag) > maxTagBytes || !claimedTag.MatchString(tag) {
				return fmt.Errorf("queue: a claimed job of kind %q has tag %q: a tag has at most %d bytes and must match %s, as River's insert requires", j.Kind, tag, maxTagBytes, claimedTag)
			}
		}
		kinds[i], queues[i], args[i], keys[i] = j.Kind, j.Queue, j.EncodedArgs, j.UniqueKey
		prios[i], maxAttempts[i], states[i] = int16(j.Priority), int16(min(j.MaxAttempts, math.MaxInt16)), int32(j.UniqueStates)
		tags[i] = strings.Join(j.Tags, ",")
	}
	// The conflict target is River's unique index (river_job_unique_idx),
	// as River's own insert names it.
	// A job of a paused queue goes in available, unclaimed.
	b.Queue(`
		INSERT INTO river_job (args, kind, max_attempts, priority, queue, tags, unique_key, unique_states,
		                       state, attempt, attempted_at, attempted_by)
		SELECT u.args, u.kind, u.max_attempts, u.priority, u.queue, string_to_array(u.tags, ',')::varchar(255)[],
		       nullif(u.unique_key, ''::bytea), nullif(u.unique_states, 0)::bit(8),
		       CASE WHEN p.name IS NULL THEN 'running' ELSE 'available' END::river_job_state,
		       CASE WHEN p.name IS NULL THEN 1 ELSE 0 END,
		       CASE WHEN p.name IS NULL THEN clock_timestamp() END,
		       CASE WHEN p.name IS NULL THEN ARRAY[$9::text] END
		  FROM unnest($1::jsonb[], $2::text[], $3::smallint[], $4::smallint[], $5::text[], $6::text[], $7::bytea[], $8::int[])
		       AS u(args, kind, max_attempts, priority, queue, tags, unique_key, unique_states)
		  LEFT JOIN river_queue p ON p.name = u.queue AND p.paused_at IS NOT NULL
		    ON CONFLICT (unique_key)
		 WHERE unique_key IS NOT NULL AND unique_states IS NOT NULL AND river_job_state_in_bitmask(unique_states, state)
		    DO NOTHING
		RETURNING id, args, attempt, attempted_at, attempted_by, created_at, kind, max_attempts,
		          metadata, priority, queue, scheduled_at, tags, unique_key, state`,
		args, kinds, maxAttempts, prios, queues, tags, keys, states, q.client.ID()).Query(func(rows pgx.Rows) error {
		jobs, err := collectClaimed(rows)
		claimed(jobs)
		return err
	})
	return nil
}

// Claims reports whether ClaimTx claims jobs of kind: the Queue works
// jobs and kind declares a heartbeat.
func (q *Queue) Claims(kind string) bool {
	return q.working && q.intervals[kind] > 0
}

// Works reports whether this Queue works the jobs of queue name: it works
// jobs, and name is one of Config.Queues. ClaimTx and ClaimAvailableTx
// claim only jobs of the queues it works, as River's fetch takes only
// those: a queue that only some processes work keeps its jobs to them.
func (q *Queue) Works(name string) bool {
	return q.working && q.worked[name]
}

// ClaimAvailableTx claims for this process, in tx, up to n jobs of queue
// name as River's fetch would: it takes the first n available jobs of the
// queue in River's order (priority, scheduled_at, id), skipping locked ones,
// and claims those among them whose kind is one of kinds and declares a
// heartbeat. A job of another kind ahead in the queue is left to River's
// fetch, so priorities hold. It claims nothing while the queue is paused
// (River's QueuePause), as River's fetch takes nothing from a paused
// queue. A worker slot that has just finished a job
// takes its next one this way, without waiting for River's fetch loop; the
// claimed jobs must be worked with WorkClaimed, as with ClaimTx.
func (q *Queue) ClaimAvailableTx(ctx context.Context, tx pgx.Tx, name string, n int, kinds []string) ([]*rivertype.JobRow, error) {
	var jobs []*rivertype.JobRow
	b := &pgx.Batch{}
	if !q.QueueClaimAvailable(b, name, n, kinds, func(claimed []*rivertype.JobRow) { jobs = claimed }) {
		return nil, nil
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("queue: claiming jobs of queue %q: %w", name, err)
	}
	return jobs, nil
}

// QueueClaimAvailable queues on b the statement of ClaimAvailableTx, as
// QueueClaim does for ClaimTx. It queues nothing and returns false when
// there is nothing to claim, or when this Queue does not work queue name.
func (q *Queue) QueueClaimAvailable(b *pgx.Batch, name string, n int, kinds []string, claimed func([]*rivertype.JobRow)) bool {
	if n <= 0 || !q.Works(name) {
		return false
	}
	var claimable []string
	for _, k := range kinds {
		if q.intervals[k] > 0 {
			claimable = append(claimable, k)
		}
	}
	if len(claimable) == 0 {
		return false
	}
	// The jobs are read again by the IDs the claim picked, and the kind is
	// tested as no index condition (IS TRUE): the statement may run on a
	// generic plan made while river_job was young (workflow's outcome
	// batch), which could otherwise read every job of the kind.
	b.Queue(`
		WITH next AS (
		    SELECT id FROM river_job
		     WHERE state = 'available' AND queue = $1 AND scheduled_at <= clock_timestamp()
		       AND NOT EXISTS (SELECT 1 FROM river_queue p WHERE p.name = $1 AND p.paused_at IS NOT NULL)
		     ORDER BY priority, scheduled_at, id
		     LIMIT $2
		       FOR UPDATE SKIP LOCKED
		)
		UPDATE river_job j
		   SET state = 'running', attempt = j.attempt + 1, attempted_at = clock_timestamp(),
		       attempted_by = array_append(j.attempted_by, $3::text)
		  FROM next
		 WHERE j.id = ANY(ARRAY(SELECT id FROM next)) AND j.id = next.id AND (j.kind = ANY($4)) IS TRUE
		RETURNING j.id, j.args, j.attempt, j.attempted_at, j.attempted_by, j.created_at, j.kind, j.max_attempts,
		          j.metadata, j.priority, j.queue, j.scheduled_at, j.tags, j.unique_key, j.state`,
		name, n, q.client.ID(), claimable).Query(func(rows pgx.Rows) error {
		jobs, err := collectClaimed(rows)
		claimed(jobs)
		return err
	})
	return true
}

// collectClaimed reads the rows of a claim.
func collectClaimed(rows pgx.Rows) ([]*rivertype.JobRow, error) {
	jobs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*rivertype.JobRow, error) {
		j := &rivertype.JobRow{}
		var priority int16
		var state string
		err := row.Scan(&j.ID, &j.EncodedArgs, &j.Attempt, &j.AttemptedAt, &j.AttemptedBy, &j.CreatedAt, &j.Kind,
			&j.MaxAttempts, &j.Metadata, &priority, &j.Queue, &j.ScheduledAt, &j.Tags, &j.UniqueKey, &state)
		j.Priority, j.State = int(priority), rivertype.JobState(state)
		return j, err
	})
	if err != nil {
		return nil, fmt.Errorf("queue: claiming jobs: %w", err)
	}
	return jobs, nil
}

// ClaimedWork is how WorkClaimed works a claimed job.
type ClaimedWork struct {
	// Work does the job's work, as a river.Worker's Work does: nil
	// completes the job (unless the work finished it itself, as
	// river.JobCompleteTx does), river.JobSnooze and river.JobCancel mean
	// what they mean to River, an error wrapping ErrJobNotRunning records
	// nothing, and any other error or a panic fails the attempt.
	Work func(ctx context.Context) error

	// Timeout bounds Work: River's job timeout. Zero or less means none.
	Timeout time.Duration

	// NextRetry is the worker's retry policy (river.Worker's NextRetry). A
	// zero time, or a nil NextRetry, uses the Queue's retry policy.
	NextRetry func(job *rivertype.JobRow) time.Time

	// FinishedOnSuccess says that Work, when it returns nil, has always
	// finished the job itself (as with river.JobCompleteTx), so there is
	// nothing left to record.
	FinishedOnSuccess bool
}

// WorkClaimed works a job that ClaimTx claimed for this process, in the
// calling goroutine, the way River's executor works a fetched one: in the
// Queue's middleware (the attempt span for traced kinds, the metrics, the
// job context that Heartbeat, Progress and the ownership watch use), with
// the timeout and a panic caught, and then records the outcome with the
// statement River's completer uses, through the same pilot (errors
// sanitised), fenced on the attempt: an attempt that lost its job records
// nothing. It returns the work's error, for logs.
//
// The job does not go through River's producer: it takes none of River's
// worker slots (the caller works it in a slot it holds, or bounds the
// claimed jobs it runs itself), emits no subscription events, and is not
// cancelled by River's JobCancel while it runs; the ownership watch ends it
// once its job is no longer running.
func (q *Queue) WorkClaimed(ctx context.Context, job *rivertype.JobRow, w ClaimedWork) error {
	start := time.Now()
	var (
		err        error
		superseded bool
		panicVal   any
		stack      string
	)
	func() {
		defer func() {
			if r := recover(); r != nil {
				panicVal, stack = r, string(debug.Stack())
			}
		}()
		superseded, err = q.attempt(ctx, job, func(ctx context.Context) error {
			if w.Timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, w.Timeout)
				defer cancel()
			}
			return w.Work(ctx)
		}, true)
	}()
	if superseded || (err == nil && panicVal == nil && w.FinishedOnSuccess) {
		return err
	}
	params := q.claimedOutcome(job, start, err, panicVal, stack, w.NextRetry)
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimedOutcomeTimeout)
	defer cancel()
	if rerr := q.recordClaimed(octx, job, params); rerr != nil {
		// The job stays running without heartbeats: the heartbeat rescuer
		// returns it to the queue.
		q.logger.ErrorContext(octx, "queue: recording the outcome of a claimed job failed; the rescuer will take it back",
			"job_id", job.ID, "kind", job.Kind, "attempt", job.Attempt, "error", rerr)
	}
	if panicVal != nil {
		return fmt.Errorf("panic: %v", panicVal)
	}
	return err
}

// claimedOutcomeTimeout bounds the statement that records a claimed job's
// outcome.
const claimedOutcomeTimeout = 30 * time.Second

// claimedOutcome is the state River's executor would give the job after an
// attempt that returned err (or panicked with panicVal): see
// river's JobExecutor.reportResult, whose rules it follows.
func (q *Queue) claimedOutcome(job *rivertype.JobRow, start time.Time, err error, panicVal any, stack string, nextRetry func(*rivertype.JobRow) time.Time) *riverdriver.JobSetStateIfRunningParams {
	now := time.Now()
	var snooze *rivertype.JobSnoozeError
	if errors.As(err, &snooze) {
		md, _ := json.Marshal(map[string]any{"snoozes": snoozeCount(job.Metadata) + 1})
		at := now.Add(snooze.Duration)
		if snooze.Duration <= SchedulerIntervalDefault {
			return riverdriver.JobSetStateSnoozedAvailable(job.ID, at, job.Attempt-1, md)
		}
		return riverdriver.JobSetStateSnoozed(job.ID, at, job.Attempt-1, md)
	}
	if err == nil && panicVal == nil {
		return riverdriver.JobSetStateCompleted(job.ID, now, nil)
	}
	text := ""
	if panicVal != nil {
		text = fmt.Sprintf("%v", panicVal)
	} else {
		text = err.Error()
	}
	errData, _ := json.Marshal(rivertype.AttemptError{At: start, Attempt: job.Attempt, Error: text, Trace: stack})
	var cancelled *rivertype.JobCancelError
	switch {
	case errors.As(err, &cancelled):
		return riverdriver.JobSetStateCancelled(job.ID, now, errData, nil)
	case job.Attempt >= job.MaxAttempts:
		return riverdriver.JobSetStateDiscarded(job.ID, now, errData, nil)
	}
	var at time.Time
	if nextRetry != nil {
		at = nextRetry(job)
	}
	if at.IsZero() {
		at = q.retry.NextRetry(job)
	}
	if at.Before(now) {
		at = (&river.DefaultClientRetryPolicy{}).NextRetry(job)
	}
	if at.Sub(now) <= SchedulerIntervalDefault {
		return riverdriver.JobSetStateErrorAvailable(job.ID, at, errData, nil)
	}
	return riverdriver.JobSetStateErrorRetryable(job.ID, at, errData, nil)
}

// snoozeCount reads River's snooze count from a job's metadata.
func snoozeCount(metadata []byte) int64 {
	var md struct {
		Snoozes int64 `json:"snoozes"`
	}
	_ = json.Unmarshal(metadata, &md)
	return md.Snoozes
}

// recordClaimed writes a claimed job's outcome in a transaction that first
// locks the job row by ID, attempt and attempted_at: an attempt that lost
// its job (rescued and taken by another attempt) writes nothing. A job the
// work finished itself is left as it is.
func (q *Queue) recordClaimed(ctx context.Context, job *rivertype.JobRow, p *riverdriver.JobSetStateIfRunningParams) error {
	return pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error {
		var owned bool
		err := tx.QueryRow(ctx, `
			SELECT true FROM river_job
			 WHERE id = $1 AND attempt = $2 AND attempted_at IS NOT DISTINCT FROM $3 AND state = 'running'
			   FOR UPDATE`, job.ID, job.Attempt, job.AttemptedAt).Scan(&owned)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		_, err = q.pilot.JobSetStateIfRunningMany(ctx, q.driver.UnwrapExecutor(tx), &riverdriver.JobSetStateIfRunningManyParams{
			ID:              []int64{p.ID},
			Attempt:         []*int{p.Attempt},
			ErrData:         [][]byte{p.ErrData},
			FinalizedAt:     []*time.Time{p.FinalizedAt},
			MetadataDoMerge: []bool{len(p.MetadataUpdates) > 0},
			MetadataUpdates: [][]byte{p.MetadataUpdates},
			ScheduledAt:     []*time.Time{p.ScheduledAt},
			State:           []rivertype.JobState{p.State},
		})
		return err
	})
}

// CompleteTx completes running jobs in tx, as river.JobCompleteTx does for
// one, in one statement: a worker that records its work's result in its
// own transaction completes its job there, so that the result and the
// completion commit together. A job is completed only while it still runs
// the attempt given (its attempt and attempted_at): jobs no longer running
// that attempt are left alone. Once tx has committed, call Finished with
// the same jobs.
func (q *Queue) CompleteTx(ctx context.Context, tx pgx.Tx, jobs []*rivertype.JobRow) error {
	if len(jobs) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	q.QueueComplete(b, jobs)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("queue: completing %d jobs: %w", len(jobs), err)
	}
	return nil
}

// QueueComplete queues on b the statement of CompleteTx, so that a caller
// that sends other statements in the same transaction completes its jobs
// in the same round trip. Nothing is queued for no jobs.
func (q *Queue) QueueComplete(b *pgx.Batch, jobs []*rivertype.JobRow) {
	if len(jobs) == 0 {
		return
	}
	ids := make([]int64, len(jobs))
	attempts := make([]int32, len(jobs))
	ats := make([]*time.Time, len(jobs))
	for i, j := range jobs {
		ids[i], attempts[i], ats[i] = j.ID, int32(j.Attempt), j.AttemptedAt
	}
	b.Queue(`
		UPDATE river_job j SET state = 'completed', finalized_at = now()
		  FROM unnest($1::bigint[], $2::int[], $3::timestamptz[]) AS u(id, attempt, at)
		 WHERE j.id = u.id AND j.attempt = u.attempt AND j.attempted_at IS NOT DISTINCT FROM u.at
		   AND j.state = 'running'`, ids, attempts, ats)
}

// Finished tells the Queue that jobs fetched by River were completed by a
// committed CompleteTx, so that River's completer does not write their
// completion again when their workers return. Leave out jobs that
// WorkClaimed works: River never completes those.
func (q *Queue) Finished(jobs []*rivertype.JobRow) {
	if len(jobs) == 0 {
		return
	}
	ids := make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	q.pilot.markFinished(ids)
}
