package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
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
	// Tasks are filled by Engine.Run, in creation order; ListRuns leaves
	// them empty.
	Tasks []TaskInfo `json:"tasks,omitempty"`
}

// TaskInfo describes a task of a run.
type TaskInfo struct {
	ID         string     `json:"id"`
	ParentID   string     `json:"parent_id,omitempty"`
	Key        string     `json:"key"`
	Workflow   string     `json:"workflow"`
	Status     string     `json:"status"`
	Attempt    int        `json:"attempt"`
	Turns      int        `json:"turns"`
	Remaining  int        `json:"remaining"`
	Error      string     `json:"error,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	Steps      []StepInfo `json:"steps,omitempty"`
}

// StepInfo describes a recorded step or delay of a task.
type StepInfo struct {
	Name       string     `json:"name"`
	Kind       string     `json:"kind"`
	Status     string     `json:"status"`
	Attempts   int        `json:"attempts"`
	Error      string     `json:"error,omitempty"`
	ResumeAt   *time.Time `json:"resume_at,omitempty"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// RunFilter selects runs for ListRuns. The zero value lists the newest
// runs.
type RunFilter struct {
	Status   string // one status, or "" for all
	Workflow string
	// Limit is the most runs returned. Default 100, at most 10,000.
	Limit int
	// Before lists runs created before this time, for paging.
	Before time.Time
}

func errorMessage(raw []byte) string {
	if len(raw) == 0 {
		return ""
	}
	var se storedError
	if json.Unmarshal(raw, &se) == nil {
		return se.Message
	}
	return string(raw)
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
	    SELECT 1 FROM braid_tasks rt JOIN river_job j ON j.kind = '` + TaskKind + `' AND j.args->>'task_id' = rt.id::text
	     WHERE rt.run_id = r.id AND rt.parent_task_id IS NULL AND rt.status IN ('pending', 'running') AND j.state = 'running')
	THEN 'running' ELSE r.status END`

// taskTurnSQL joins a task (t) to its running turn job (j), if any.
const taskTurnSQL = `LEFT JOIN LATERAL (
	    SELECT attempt, attempted_at FROM river_job
	     WHERE kind = '` + TaskKind + `' AND args->>'task_id' = t.id::text AND state = 'running' AND t.status IN ('pending', 'running')
	     ORDER BY id DESC LIMIT 1) j ON true`

const runColumns = `r.id, r.workflow, ` + runStatusSQL + `, r.input, r.output, r.error, r.idempotency_key, r.trace_parent, r.created_at, r.started_at, r.finished_at`

func scanRun(row pgx.Row) (*RunInfo, error) {
	var (
		r           RunInfo
		id          uuid.UUID
		errRaw      []byte
		key, tp     *string
		input, outp []byte
	)
	if err := row.Scan(&id, &r.Workflow, &r.Status, &input, &outp, &errRaw, &key, &tp, &r.CreatedAt, &r.StartedAt, &r.FinishedAt); err != nil {
		return nil, err
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

// Run returns a run with its tasks and their steps.
func (e *Engine) Run(ctx context.Context, runID string) (*RunInfo, error) {
	return Inspect(ctx, e.pool, runID)
}

// Inspect returns a run with its tasks and their steps, reading the
// database directly; it needs no engine (the CLI uses it).
func Inspect(ctx context.Context, db Querier, runID string) (*RunInfo, error) {
	id, err := uuid.Parse(runID)
	if err != nil {
		return nil, fmt.Errorf("%w: %q is not a UUID", ErrRunNotFound, runID)
	}
	run, err := scanRun(db.QueryRow(ctx, `SELECT `+runColumns+` FROM braid_runs r WHERE r.id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s", ErrRunNotFound, runID)
	}
	if err != nil {
		return nil, err
	}
	rows, err := db.Query(ctx, `
		SELECT t.id, t.parent_task_id, t.key, t.workflow,
		       CASE WHEN j.attempt IS NOT NULL OR t.status = 'running' THEN 'running' ELSE t.status END,
		       coalesce(j.attempt, t.attempt), t.turns, t.remaining, t.error, t.created_at,
		       coalesce(t.started_at, j.attempted_at), t.finished_at
		  FROM braid_tasks t `+taskTurnSQL+`
		 WHERE t.run_id = $1 ORDER BY t.created_at, t.id`, id)
	if err != nil {
		return nil, err
	}
	index := map[uuid.UUID]int{}
	for rows.Next() {
		var (
			ti       TaskInfo
			tid      uuid.UUID
			parentID *uuid.UUID
			errRaw   []byte
		)
		if err := rows.Scan(&tid, &parentID, &ti.Key, &ti.Workflow, &ti.Status, &ti.Attempt, &ti.Turns, &ti.Remaining, &errRaw, &ti.CreatedAt, &ti.StartedAt, &ti.FinishedAt); err != nil {
			rows.Close()
			return nil, err
		}
		ti.ID = tid.String()
		if parentID != nil {
			ti.ParentID = parentID.String()
		}
		ti.Error = errorMessage(errRaw)
		index[tid] = len(run.Tasks)
		run.Tasks = append(run.Tasks, ti)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = db.Query(ctx, `
		SELECT s.task_id, s.name, s.kind, s.status, s.attempts, s.error, s.resume_at, s.started_at, coalesce(s.finished_at, CASE WHEN s.status <> 'waiting' THEN s.created_at END)
		  FROM braid_steps s JOIN braid_tasks t ON t.id = s.task_id
		 WHERE t.run_id = $1 ORDER BY s.created_at, s.name`, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			si     StepInfo
			tid    uuid.UUID
			errRaw []byte
		)
		if err := rows.Scan(&tid, &si.Name, &si.Kind, &si.Status, &si.Attempts, &errRaw, &si.ResumeAt, &si.StartedAt, &si.FinishedAt); err != nil {
			return nil, err
		}
		si.Error = errorMessage(errRaw)
		if i, ok := index[tid]; ok {
			run.Tasks[i].Steps = append(run.Tasks[i].Steps, si)
		}
	}
	return run, rows.Err()
}

// ListRuns lists runs, newest first.
func (e *Engine) ListRuns(ctx context.Context, f RunFilter) ([]*RunInfo, error) {
	return ListRuns(ctx, e.pool, f)
}

// ListRuns lists runs, newest first, reading the database directly.
func ListRuns(ctx context.Context, db Querier, f RunFilter) ([]*RunInfo, error) {
	if f.Limit == 0 {
		f.Limit = 100
	}
	if f.Limit < 0 || f.Limit > 10_000 {
		return nil, fmt.Errorf("workflow: limit %d is outside 1-10000", f.Limit)
	}
	if f.Status != "" && !strings.Contains(" pending running waiting completed failed cancelled ", " "+f.Status+" ") {
		return nil, fmt.Errorf("workflow: unknown run status %q (want pending, running, waiting, completed, failed or cancelled)", f.Status)
	}
	var before any
	if !f.Before.IsZero() {
		before = f.Before
	}
	rows, err := db.Query(ctx, `
		SELECT `+runColumns+` FROM braid_runs r
		 WHERE ($1 = '' OR `+runStatusSQL+` = $1) AND ($2 = '' OR r.workflow = $2) AND ($3::timestamptz IS NULL OR r.created_at < $3)
		 ORDER BY r.created_at DESC, r.id DESC LIMIT $4`, f.Status, f.Workflow, before, f.Limit)
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
