package workflow

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace/noop"
)

// RunHistoryFormat names the format of a RunHistory document.
const RunHistoryFormat = "braid.run-history.v1"

// RunHistory is what a run has recorded: each task with its input, its
// status and its durable calls, in the order the task made them. Export a
// run's with ExportRun (braid runs export ID > run.json), and replay the
// current code against it with Replay (testutil.Replay in a test), so
// that a run from production becomes a regression test.
type RunHistory struct {
	Format   string        `json:"format"`
	RunID    string        `json:"run_id"`
	Workflow string        `json:"workflow"`
	Status   string        `json:"status"`
	Tasks    []TaskHistory `json:"tasks"`
}

// TaskHistory is one task of a RunHistory.
type TaskHistory struct {
	ID       string          `json:"id"`
	ParentID string          `json:"parent_id,omitempty"`
	Key      string          `json:"key"`
	Workflow string          `json:"workflow"`
	Status   string          `json:"status"`
	Input    json.RawMessage `json:"input"`
	Output   json.RawMessage `json:"output,omitempty"`
	Error    string          `json:"error,omitempty"`
	// Position and Call are, for a child, the position in its parent of
	// the Go or Map call ("go", "map") that started it.
	Position *int   `json:"position,omitempty"`
	Call     string `json:"call,omitempty"`
	// Steps are the task's recorded steps, delays, waits and SetEvent
	// calls, by position (those recorded without one last).
	Steps []StepHistory `json:"steps,omitempty"`
}

// StepHistory is one recorded durable call of a TaskHistory.
type StepHistory struct {
	Name     string          `json:"name"`
	Kind     string          `json:"kind"`
	Status   string          `json:"status"`
	Position *int            `json:"position,omitempty"`
	Output   json.RawMessage `json:"output,omitempty"`
	Error    string          `json:"error,omitempty"`
	// Causes name, for a failed step, the errors its error was, which
	// errors.Is matches on replay (StepError.Is).
	Causes   []string `json:"causes,omitempty"`
	Attempts int      `json:"attempts"`
}

// ExportRun reads the recorded history of the run runID.
func ExportRun(ctx context.Context, db Querier, runID string) (*RunHistory, error) {
	id, err := uuid.Parse(runID)
	if err != nil {
		return nil, fmt.Errorf("%w: %q is not a UUID", ErrRunNotFound, runID)
	}
	h := &RunHistory{Format: RunHistoryFormat, RunID: id.String()}
	err = db.QueryRow(ctx, `SELECT workflow, status FROM braid_runs WHERE id = $1`, id).Scan(&h.Workflow, &h.Status)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s", ErrRunNotFound, runID)
	}
	if err != nil {
		return nil, fmt.Errorf("workflow: exporting run %s: %w", runID, err)
	}
	rows, err := db.Query(ctx, `
		SELECT id, parent_task_id, key, workflow, status, input, output, error, position, coalesce(call, '')
		  FROM braid_tasks WHERE run_id = $1 ORDER BY created_at, id`, id)
	if err != nil {
		return nil, fmt.Errorf("workflow: exporting run %s: %w", runID, err)
	}
	index := map[uuid.UUID]int{}
	for rows.Next() {
		var (
			th       TaskHistory
			tid      uuid.UUID
			parent   *uuid.UUID
			errRaw   []byte
			out, inp []byte
		)
		if err := rows.Scan(&tid, &parent, &th.Key, &th.Workflow, &th.Status, &inp, &out, &errRaw, &th.Position, &th.Call); err != nil {
			rows.Close()
			return nil, fmt.Errorf("workflow: exporting run %s: %w", runID, err)
		}
		th.ID, th.Input, th.Output, th.Error = tid.String(), inp, out, errorMessage(errRaw)
		if parent != nil {
			th.ParentID = parent.String()
		}
		index[tid] = len(h.Tasks)
		h.Tasks = append(h.Tasks, th)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("workflow: exporting run %s: %w", runID, err)
	}
	rows, err = db.Query(ctx, `
		SELECT s.task_id, s.name, s.kind, s.status, s.position, s.output, s.error, s.attempts
		  FROM braid_steps s JOIN braid_tasks t ON t.id = s.task_id
		 WHERE t.run_id = $1 ORDER BY s.position NULLS LAST, s.created_at, s.name`, id)
	if err != nil {
		return nil, fmt.Errorf("workflow: exporting the steps of run %s: %w", runID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			sh     StepHistory
			tid    uuid.UUID
			errRaw []byte
			out    []byte
		)
		if err := rows.Scan(&tid, &sh.Name, &sh.Kind, &sh.Status, &sh.Position, &out, &errRaw, &sh.Attempts); err != nil {
			return nil, fmt.Errorf("workflow: exporting the steps of run %s: %w", runID, err)
		}
		sh.Output, sh.Error = out, errorMessage(errRaw)
		var se storedError
		if len(errRaw) > 0 && json.Unmarshal(errRaw, &se) == nil {
			sh.Causes = se.Causes
		}
		if i, ok := index[tid]; ok {
			h.Tasks[i].Steps = append(h.Tasks[i].Steps, sh)
		}
	}
	return h, rows.Err()
}

// ReadRunHistory decodes a RunHistory document, such as ExportRun's
// written as JSON, and checks its format.
func ReadRunHistory(r io.Reader) (*RunHistory, error) {
	var h RunHistory
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return nil, fmt.Errorf("workflow: reading a run history: %w", err)
	}
	if h.Format != RunHistoryFormat {
		return nil, fmt.Errorf("workflow: a run history of format %q; this braid reads %q", h.Format, RunHistoryFormat)
	}
	return &h, nil
}

// ReplayReport is what replaying recorded histories found.
type ReplayReport struct {
	// Runs and Tasks count what was replayed.
	Runs  int `json:"runs"`
	Tasks int `json:"tasks"`
	// Divergences are the tasks whose code makes other durable calls than
	// their history recorded: each would fail its next turn.
	Divergences []*NondeterminismError `json:"divergences"`
	// Problems are the tasks that could not be replayed.
	Problems []ReplayProblem `json:"problems,omitempty"`
	// Unchecked counts the unfinished runs that the filter selected beyond
	// its Limit, which CheckReplay did not replay: a report that leaves
	// some out says nothing of them.
	Unchecked int `json:"unchecked,omitempty"`
}

// ReplayProblem is a task that could not be replayed: its workflow is not
// registered, its code panicked, or its history does not decode.
type ReplayProblem struct {
	RunID    string `json:"run_id"`
	TaskID   string `json:"task_id"`
	Workflow string `json:"workflow"`
	Reason   string `json:"reason"`
}

// Replay replays the current code of defs against a recorded run history
// (ExportRun), with no database: every task of the run whose workflow is
// among defs runs from the top, each durable call checked against the
// history and answered from it. No step body runs, nothing is written.
// A task stops at its first call that the history does not answer (the
// future of a run in flight). A completed task whose code makes a call
// after the last one it recorded diverges too. A DAG's root is not
// replayed (its code only reads its nodes, which are).
func Replay(ctx context.Context, h *RunHistory, defs ...Definition) (*ReplayReport, error) {
	e, err := replayEngine(defs)
	if err != nil {
		return nil, err
	}
	rep := &ReplayReport{Divergences: []*NondeterminismError{}}
	e.replayRun(ctx, h, false, rep)
	return rep, nil
}

// ReplayFilter selects the runs that Engine.CheckReplay replays. The zero
// value selects every unfinished run, up to ReplayFilterLimitDefault.
type ReplayFilter struct {
	// Workflow, when set, selects the runs of that workflow.
	Workflow string
	// RunIDs, when set, selects these runs.
	RunIDs []string
	// Limit is the most runs replayed. Default ReplayFilterLimitDefault.
	Limit int
}

// ReplayFilterLimitDefault is the default ReplayFilter.Limit.
const ReplayFilterLimitDefault = 10_000

// CheckReplay replays the unfinished runs that f selects against their
// recorded histories with the workflows registered with this engine, as
// Replay does: it runs no step body and writes nothing. The report lists
// the tasks that would diverge on their next turn, where and why: run it
// with the code about to be deployed, before deploying it. A run of a
// workflow this engine does not register is listed among the problems,
// and the runs selected beyond f.Limit are counted as unchecked.
func (e *Engine) CheckReplay(ctx context.Context, f ReplayFilter) (*ReplayReport, error) {
	limit := f.Limit
	if limit == 0 {
		limit = ReplayFilterLimitDefault
	}
	if limit < 0 {
		return nil, fmt.Errorf("workflow: replay filter limit %d is negative", limit)
	}
	ids := make([]uuid.UUID, 0, len(f.RunIDs))
	for _, s := range f.RunIDs {
		id, err := uuid.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("%w: %q is not a UUID", ErrRunNotFound, s)
		}
		ids = append(ids, id)
	}
	const selected = `
		  FROM braid_runs
		 WHERE status IN ('pending', 'running', 'waiting')
		   AND ($1 = '' OR workflow = $1) AND (cardinality($2::uuid[]) = 0 OR id = ANY($2))`
	rows, err := e.pool.Query(ctx, `SELECT id`+selected+` ORDER BY created_at, id LIMIT $3::bigint + 1`, f.Workflow, ids, limit)
	if err != nil {
		return nil, fmt.Errorf("workflow: listing the runs to replay: %w", err)
	}
	runs, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("workflow: listing the runs to replay: %w", err)
	}
	rep := &ReplayReport{Divergences: []*NondeterminismError{}}
	if len(runs) > limit {
		runs = runs[:limit]
		var all int
		if err := e.pool.QueryRow(ctx, `SELECT count(*)`+selected, f.Workflow, ids).Scan(&all); err != nil {
			return nil, fmt.Errorf("workflow: counting the runs to replay: %w", err)
		}
		rep.Unchecked = max(all-limit, 1)
	}
	for _, id := range runs {
		h, err := ExportRun(ctx, e.pool, id.String())
		if errors.Is(err, ErrRunNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		e.replayRun(ctx, h, true, rep)
	}
	return rep, nil
}

// replayEngine is an engine that only replays: it has the definitions and
// the default limits, and no pool.
func replayEngine(defs []Definition) (*Engine, error) {
	e := &Engine{
		registry: map[string]*definition{},
		logger:   slog.New(slog.DiscardHandler),
		tracer:   noop.NewTracerProvider().Tracer(""),
		cfg: Config{MaxPayloadBytes: MaxPayloadBytesDefault, MaxMapItems: MaxMapItemsDefault,
			MaxMapInputBytes: MaxMapInputBytesDefault},
	}
	for i, w := range defs {
		if w == nil {
			return nil, fmt.Errorf("workflow: definition %d is nil", i)
		}
		d := w.def()
		if d.err != nil {
			return nil, d.err
		}
		e.registry[d.name] = d
	}
	return e, nil
}

// replayRun replays the tasks of h (only the unfinished ones when
// unfinished) and adds what it finds to rep.
func (e *Engine) replayRun(ctx context.Context, h *RunHistory, unfinished bool, rep *ReplayReport) {
	rep.Runs++
	// The children of each task, and the Go and Map calls that started
	// them, by position.
	children := map[string]map[string]*childRecord{}
	calls := map[string]map[int]call{}
	ids := map[string]uuid.UUID{}
	for _, th := range h.Tasks {
		id, _ := uuid.Parse(th.ID)
		ids[th.ID] = id
		if th.ParentID == "" {
			continue
		}
		if children[th.ParentID] == nil {
			children[th.ParentID], calls[th.ParentID] = map[string]*childRecord{}, map[int]call{}
		}
		children[th.ParentID][th.Key] = &childRecord{id: id, workflow: th.Workflow, status: th.Status,
			output: th.Output, err: storedError{Message: th.Error}}
		if th.Position != nil && (th.Call == "go" || th.Call == "map") {
			calls[th.ParentID][*th.Position] = childCall(th.Call, th.Key)
		}
	}
	runID, _ := uuid.Parse(h.RunID)
	for _, th := range h.Tasks {
		switch {
		case unfinished && finished(th.Status):
			continue
		case th.Status == "blocked" || th.Status == "skipped":
			continue // a DAG node that never ran
		}
		problem := func(reason string) {
			rep.Problems = append(rep.Problems, ReplayProblem{RunID: h.RunID, TaskID: th.ID, Workflow: th.Workflow, Reason: reason})
		}
		d := e.registry[th.Workflow]
		if d == nil {
			problem(fmt.Sprintf("workflow %q is not registered", th.Workflow))
			continue
		}
		if d.dag != nil {
			continue
		}
		t := &Task{
			ctx: ctx, eng: e, id: ids[th.ID], runID: runID, workflow: th.Workflow, key: th.Key, input: th.Input,
			logger: e.logger, steps: map[string]*stepRecord{}, children: children[th.ID],
			names: map[string]int{}, spawned: map[string]bool{}, history: map[int]call{},
			checking: true, lastPosition: -1, completed: th.Status == "completed",
		}
		if t.children == nil {
			t.children = map[string]*childRecord{}
		}
		if th.ParentID != "" {
			p := ids[th.ParentID]
			t.parentID = &p
		}
		for _, sh := range th.Steps {
			t.steps[sh.Name] = &stepRecord{kind: sh.Kind, status: sh.Status, output: sh.Output,
				err: storedError{Message: sh.Error, Causes: sh.Causes}, attempts: sh.Attempts}
			if sh.Position != nil {
				t.history[*sh.Position] = call{kind: sh.Kind, name: sh.Name}
				t.lastPosition = max(t.lastPosition, *sh.Position)
			}
		}
		for p, c := range calls[th.ID] {
			t.history[p] = c
			t.lastPosition = max(t.lastPosition, p)
		}
		rep.Tasks++
		input := th.Input
		if len(bytes.TrimSpace(input)) == 0 {
			input = json.RawMessage("null")
		}
		_, err := callWorkflow(t, d, input)
		var pe *PanicError
		switch {
		case t.halted != nil:
			var nd *NondeterminismError
			if errors.As(t.halted, &nd) {
				rep.Divergences = append(rep.Divergences, nd)
			}
		case errors.As(err, &pe):
			problem("the code panicked on replay: " + fmt.Sprint(pe.Value))
		case !t.suspended && t.seq <= t.lastPosition:
			// The code returned before making every call its history
			// recorded: another path, as a call that differs is.
			rep.Divergences = append(rep.Divergences, &NondeterminismError{RunID: h.RunID, TaskID: th.ID, Workflow: th.Workflow,
				Position: t.seq, Recorded: t.history[t.seq].String(), Called: "no call (the code returned)"})
		}
	}
}
