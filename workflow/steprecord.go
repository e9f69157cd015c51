package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// errTaskNotRunning is returned when a step's outcome is not recorded
// because its task is no longer running (it was cancelled, or failed).
var errTaskNotRunning = errors.New("workflow: the task is no longer running; the step's outcome is not recorded")

// recorderMax bounds the step records one statement writes.
const recorderMax = 500

// recorders is how many statements writing step records may be in flight
// at once.
const recorders = 2

// stepWrite is the outcome of one step, to record.
type stepWrite struct {
	task     uuid.UUID
	name     string
	position int
	status   string // completed, failed or retrying
	output   json.RawMessage
	err      []byte
	attempts int
	// job, jobAttempt and jobAt name the attempt of the turn that writes
	// the record: its River job, the job's attempt and attempted_at. The
	// record is written only while that job still runs that attempt.
	job        int64
	jobAttempt int
	jobAt      *time.Time
}

// newRecorder returns the gather that records the steps of running turns.
func newRecorder(e *Engine) *gather[stepWrite, *stepRecord] {
	return newGather(recorderMax, recorders, e.cfg.OutcomeTimeout, e.recordSteps)
}

// recordStep writes a step's outcome, and returns it, or the outcome that
// won. The first final outcome wins: a write that loses returns the
// winner's record. The write is fenced on the task still running, under a
// share lock of the task row taken in the same statement, so that no step
// is recorded after Cancel commits, and a turn whose task was cancelled
// stops at its next step rather than running on. It is checked too, in the
// same statement, against the turn's own River job still running the
// turn's attempt: an attempt that lost its job (rescued while its process
// froze) records nothing, even once Retry has made its task pending
// again. That check takes no lock of the job's row, which River's
// completer, a heartbeat or Cancel may hold: the task row's lock is the
// fence. A task is made pending again only by Retry, once it failed or
// was cancelled, each under a lock of the task's row: a record whose
// statement saw the job still running takes the row's share lock before
// Retry's, and is written before the task fails, or not at all.
//
// A step is durable when recordStep returns: its record has committed.
// The records of steps that concurrent turns of this process finish at
// about the same time commit together, in one statement (recordSteps);
// the few that statement leaves out are written alone.
func (t *Task) recordStep(name string, position int, status string, output json.RawMessage, se *storedError, attempts int) (*stepRecord, error) {
	return t.recordStepOn(t.ctx, name, position, status, output, se, attempts)
}

// recordStepOn is recordStep on ctx rather than the turn's context.
func (t *Task) recordStepOn(ctx context.Context, name string, position int, status string, output json.RawMessage, se *storedError, attempts int) (*stepRecord, error) {
	w := stepWrite{task: t.id, name: name, position: position, status: status, output: output, attempts: attempts}
	w.job, w.jobAttempt, w.jobAt = t.jobAttempt()
	if se != nil {
		w.err, _ = json.Marshal(se)
	}
	rec, _, err := t.eng.recorder.call(ctx, w)
	if err == nil && rec == nil {
		rec, err = t.eng.recordStepAlone(ctx, w)
	}
	if err != nil {
		return nil, fmt.Errorf("workflow: recording step %q: %w", name, err)
	}
	t.steps[name] = rec
	return rec, nil
}

// jobAttempt names the attempt of the turn, which its records are
// checked against: its River job, the job's attempt and attempted_at.
func (t *Task) jobAttempt() (job int64, attempt int, at *time.Time) {
	if t.job == nil {
		return 0, 0, nil
	}
	return t.job.ID, t.job.Attempt, t.job.AttemptedAt
}

// attemptRunsSQL is the condition that the turn's attempt that job,
// attempt and at name (jobAttempt) still runs its River job, as the
// statement's snapshot shows it: the check of the records a turn writes
// while it runs (recordStep, SetEvent). It takes no lock of the job's row.
func attemptRunsSQL(job, attempt, at string) string {
	return `EXISTS (SELECT 1 FROM river_job j WHERE j.id = ` + job + ` AND j.state = 'running'
	                  AND j.attempt = ` + attempt + ` AND j.attempted_at IS NOT DISTINCT FROM ` + at + `)`
}

// recordStepsSQL writes step records given as arrays, each only while its
// task is pending or running, under a share lock of the task's row, and
// only while the River job of the turn that writes it runs the turn's
// attempt, as the statement's snapshot shows it (recordStep). With
// skipLocked, a task whose row another transaction has locked is left out
// rather than waited for.
func recordStepsSQL(skipLocked bool) string {
	wait := ""
	if skipLocked {
		wait = " SKIP LOCKED"
	}
	return `
		WITH u AS MATERIALIZED (
		    SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::jsonb[], $5::jsonb[], $6::int[], $7::int[],
		                         $8::bigint[], $9::int[], $10::timestamptz[])
		        AS u(task_id, name, status, output, error, attempts, position, job, job_attempt, job_at)
		), v AS MATERIALIZED (
		    SELECT u.* FROM u WHERE ` + attemptRunsSQL("u.job", "u.job_attempt", "u.job_at") + `
		), t AS (
		    SELECT id FROM braid_tasks
		     WHERE id = ANY(ARRAY(SELECT task_id FROM v)) AND status IN ('pending', 'running')
		       FOR SHARE` + wait + `
		)
		INSERT INTO braid_steps (task_id, name, kind, status, output, error, attempts, started_at, finished_at, position)
		SELECT v.task_id, v.name, 'step', v.status, v.output, v.error, v.attempts, braid_now(),
		       CASE WHEN v.status = 'retrying' THEN NULL ELSE braid_now() END, v.position
		  FROM v
		  JOIN t ON t.id = v.task_id
		ON CONFLICT (task_id, name) DO UPDATE
		   SET status = EXCLUDED.status, output = EXCLUDED.output, error = EXCLUDED.error,
		       attempts = EXCLUDED.attempts, finished_at = EXCLUDED.finished_at
		 WHERE braid_steps.status = 'retrying' AND braid_steps.kind = 'step'
		RETURNING task_id, name, status, output, error, attempts`
}

// recordSteps writes the records of many turns' steps in one statement,
// which commits them all. It never waits for a task's row lock: a write
// whose task another transaction holds locked gets no answer, nor does one that lost to an earlier record, one whose task
// no longer runs or whose turn's attempt no longer runs its job, or a
// second write of the same step. Those are written alone. So is every
// write of a statement that fails, so that one bad record fails only its
// own step.
func (e *Engine) recordSteps(ctx context.Context, batch []*gathered[stepWrite, *stepRecord]) error {
	n := len(batch)
	var (
		ids      = make([]uuid.UUID, 0, n)
		names    = make([]string, 0, n)
		statuses = make([]string, 0, n)
		outputs  = make([][]byte, 0, n)
		errs     = make([][]byte, 0, n)
		attempts = make([]int32, 0, n)
		pos      = make([]int32, 0, n)
		jobs     = make([]int64, 0, n)
		jobAtts  = make([]int32, 0, n)
		jobAts   = make([]*time.Time, 0, n)
		pending  = make(map[stepKey]*gathered[stepWrite, *stepRecord], n)
	)
	for _, r := range batch {
		k := stepKey{r.q.task, r.q.name}
		if pending[k] != nil {
			continue
		}
		pending[k] = r
		ids = append(ids, r.q.task)
		names = append(names, r.q.name)
		statuses = append(statuses, r.q.status)
		outputs = append(outputs, nullBytes(r.q.output))
		errs = append(errs, r.q.err)
		attempts = append(attempts, int32(r.q.attempts))
		pos = append(pos, int32(r.q.position))
		jobs = append(jobs, r.q.job)
		jobAtts = append(jobAtts, int32(r.q.jobAttempt))
		jobAts = append(jobAts, r.q.jobAt)
	}
	rows, err := e.pool.Query(ctx, recordStepsSQL(true), pgIDs(ids), names, statuses, outputs, errs, attempts, pos, jobs, jobAtts, jobAts)
	if err == nil {
		for rows.Next() {
			var k stepKey
			rec := &stepRecord{kind: "step"}
			var errRaw []byte
			if err = rows.Scan(&k.taskID, &k.name, &rec.status, &rec.output, &errRaw, &rec.attempts); err != nil {
				break
			}
			if len(errRaw) > 0 {
				_ = json.Unmarshal(errRaw, &rec.err)
			}
			if r := pending[k]; r != nil {
				r.a = rec
			}
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	if err != nil {
		if n > 1 {
			e.logger.WarnContext(ctx, "workflow: a statement recording steps failed; recording them one at a time", "steps", n, "error", err)
		}
		for _, r := range batch {
			r.a = nil
		}
	}
	return nil
}

// recordStepAlone writes one step's record and waits for its task's row
// lock if it must. When the write loses to an earlier final record
// (completed or failed), it returns that record; when the task no longer
// runs, errTaskNotRunning. A row that only waits for a step's next attempt
// (retrying) is no winner: a final write loses to nothing but a final
// record, so such a row left in place means that the task no longer runs,
// and the attempt's outcome was not recorded. A write whose turn's attempt
// no longer runs its job records nothing either: it returns
// errTaskNotRunning unless a final record won.
func (e *Engine) recordStepAlone(ctx context.Context, w stepWrite) (*stepRecord, error) {
	rec := &stepRecord{kind: "step"}
	var task uuid.UUID
	var name string
	var errRaw []byte
	err := e.pool.QueryRow(ctx, recordStepsSQL(false),
		pgIDs([]uuid.UUID{w.task}), []string{w.name}, []string{w.status}, [][]byte{nullBytes(w.output)}, [][]byte{w.err},
		[]int32{int32(w.attempts)}, []int32{int32(w.position)}, []int64{w.job}, []int32{int32(w.jobAttempt)}, []*time.Time{w.jobAt}).
		Scan(&task, &name, &rec.status, &rec.output, &errRaw, &rec.attempts)
	if errors.Is(err, pgx.ErrNoRows) {
		// Another turn recorded this step first: its result wins. Or the
		// task is no longer running, and nothing was recorded.
		err = e.pool.QueryRow(ctx, `SELECT kind, status, output, error, attempts FROM braid_steps WHERE task_id = $1 AND name = $2`,
			w.task, w.name).Scan(&rec.kind, &rec.status, &rec.output, &errRaw, &rec.attempts)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && rec.kind == "step" && !finished(rec.status)) {
			err = errTaskNotRunning
		}
	}
	if err != nil {
		return nil, err
	}
	if len(errRaw) > 0 {
		_ = json.Unmarshal(errRaw, &rec.err)
	}
	return rec, nil
}
