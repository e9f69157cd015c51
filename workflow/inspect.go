package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// RunInfo describes a run, for operators.
type RunInfo struct {
	ID             string          `json:"id"`
	Workflow       string          `json:"workflow"`
	Status         string          `json:"status"`
	Input          json.RawMessage `json:"input,omitempty"`
	Output         json.RawMessage `json:"output,omitempty"`
	Error          string          `json:"error,omitempty"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	TraceID        string          `json:"trace_id,omitempty"`
	CreatedAt      time.Time       `json:"created_at"`
	StartedAt      *time.Time      `json:"started_at,omitempty"`
	FinishedAt     *time.Time      `json:"finished_at,omitempty"`
	// Timeout is the run's timeout (StartOpts.Timeout, WithRunTimeout),
	// and DeadlineAt the moment it is cancelled unless it has finished;
	// both are zero for a run without one.
	Timeout    time.Duration `json:"timeout,omitempty"`
	DeadlineAt *time.Time    `json:"deadline_at,omitempty"`
	// Tasks are filled by Engine.Run, in creation order; ListRuns leaves
	// them empty.
	Tasks []TaskInfo `json:"tasks,omitempty"`
	// TaskCount is how many tasks the run has, filled with Tasks: more
	// than len(Tasks) when InspectFirst left the later ones out.
	TaskCount int `json:"task_count,omitempty"`
	// Events are the events the run set with SetEvent, sorted by key;
	// filled by Engine.Run, as Tasks are.
	Events []RunEventInfo `json:"events,omitempty"`
}

// TaskInfo describes a task of a run.
type TaskInfo struct {
	ID       string `json:"id"`
	ParentID string `json:"parent_id,omitempty"`
	Key      string `json:"key"`
	Workflow string `json:"workflow"`
	Status   string `json:"status"`
	Attempt  int    `json:"attempt"`
	// MaxAttempts is how many attempts each of the task's turns gets.
	MaxAttempts int `json:"max_attempts"`
	// Turns counts the turns the task has ended (suspended or finished).
	Turns     int    `json:"turns"`
	Remaining int    `json:"remaining"`
	Error     string `json:"error,omitempty"`
	// ErrorKind is "panic" when the error is a panic's, with its stack in
	// Error.
	ErrorKind string `json:"error_kind,omitempty"`
	// FailedStep names the step whose error failed the task, when the
	// task's code returned a step's error. Such a step has no retry
	// policy of its own and so no record among Steps.
	FailedStep string          `json:"failed_step,omitempty"`
	Input      json.RawMessage `json:"input,omitempty"`
	Output     json.RawMessage `json:"output,omitempty"`
	CreatedAt  time.Time       `json:"created_at"`
	StartedAt  *time.Time      `json:"started_at,omitempty"`
	FinishedAt *time.Time      `json:"finished_at,omitempty"`
	Steps      []StepInfo      `json:"steps,omitempty"`
	// TurnJobs are the task's turns as River jobs, oldest first, with the
	// errors of their failed attempts. River's job cleaner removes
	// finished jobs after its retention period; the list then holds only
	// the turns still kept.
	TurnJobs []TurnInfo `json:"turn_jobs,omitempty"`
	// Waits are the intervals the task spent suspended: on a delay, or on
	// its children. See WaitInfo.
	Waits []WaitInfo `json:"waits,omitempty"`
	// Node is set for a node of a DAG (a child of the DAG's root task, Key
	// its node name). DependsOn names the nodes it waits for; an
	// on-failure node (OnFailure) waits for every other node, and runs
	// only if the DAG failed. SkipReason says why a
	// skipped node did not run: the condition that was false, the
	// dependencies that were all skipped, or the node whose failure failed
	// the DAG.
	Node       bool     `json:"node,omitempty"`
	OnFailure  bool     `json:"on_failure,omitempty"`
	DependsOn  []string `json:"depends_on,omitempty"`
	SkipReason string   `json:"skip_reason,omitempty"`
}

// StepInfo describes a recorded step or delay of a task.
type StepInfo struct {
	Name     string          `json:"name"`
	Kind     string          `json:"kind"`
	Status   string          `json:"status"`
	Attempts int             `json:"attempts"`
	Output   json.RawMessage `json:"output,omitempty"`
	// Error is the full text of the step's error, a panic's stack
	// included.
	Error string `json:"error,omitempty"`
	// ErrorKind is "panic" when the error is a panic's.
	ErrorKind string `json:"error_kind,omitempty"`
	// ResumeAt is when a delay is due, or when a wait on a signal or an
	// event times out (nil for a wait without a timeout).
	ResumeAt *time.Time `json:"resume_at,omitempty"`
	// WaitOn is, for a wait on a message (kind signal or event), the
	// signal's name or the event's topic; Filter, an event wait's filter.
	WaitOn string `json:"wait_on,omitempty"`
	Filter string `json:"filter,omitempty"`
	// CreatedAt is when the step was first recorded; for a delay, the
	// moment its task suspended on it.
	CreatedAt  time.Time  `json:"created_at"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// TurnInfo is one turn of a task: a River job of kind TaskKind.
type TurnInfo struct {
	JobID       int64  `json:"job_id"`
	State       string `json:"state"` // River's job state
	Attempt     int    `json:"attempt"`
	MaxAttempts int    `json:"max_attempts"`
	// CreatedAt is when the turn was inserted: when its task was started
	// or woken.
	CreatedAt time.Time `json:"created_at"`
	// AttemptedAt is when its latest attempt started.
	AttemptedAt *time.Time `json:"attempted_at,omitempty"`
	// FinalizedAt is when it ended: completed (the task suspended or
	// finished), discarded (its attempts ran out) or cancelled.
	FinalizedAt *time.Time `json:"finalized_at,omitempty"`
	// Errors are the errors of its failed attempts, oldest first.
	Errors []rivertype.AttemptError `json:"errors,omitempty"`
}

// Wait kinds.
const (
	// WaitDelay is a task suspended on a delay step.
	WaitDelay = "delay"
	// WaitChildren is a task suspended until the children it awaits
	// finish.
	WaitChildren = "children"
)

// WaitInfo is an interval a task spent suspended.
//
// A delay's wait runs from its creation (the task suspended on it) to the
// moment the delay processor fired it, or, while it waits, has no end and
// ResumeAt says when it is due. A wait on children runs from the end of
// the turn that suspended to the insertion of the continuation turn that
// the last finishing child made; it is derived from the task's turn jobs,
// so it is missing once River's job cleaner has removed them, except for
// the wait in progress, which starts at the last turn's end or else at the
// task's suspension.
type WaitInfo struct {
	Kind string `json:"kind"` // WaitDelay or WaitChildren
	// Name is the delay step's name.
	Name  string     `json:"name,omitempty"`
	Start time.Time  `json:"start"`
	End   *time.Time `json:"end,omitempty"`
	// ResumeAt is when a delay is due.
	ResumeAt *time.Time `json:"resume_at,omitempty"`
	// Status is "waiting" while the task waits, "done" once woken, or a
	// delay step's status (waiting, fired, cancelled).
	Status string `json:"status"`
}

// ErrInvalidRunFilter is wrapped by the errors of ListRuns and CountRuns for
// a filter they cannot apply; the message names the field and the limit.
var ErrInvalidRunFilter = errors.New("workflow: invalid run filter")

// RunStatuses lists the statuses a run can have, as ListRuns filters them.
var RunStatuses = []string{"pending", "running", "waiting", "completed", "failed", "cancelled"}

// Limits of RunFilter.
const (
	RunFilterLimitDefault = 100
	RunFilterLimitMax     = 10_000
)

// RunFilter selects runs for ListRuns. The zero value lists the newest
// runs.
type RunFilter struct {
	Status   string // one status, or "" for all
	Workflow string
	// IdempotencyKey selects the run started with this key.
	IdempotencyKey string
	// Limit is the most runs returned. Default 100, at most 10,000.
	Limit int
	// Offset skips that many runs of the list, for paging; 0 or more.
	Offset int
	// Before lists runs created before this time. Runs started in one
	// transaction share their creation time, so a page that ends among
	// them does not mark where the next begins: page with Offset.
	Before time.Time
	// CreatedAfter and CreatedBefore bound the runs' creation time: at or
	// after CreatedAfter, and before CreatedBefore. Zero means unbounded.
	CreatedAfter  time.Time
	CreatedBefore time.Time
}

// check validates the filter and fills the default limit.
func (f *RunFilter) check(forCount bool) error {
	if f.Limit == 0 {
		f.Limit = RunFilterLimitDefault
	}
	if !forCount && (f.Limit < 0 || f.Limit > RunFilterLimitMax) {
		return fmt.Errorf("%w: limit %d is outside 1-%d", ErrInvalidRunFilter, f.Limit, RunFilterLimitMax)
	}
	if f.Offset < 0 {
		return fmt.Errorf("%w: offset %d is negative", ErrInvalidRunFilter, f.Offset)
	}
	for _, t := range []struct{ name, v string }{{"workflow", f.Workflow}, {"idempotency key", f.IdempotencyKey}} {
		if !isText(t.v) {
			return fmt.Errorf("%w: %s %q is not UTF-8 text without NUL characters", ErrInvalidRunFilter, t.name, t.v)
		}
	}
	if f.Status != "" && !strings.Contains(" "+strings.Join(RunStatuses, " ")+" ", " "+f.Status+" ") {
		return fmt.Errorf("%w: unknown run status %q (want pending, running, waiting, completed, failed or cancelled)", ErrInvalidRunFilter, f.Status)
	}
	if !f.CreatedAfter.IsZero() && !f.CreatedBefore.IsZero() && !f.CreatedAfter.Before(f.CreatedBefore) {
		return fmt.Errorf("%w: created after %s is not before created before %s", ErrInvalidRunFilter,
			f.CreatedAfter.Format(time.RFC3339Nano), f.CreatedBefore.Format(time.RFC3339Nano))
	}
	return nil
}

// where is the filter's WHERE clause over braid_runs r and its arguments,
// from $1.
func (f *RunFilter) where() (string, []any) {
	opt := func(t time.Time) any {
		if t.IsZero() {
			return nil
		}
		return t
	}
	return `($1 = '' OR ` + runStatusSQL + ` = $1) AND ($2 = '' OR r.workflow = $2) AND ($3 = '' OR r.idempotency_key = $3)
		   AND ($4::timestamptz IS NULL OR r.created_at < $4) AND ($5::timestamptz IS NULL OR r.created_at >= $5)
		   AND ($6::timestamptz IS NULL OR r.created_at < $6)`,
		[]any{f.Status, f.Workflow, f.IdempotencyKey, opt(f.Before), opt(f.CreatedAfter), opt(f.CreatedBefore)}
}

func errorMessage(raw []byte) string {
	msg, _ := errorText(raw)
	return msg
}

// errorText is a stored error's full message and its kind.
func errorText(raw []byte) (msg, kind string) {
	if len(raw) == 0 {
		return "", ""
	}
	var se storedError
	if json.Unmarshal(raw, &se) == nil {
		return se.Message, se.Kind
	}
	return string(raw), ""
}

// failedStep reads the step named by a task's stored error.
func failedStep(raw []byte) string {
	var se storedError
	if len(raw) == 0 || json.Unmarshal(raw, &se) != nil {
		return ""
	}
	return se.Step
}

func traceID(traceParent *string) string {
	if traceParent == nil {
		return ""
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": *traceParent})
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		return sc.TraceID().String()
	}
	return ""
}

// A turn writes nothing as it starts (River's fetch records its attempt),
// so a task whose turn runs is stored as pending: what is shown as running
// is read from its turn job. runStatusSQL and taskTurnSQL are those reads.
//
// runStatusSQL is a run's status as shown: running while its root task's
// turn runs.
const runStatusSQL = `CASE WHEN r.status IN ('pending', 'waiting') AND EXISTS (
	    SELECT 1 FROM braid_tasks rt JOIN river_job j ON j.kind = '` + TaskKind + `' AND braid_turn_task(j.unique_key, j.args) = rt.id
	     WHERE rt.run_id = r.id AND rt.parent_task_id IS NULL AND rt.status IN ('pending', 'running') AND j.state = 'running')
	THEN 'running' ELSE r.status END`

// taskTurnSQL joins a task (t) to its running turn job (j), if any.
const taskTurnSQL = `LEFT JOIN LATERAL (
	    SELECT attempt, attempted_at FROM river_job
	     WHERE kind = '` + TaskKind + `' AND braid_turn_task(unique_key, args) = t.id AND state = 'running' AND t.status IN ('pending', 'running')
	     ORDER BY id DESC LIMIT 1) j ON true`

const runColumns = `r.id, r.workflow, ` + runStatusSQL + `, r.input, r.output, r.error, r.idempotency_key, r.trace_parent, r.created_at, r.started_at, r.finished_at, ` + timeoutMicrosSQL + `, r.deadline_at`

func scanRun(row pgx.Row) (*RunInfo, error) {
	var (
		r           RunInfo
		id          uuid.UUID
		errRaw      []byte
		key, tp     *string
		input, outp []byte
		timeout     *int64
	)
	if err := row.Scan(&id, &r.Workflow, &r.Status, &input, &outp, &errRaw, &key, &tp, &r.CreatedAt, &r.StartedAt, &r.FinishedAt, &timeout, &r.DeadlineAt); err != nil {
		return nil, err
	}
	if timeout != nil {
		r.Timeout = time.Duration(*timeout) * time.Microsecond
	}
	r.ID = id.String()
	r.Input, r.Output = input, outp
	r.Error = errorMessage(errRaw)
	if key != nil {
		r.IdempotencyKey = *key
	}
	r.TraceID = traceID(tp)
	return &r, nil
}

// Querier reads the database: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Run returns a run with its tasks, their steps, turns and waits.
func (e *Engine) Run(ctx context.Context, runID string) (*RunInfo, error) {
	return Inspect(ctx, e.pool, runID)
}

// InspectRun returns a run without its tasks (RunInfo.Tasks is nil), in
// one query however many tasks it has: its status, timing, input, output
// and error. Inspect adds the tasks.
func InspectRun(ctx context.Context, db Querier, runID string) (*RunInfo, error) {
	id, err := uuid.Parse(runID)
	if err != nil {
		return nil, fmt.Errorf("%w: %q is not a UUID", ErrRunNotFound, runID)
	}
	run, err := scanRun(db.QueryRow(ctx, `SELECT `+runColumns+` FROM braid_runs r WHERE r.id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s", ErrRunNotFound, runID)
	}
	return run, err
}

// Inspect returns a run with its tasks, their steps, turns and waits,
// reading the database directly; it needs no engine (the CLI uses it). It
// reads in five queries whatever the number of tasks.
func Inspect(ctx context.Context, db Querier, runID string) (*RunInfo, error) {
	return InspectFirst(ctx, db, runID, 0)
}

// InspectFirst is Inspect bounded to the first maxTasks tasks of the run
// in creation order (the root first, every task after its parent), with
// their steps, turns and waits; RunInfo.TaskCount says how many the run
// has. A run of a large fan-out has as many tasks as children, each with
// its input, output and steps: a caller that shows a run, as a dashboard
// does, reads only what it can show. maxTasks 0 reads every task.
func InspectFirst(ctx context.Context, db Querier, runID string, maxTasks int) (*RunInfo, error) {
	run, err := InspectRun(ctx, db, runID)
	if err != nil {
		return nil, err
	}
	id, _ := uuid.Parse(runID) // InspectRun parsed it
	var limit *int
	if maxTasks > 0 {
		limit = &maxTasks
	}
	rows, err := db.Query(ctx, `
		SELECT t.id, t.parent_task_id, t.key, t.workflow,
		       CASE WHEN j.attempt IS NOT NULL OR t.status = 'running' THEN 'running' ELSE t.status END,
		       coalesce(j.attempt, t.attempt), t.max_attempts, t.turns, t.remaining, t.error, t.input, t.output,
		       t.created_at, coalesce(t.started_at, j.attempted_at), t.finished_at, t.updated_at,
		       t.dependents, coalesce(t.skip_reason, ''), t.on_failure
		  FROM braid_tasks t `+taskTurnSQL+`
		 WHERE t.run_id = $1 ORDER BY t.created_at, t.id LIMIT $2`, id, limit)
	if err != nil {
		return nil, err
	}
	index := map[uuid.UUID]int{}
	var taskIDs []string
	var updated []time.Time
	dependents := map[uuid.UUID][]uuid.UUID{}
	for rows.Next() {
		var (
			ti            TaskInfo
			tid           uuid.UUID
			parentID      *uuid.UUID
			errRaw        []byte
			input, output []byte
			updatedAt     time.Time
			deps          []uuid.UUID
		)
		if err := rows.Scan(&tid, &parentID, &ti.Key, &ti.Workflow, &ti.Status, &ti.Attempt, &ti.MaxAttempts, &ti.Turns, &ti.Remaining,
			&errRaw, &input, &output, &ti.CreatedAt, &ti.StartedAt, &ti.FinishedAt, &updatedAt, &deps, &ti.SkipReason, &ti.OnFailure); err != nil {
			rows.Close()
			return nil, err
		}
		ti.ID = tid.String()
		if parentID != nil {
			ti.ParentID = parentID.String()
		}
		ti.Error, ti.ErrorKind = errorText(errRaw)
		ti.FailedStep = failedStep(errRaw)
		ti.Input, ti.Output = input, output
		if deps != nil {
			ti.Node = true
			dependents[tid] = deps
		}
		index[tid] = len(run.Tasks)
		run.Tasks = append(run.Tasks, ti)
		taskIDs = append(taskIDs, ti.ID)
		updated = append(updated, updatedAt)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	run.TaskCount = len(run.Tasks)
	if limit != nil && run.TaskCount == maxTasks {
		if err := db.QueryRow(ctx, `SELECT count(*) FROM braid_tasks WHERE run_id = $1`, id).Scan(&run.TaskCount); err != nil {
			return nil, err
		}
	}
	var only []string // the tasks read, when not all of them
	if run.TaskCount > len(run.Tasks) {
		only = taskIDs
	}
	for from, deps := range dependents {
		for _, d := range deps {
			if i, ok := index[d]; ok {
				run.Tasks[i].DependsOn = append(run.Tasks[i].DependsOn, run.Tasks[index[from]].Key)
			}
		}
	}
	for i := range run.Tasks {
		slices.Sort(run.Tasks[i].DependsOn)
	}
	if err := inspectSteps(ctx, db, id, only, run, index); err != nil {
		return nil, err
	}
	if err := inspectTurns(ctx, db, taskIDs, run, index); err != nil {
		return nil, err
	}
	for i := range run.Tasks {
		run.Tasks[i].Waits = deriveWaits(&run.Tasks[i], updated[i])
	}
	if err := inspectEvents(ctx, db, id, run); err != nil {
		return nil, err
	}
	return run, nil
}

// inspectSteps reads the steps of the run's tasks, or of only those tasks
// when only is not nil.
func inspectSteps(ctx context.Context, db Querier, runID uuid.UUID, only []string, run *RunInfo, index map[uuid.UUID]int) error {
	rows, err := db.Query(ctx, `
		SELECT s.task_id, s.name, s.kind, s.status, s.attempts, s.output, s.error, s.resume_at,
		       coalesce(s.wait_on, ''), coalesce(s.wait_filter, ''), s.created_at, s.started_at,
		       coalesce(s.finished_at, CASE WHEN s.status NOT IN ('waiting', 'retrying') THEN s.created_at END)
		  FROM braid_steps s JOIN braid_tasks t ON t.id = s.task_id
		 WHERE t.run_id = $1 AND ($2::text[] IS NULL OR s.task_id = ANY($2::text[]::uuid[]))
		 ORDER BY s.created_at, s.name`, runID, only)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			si     StepInfo
			tid    uuid.UUID
			errRaw []byte
			output []byte
		)
		if err := rows.Scan(&tid, &si.Name, &si.Kind, &si.Status, &si.Attempts, &output, &errRaw, &si.ResumeAt, &si.WaitOn, &si.Filter, &si.CreatedAt, &si.StartedAt, &si.FinishedAt); err != nil {
			return err
		}
		si.Output = output
		si.Error, si.ErrorKind = errorText(errRaw)
		if i, ok := index[tid]; ok {
			run.Tasks[i].Steps = append(run.Tasks[i].Steps, si)
		}
	}
	return rows.Err()
}

// inspectTurns reads the turn jobs of the run's tasks, in one query
// served by the index on a turn job's task ID.
func inspectTurns(ctx context.Context, db Querier, taskIDs []string, run *RunInfo, index map[uuid.UUID]int) error {
	if len(taskIDs) == 0 {
		return nil
	}
	rows, err := db.Query(ctx, `
		SELECT braid_turn_task(j.unique_key, j.args)::text, j.id, j.state, j.attempt, j.max_attempts, j.created_at, j.attempted_at, j.finalized_at,
		       coalesce(array_to_json(j.errors), '[]')
		  FROM river_job j
		 WHERE j.kind = $1 AND braid_turn_task(j.unique_key, j.args) = ANY($2::text[]::uuid[])
		 ORDER BY j.id`, TaskKind, taskIDs)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			tu      TurnInfo
			taskID  string
			state   string
			errsRaw []byte
		)
		if err := rows.Scan(&taskID, &tu.JobID, &state, &tu.Attempt, &tu.MaxAttempts, &tu.CreatedAt, &tu.AttemptedAt, &tu.FinalizedAt, &errsRaw); err != nil {
			return err
		}
		tu.State = state
		if err := json.Unmarshal(errsRaw, &tu.Errors); err != nil {
			return fmt.Errorf("workflow: decoding the errors of turn job %d: %w", tu.JobID, err)
		}
		if len(tu.Errors) == 0 {
			tu.Errors = nil
		}
		tid, err := uuid.Parse(taskID)
		if err != nil {
			continue
		}
		if i, ok := index[tid]; ok {
			run.Tasks[i].TurnJobs = append(run.Tasks[i].TurnJobs, tu)
		}
	}
	return rows.Err()
}

// deriveWaits derives a task's waits from its delay steps and its turn
// jobs; see WaitInfo. updatedAt is the task row's last change.
func deriveWaits(t *TaskInfo, updatedAt time.Time) []WaitInfo {
	var waits []WaitInfo
	waitingDelay := false
	var delays []time.Time
	for _, s := range t.Steps {
		if s.Kind != "delay" {
			continue
		}
		w := WaitInfo{Kind: WaitDelay, Name: s.Name, Start: s.CreatedAt, ResumeAt: s.ResumeAt, Status: s.Status}
		if s.Status != "waiting" {
			w.End = s.FinishedAt
		} else {
			waitingDelay = true
		}
		waits = append(waits, w)
		delays = append(delays, s.CreatedAt)
	}
	// A delay created between a turn's start and the next turn's
	// insertion is that gap's cause.
	delayIn := func(from, to time.Time) bool {
		for _, d := range delays {
			if !d.Before(from) && !d.After(to) {
				return true
			}
		}
		return false
	}
	jobs := t.TurnJobs
	for i := 0; i+1 < len(jobs); i++ {
		a, b := jobs[i], jobs[i+1]
		// Only a turn that completed without finishing its task
		// suspended it; a discarded or cancelled turn is followed by a
		// retry's turn, not a wake.
		if a.State != "completed" || a.FinalizedAt == nil || !b.CreatedAt.After(*a.FinalizedAt) {
			continue
		}
		from := a.CreatedAt
		if a.AttemptedAt != nil {
			from = *a.AttemptedAt
		}
		if delayIn(from, b.CreatedAt) {
			continue
		}
		end := b.CreatedAt
		waits = append(waits, WaitInfo{Kind: WaitChildren, Start: *a.FinalizedAt, End: &end, Status: "done"})
	}
	if t.Status == "waiting" && !waitingDelay {
		start := updatedAt
		if n := len(jobs); n > 0 && jobs[n-1].State == "completed" && jobs[n-1].FinalizedAt != nil {
			start = *jobs[n-1].FinalizedAt
		}
		waits = append(waits, WaitInfo{Kind: WaitChildren, Start: start, Status: "waiting"})
	}
	sort.SliceStable(waits, func(i, j int) bool { return waits[i].Start.Before(waits[j].Start) })
	return waits
}

// ListRuns lists runs, newest first.
func (e *Engine) ListRuns(ctx context.Context, f RunFilter) ([]*RunInfo, error) {
	return ListRuns(ctx, e.pool, f)
}

// ListRuns lists runs, newest first, reading the database directly. An
// invalid filter returns an error wrapping ErrInvalidRunFilter.
func ListRuns(ctx context.Context, db Querier, f RunFilter) ([]*RunInfo, error) {
	if err := f.check(false); err != nil {
		return nil, err
	}
	where, args := f.where()
	args = append(args, f.Limit, f.Offset)
	rows, err := db.Query(ctx, `
		SELECT `+runColumns+` FROM braid_runs r
		 WHERE `+where+`
		 ORDER BY r.created_at DESC, r.id DESC LIMIT $7 OFFSET $8`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*RunInfo
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// CountRuns counts the runs that ListRuns would list with f, ignoring its
// Limit and Offset.
func CountRuns(ctx context.Context, db Querier, f RunFilter) (int64, error) {
	if err := f.check(true); err != nil {
		return 0, err
	}
	where, args := f.where()
	var n int64
	err := db.QueryRow(ctx, `SELECT count(*) FROM braid_runs r WHERE `+where, args...).Scan(&n)
	return n, err
}

// RunStats counts runs for an overview.
type RunStats struct {
	// ByStatus counts the runs of each status as ListRuns shows it (a run
	// whose root turn runs is running); every status is present.
	ByStatus map[string]int64 `json:"by_status"`
	// FinishedLastWindow counts the runs that finished (completed, failed
	// or were cancelled) within the window before now, and
	// FailedLastWindow those of them that failed.
	FinishedLastWindow int64 `json:"finished_last_window"`
	FailedLastWindow   int64 `json:"failed_last_window"`
}

// CollectRunStats counts runs by status, and the runs finished and failed
// within window before now on the database clock.
func CollectRunStats(ctx context.Context, db Querier, window time.Duration) (*RunStats, error) {
	if window <= 0 {
		return nil, fmt.Errorf("workflow: run stats window %s is not positive", window)
	}
	st := &RunStats{ByStatus: map[string]int64{}}
	for _, s := range RunStatuses {
		st.ByStatus[s] = 0
	}
	rows, err := db.Query(ctx, `SELECT `+runStatusSQL+` AS status, count(*) FROM braid_runs r GROUP BY 1`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var status string
		var n int64
		if err := rows.Scan(&status, &n); err != nil {
			rows.Close()
			return nil, err
		}
		st.ByStatus[status] = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	err = db.QueryRow(ctx, `
		SELECT count(*), count(*) FILTER (WHERE status = 'failed') FROM braid_runs
		 WHERE status IN ('completed', 'failed', 'cancelled') AND finished_at > braid_now() - $1::bigint * interval '1 microsecond'`,
		window.Microseconds()).Scan(&st.FinishedLastWindow, &st.FailedLastWindow)
	if err != nil {
		return nil, err
	}
	return st, nil
}
