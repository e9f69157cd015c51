package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/braidflow/braid/workflow"
)

// Runs: the list with its filters, a run's detail (its task tree, steps,
// delays, a timeline of turns, steps and waits, and its trace), cancel,
// retry, and counts by status for the overview.

// RunDetailTasksMax is the most tasks a run's detail holds: the first
// ones created, the root first, with their steps and turns. A fan-out of
// ten thousand children has as many tasks, each with its payloads, and
// the dashboard reads the detail every second.
const RunDetailTasksMax = 1000

// RunDetail is GET /api/runs/{id}: a run with everything an operator
// looks for when it misbehaves.
type RunDetail struct {
	// Run is the run itself; its tasks are in Tasks. Its task_count is
	// how many tasks it has: more than Tasks holds when the run has more
	// than RunDetailTasksMax.
	Run workflow.RunInfo `json:"run"`
	// Tasks is the task tree in creation order: the root first, each
	// child naming its parent in parent_id. Each task carries its turn
	// jobs with their attempts' errors, and its waits; its steps are in
	// Steps.
	Tasks []workflow.TaskInfo `json:"tasks"`
	// Steps are the recorded steps and delays of every task, in the order
	// they were recorded.
	Steps []RunStep `json:"steps"`
	// Delays are the delay steps, with when each is due.
	Delays []RunDelay `json:"delays"`
	// Failure is where the run failed: the failed task none of whose
	// children failed, and its failed step when one was recorded. It is
	// null unless a task failed.
	Failure *RunFailure `json:"failure"`
	// Timeline lists the run's turns, steps, waits on children and delays,
	// oldest first, for a Gantt chart.
	Timeline []TimelineEntry `json:"timeline"`
	// DAGs are the run's DAGs, each with its nodes in layers; empty for a
	// run without one. The nodes' statuses, dependencies and skip reasons
	// are in Tasks.
	DAGs []RunDAG `json:"dags"`
	// TraceID is the run's trace, and TraceURL its page in the Jaeger UI
	// when the server is configured with one.
	TraceID  string `json:"trace_id,omitempty"`
	TraceURL string `json:"trace_url,omitempty"`
}

// RunDAG is a DAG of a run: the nodes under one DAG root task, drawn in
// topological layers. The nodes that depend on nothing form the first
// layer; every other node sits one layer past its deepest dependency, so
// that each node comes after everything it waits for. An on-failure node,
// which waits for every other node, lands in the last layer.
type RunDAG struct {
	// TaskID and TaskKey name the DAG's root task: the run's root, or a
	// task that started the DAG as a child.
	TaskID  string `json:"task_id"`
	TaskKey string `json:"task_key"`
	// Workflow is the DAG's name.
	Workflow string `json:"workflow"`
	// Layers hold the names of the nodes (their tasks' keys), layer by
	// layer; within a layer, in the order the DAG declared them.
	Layers [][]string `json:"layers"`
}

// DAGs finds the DAGs among a run's tasks (in the order Inspect lists
// them) and lays out the nodes of each in layers. A run without a DAG has
// none.
func DAGs(tasks []workflow.TaskInfo) []RunDAG {
	nodes := map[string][]*workflow.TaskInfo{} // DAG root task ID → its nodes
	for i := range tasks {
		if t := &tasks[i]; t.Node && t.ParentID != "" {
			nodes[t.ParentID] = append(nodes[t.ParentID], t)
		}
	}
	out := []RunDAG{}
	for i := range tasks {
		root := &tasks[i]
		if len(nodes[root.ID]) == 0 {
			continue
		}
		out = append(out, RunDAG{TaskID: root.ID, TaskKey: root.Key, Workflow: root.Workflow, Layers: layers(nodes[root.ID])})
	}
	return out
}

// layers places the nodes of one DAG in topological layers.
func layers(nodes []*workflow.TaskInfo) [][]string {
	byKey := make(map[string]*workflow.TaskInfo, len(nodes))
	for _, n := range nodes {
		byKey[n.Key] = n
	}
	depth := make(map[string]int, len(nodes))
	const visiting = -1
	var place func(n *workflow.TaskInfo) int
	place = func(n *workflow.TaskInfo) int {
		switch d, ok := depth[n.Key]; {
		case ok && d == visiting:
			return 0 // a cycle, which a DAG's definition refuses
		case ok:
			return d
		}
		depth[n.Key] = visiting
		d := 0
		for _, dep := range n.DependsOn {
			if m := byKey[dep]; m != nil {
				d = max(d, place(m)+1)
			}
		}
		depth[n.Key] = d
		return d
	}
	var out [][]string
	for _, n := range nodes {
		d := place(n)
		for len(out) <= d {
			out = append(out, []string{})
		}
		out[d] = append(out[d], n.Key)
	}
	return out
}

// RunStep is a recorded step or delay with the task it belongs to.
type RunStep struct {
	TaskID  string `json:"task_id"`
	TaskKey string `json:"task_key"`
	workflow.StepInfo
}

// RunDelay is a durable timer of a task: its status is waiting until it is
// due, then fired (or cancelled with its run).
type RunDelay struct {
	TaskID    string     `json:"task_id"`
	TaskKey   string     `json:"task_key"`
	Name      string     `json:"name"`
	Status    string     `json:"status"`
	CreatedAt time.Time  `json:"created_at"`
	ResumeAt  *time.Time `json:"resume_at"`
	FiredAt   *time.Time `json:"fired_at,omitempty"`
}

// RunFailure names where a run failed.
type RunFailure struct {
	TaskID  string `json:"task_id"`
	TaskKey string `json:"task_key"`
	// Step is the failed step: one that recorded its failure (a step with
	// a retry policy of its own), or one without a policy whose error the
	// task's code returned, named by the task's error.
	Step string `json:"step,omitempty"`
	// StepRecorded is true when Step is among the task's recorded steps.
	StepRecorded bool `json:"step_recorded,omitempty"`
	// Error is the full error, a panic's stack included.
	Error     string `json:"error"`
	ErrorKind string `json:"error_kind,omitempty"`
}

// Timeline entry kinds.
const (
	TimelineTurn  = "turn"
	TimelineStep  = "step"
	TimelineWait  = "wait"
	TimelineDelay = "delay"
)

// TimelineEntry is one bar of a run's timeline.
//
//   - turn: one turn job of a task, from its first attempt to its end;
//     status is its River state (completed, discarded, cancelled, running,
//     retryable…).
//   - step: a step, from the start of its turn or the end of the step
//     before it in that turn, to its record.
//   - wait: the task suspended until its children finished.
//   - delay: the task suspended on a delay, from the suspension to its
//     firing (or, while it waits, to resume_at).
//
// End is null for what has not ended.
type TimelineEntry struct {
	Kind     string     `json:"kind"`
	TaskID   string     `json:"task_id"`
	TaskKey  string     `json:"task_key"`
	Name     string     `json:"name"`
	Start    time.Time  `json:"start"`
	End      *time.Time `json:"end"`
	Status   string     `json:"status"`
	JobID    int64      `json:"job_id,omitempty"`
	Attempt  int        `json:"attempt,omitempty"`
	ResumeAt *time.Time `json:"resume_at,omitempty"`
}

// RunStatsResponse is GET /api/runs/stats.
type RunStatsResponse struct {
	// ByStatus counts runs by status; every status is present.
	ByStatus map[string]int64 `json:"by_status"`
	// FinishedLastHour counts the runs that completed, failed or were
	// cancelled in the last hour, and FailedLastHour those that failed.
	FinishedLastHour int64 `json:"finished_last_hour"`
	FailedLastHour   int64 `json:"failed_last_hour"`
}

// Filter lengths of the runs list, after braid_runs' constraints.
const (
	runWorkflowMax = 200
	runKeyMax      = 500
)

var runListParams = append([]Param{
	{Name: "workflow", Type: "string", Description: "only runs of this workflow"},
	{Name: "status", Type: "string", Description: "only runs of this status: " + strings.Join(workflow.RunStatuses, ", ")},
	{Name: "created_after", Type: "string", Description: "only runs created at or after this RFC 3339 time"},
	{Name: "created_before", Type: "string", Description: "only runs created before this RFC 3339 time"},
	{Name: "idempotency_key", Type: "string", Description: "only the run started with this idempotency key"},
}, pagingParams...)

func (s *Server) routeRuns() {
	s.add(&route{
		Method: "GET", Path: "/api/runs", Tag: "runs",
		Summary:  "List runs, newest first, filtered by workflow, status, creation time and idempotency key",
		Query:    runListParams,
		Response: List[workflow.RunInfo]{},
		Handle:   s.listRuns,
	})
	s.add(&route{
		Method: "GET", Path: "/api/runs/stats", Tag: "runs",
		Summary:  "Runs by status, and the runs finished and failed in the last hour",
		Response: RunStatsResponse{},
		Handle: func(w http.ResponseWriter, r *http.Request) error {
			st, err := workflow.CollectRunStats(r.Context(), s.pool, time.Hour)
			if err != nil {
				return err
			}
			writeJSON(w, http.StatusOK, RunStatsResponse{ByStatus: st.ByStatus, FinishedLastHour: st.FinishedLastWindow, FailedLastHour: st.FailedLastWindow})
			return nil
		},
	})
	s.add(&route{
		Method: "GET", Path: "/api/runs/{id}", Tag: "runs",
		Summary:  "A run: its task tree, steps with outputs and full errors, delays, a timeline of turns, steps and waits, and its trace",
		Response: RunDetail{},
		Handle: func(w http.ResponseWriter, r *http.Request) error {
			id, err := runID(r)
			if err != nil {
				return err
			}
			run, err := workflow.InspectFirst(r.Context(), s.pool, id, RunDetailTasksMax)
			if err != nil {
				return runErr(err, id)
			}
			writeJSON(w, http.StatusOK, s.runDetail(run))
			return nil
		},
	})
	s.add(&route{
		Method: "POST", Path: "/api/runs/{id}/cancel", Tag: "runs", Mutates: true,
		Also:     map[int]string{http.StatusConflict: "the run already finished"},
		Summary:  "Cancel a pending, running or waiting run: every unfinished task, its delays and its turns; 409 when the run already finished",
		Response: workflow.RunInfo{},
		Handle: s.runAction("run.cancel", func(ctx context.Context, id string) error {
			err := s.eng.Cancel(ctx, id)
			var tre *workflow.TurnsRunningError
			if errors.As(err, &tre) {
				// The run is cancelled all the same; only turns whose
				// code ignores its context still run.
				s.log.Warn("admin: cancelled a run whose turns still run", "run.id", id, "error", err.Error())
				return nil
			}
			if err != nil && ctx.Err() != nil && s.runStatus(context.WithoutCancel(ctx), id) == "cancelled" {
				// The request ended (the client left, or the server
				// stops) while Cancel waited for the run's turns after
				// its commit: the run is cancelled, and that is recorded
				// and answered as such.
				s.log.Warn("admin: cancelled a run, and the request ended while its turns were ending", "run.id", id, "error", err.Error())
				return nil
			}
			return err
		}),
	})
	s.add(&route{
		Method: "POST", Path: "/api/runs/{id}/retry", Tag: "runs", Mutates: true,
		Also:     map[int]string{http.StatusConflict: "the run is neither failed nor cancelled, or turns of its failed or cancelled tasks still run"},
		Summary:  "Retry a failed or cancelled run from its failed steps, keeping the recorded ones; 409 for a run of another status",
		Response: workflow.RunInfo{},
		Handle:   s.runAction("run.retry", s.eng.Retry),
	})
}

// runID reads the {id} path value as a run ID, a UUID.
func runID(r *http.Request) (string, error) {
	v := r.PathValue("id")
	id, err := uuid.Parse(v)
	if err != nil {
		return "", errorf(http.StatusBadRequest, "invalid run ID %q: a UUID is required", v)
	}
	return id.String(), nil
}

// runErr maps the workflow package's errors about run id to API errors.
func runErr(err error, id string) error {
	switch {
	case errors.Is(err, workflow.ErrRunNotFound):
		return errorf(http.StatusNotFound, "run %s not found", id)
	case errors.Is(err, workflow.ErrInvalidRunFilter):
		return errorf(http.StatusBadRequest, "%s", strings.TrimPrefix(err.Error(), "workflow: "))
	}
	return err
}

// runAction serves cancel and retry: it applies fn to the run, writes the
// audit line, and responds with the run as it is afterwards.
func (s *Server) runAction(action string, fn func(ctx context.Context, id string) error) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		id, err := runID(r)
		if err != nil {
			return err
		}
		if err := fn(r.Context(), id); err != nil {
			switch {
			case errors.Is(err, workflow.ErrRunFinished):
				return errorf(http.StatusConflict, "run %s is %s: only a pending, running or waiting run can be cancelled", id, s.runStatus(r.Context(), id))
			case errors.Is(err, workflow.ErrRunBeingDeleted):
				return errorf(http.StatusConflict, "run %s is being deleted by retention, having finished more than the retention ago: it can no longer be retried", id)
			case errors.Is(err, workflow.ErrRunNotRetryable):
				return errorf(http.StatusConflict, "run %s is %s: only a failed or cancelled run can be retried", id, s.runStatus(r.Context(), id))
			}
			var tre *workflow.TurnsRunningError
			if errors.As(err, &tre) {
				return errorf(http.StatusConflict, "run %s: %d turns of its failed or cancelled tasks still run after %s; nothing changed, try again once they end", id, tre.Running, tre.Waited)
			}
			return runErr(err, id)
		}
		s.audit(r, action, id)
		// The action is done: read the run even if the request has ended
		// meanwhile, for a server that is stopping still answers.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 10*time.Second)
		defer cancel()
		run, err := workflow.InspectRun(rctx, s.pool, id)
		if err != nil {
			return runErr(err, id)
		}
		writeJSON(w, http.StatusOK, run)
		return nil
	}
}

// runStatus is the status of run id as shown, for an error message.
func (s *Server) runStatus(ctx context.Context, id string) string {
	run, err := workflow.InspectRun(ctx, s.pool, id)
	if err != nil {
		return "in another state"
	}
	return run.Status
}

// listRuns serves GET /api/runs.
func (s *Server) listRuns(w http.ResponseWriter, r *http.Request) error {
	page, err := paging(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	f := workflow.RunFilter{
		Workflow:       q.Get("workflow"),
		Status:         q.Get("status"),
		IdempotencyKey: q.Get("idempotency_key"),
		Limit:          page.Limit,
		Offset:         page.Offset,
	}
	if n := len(f.Workflow); n > runWorkflowMax {
		return errorf(http.StatusBadRequest, "invalid workflow: %d bytes, over the limit of %d", n, runWorkflowMax)
	}
	if n := len(f.IdempotencyKey); n > runKeyMax {
		return errorf(http.StatusBadRequest, "invalid idempotency_key: %d bytes, over the limit of %d", n, runKeyMax)
	}
	for _, p := range []struct{ name, v string }{{"workflow", f.Workflow}, {"idempotency_key", f.IdempotencyKey}} {
		if !utf8.ValidString(p.v) || strings.ContainsRune(p.v, 0) {
			return errorf(http.StatusBadRequest, "invalid %s %q: not UTF-8 text without NUL characters", p.name, p.v)
		}
	}
	if f.Status != "" && !slices.Contains(workflow.RunStatuses, f.Status) {
		e := errorf(http.StatusBadRequest, "invalid status %q: use one of %s", f.Status, strings.Join(workflow.RunStatuses, ", "))
		e.body.Allowed = workflow.RunStatuses
		return e
	}
	for _, p := range []struct {
		name string
		into *time.Time
	}{{"created_after", &f.CreatedAfter}, {"created_before", &f.CreatedBefore}} {
		v := q.Get(p.name)
		if v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return errorf(http.StatusBadRequest, "invalid %s %q: use an RFC 3339 time such as 2025-01-31T08:00:00Z", p.name, v)
		}
		*p.into = t
	}
	if !f.CreatedAfter.IsZero() && !f.CreatedBefore.IsZero() && !f.CreatedAfter.Before(f.CreatedBefore) {
		return errorf(http.StatusBadRequest, "invalid created_after %s: it must be before created_before %s",
			f.CreatedAfter.Format(time.RFC3339Nano), f.CreatedBefore.Format(time.RFC3339Nano))
	}
	runs, err := workflow.ListRuns(r.Context(), s.pool, f)
	if err != nil {
		return runErr(err, "")
	}
	total, err := workflow.CountRuns(r.Context(), s.pool, f)
	if err != nil {
		return runErr(err, "")
	}
	items := make([]workflow.RunInfo, 0, len(runs))
	for _, run := range runs {
		items = append(items, *run)
	}
	list := newList(items, page)
	list.Total = &total
	writeJSON(w, http.StatusOK, list)
	return nil
}

// runDetail builds a run's detail from what Inspect read.
func (s *Server) runDetail(run *workflow.RunInfo) RunDetail {
	d := RunDetail{
		Tasks:    make([]workflow.TaskInfo, 0, len(run.Tasks)),
		Steps:    []RunStep{},
		Delays:   []RunDelay{},
		Timeline: timeline(run.Tasks),
		DAGs:     DAGs(run.Tasks),
		TraceID:  run.TraceID,
	}
	if d.TraceID != "" && s.cfg.JaegerURL != "" {
		d.TraceURL = s.cfg.JaegerURL + "/trace/" + d.TraceID
	}
	failedChild := map[string]bool{}
	for _, t := range run.Tasks {
		if t.Status == "failed" && t.ParentID != "" {
			failedChild[t.ParentID] = true
		}
	}
	for _, t := range run.Tasks {
		for _, st := range t.Steps {
			d.Steps = append(d.Steps, RunStep{TaskID: t.ID, TaskKey: t.Key, StepInfo: st})
			if st.Kind == "delay" {
				dl := RunDelay{TaskID: t.ID, TaskKey: t.Key, Name: st.Name, Status: st.Status, CreatedAt: st.CreatedAt, ResumeAt: st.ResumeAt}
				if st.Status != "waiting" {
					dl.FiredAt = st.FinishedAt
				}
				d.Delays = append(d.Delays, dl)
			}
		}
		if t.Status == "failed" && !failedChild[t.ID] && d.Failure == nil {
			f := &RunFailure{TaskID: t.ID, TaskKey: t.Key, Step: t.FailedStep, Error: t.Error, ErrorKind: t.ErrorKind}
			for _, st := range t.Steps {
				// The step the task's error names, when it names one: an
				// earlier step's failure that the code went on from is
				// recorded too, and is not what failed the task.
				if st.Kind == "step" && st.Status == "failed" && (t.FailedStep == "" || st.Name == t.FailedStep) {
					f.Step, f.StepRecorded = st.Name, true
					if f.Error == "" {
						f.Error, f.ErrorKind = st.Error, st.ErrorKind
					}
				}
			}
			d.Failure = f
		}
		t.Steps = nil
		d.Tasks = append(d.Tasks, t)
	}
	run.Tasks = nil
	d.Run = *run
	return d
}

// timeline lays out the turns, steps, waits and delays of the tasks.
//
// A step's record holds the moment it ended, not when it began: a step is
// drawn from the latest moment before its end at which its task was busy
// with something else (the start of its turn's attempt, the insertion of
// its turn, the end of the step before it, the firing of a delay), which
// is when it began unless the workflow code did other work in between.
func timeline(tasks []workflow.TaskInfo) []TimelineEntry {
	out := []TimelineEntry{}
	for _, t := range tasks {
		var marks []time.Time // moments after which a step may begin
		for i, tu := range t.TurnJobs {
			marks = append(marks, tu.CreatedAt)
			if tu.AttemptedAt != nil {
				marks = append(marks, *tu.AttemptedAt)
			}
			for _, ae := range tu.Errors {
				marks = append(marks, ae.At)
			}
			if tu.AttemptedAt == nil {
				continue // not worked yet
			}
			start := *tu.AttemptedAt
			if len(tu.Errors) > 0 || tu.Attempt > 1 {
				// Its first attempt began soon after its insertion;
				// River keeps only the latest attempt's start.
				start = tu.CreatedAt
			}
			end := tu.FinalizedAt
			if end == nil && tu.State != "running" && len(tu.Errors) > 0 {
				at := tu.Errors[len(tu.Errors)-1].At
				end = &at
			}
			out = append(out, TimelineEntry{
				Kind: TimelineTurn, TaskID: t.ID, TaskKey: t.Key, Name: fmt.Sprintf("turn %d", i+1),
				Start: start, End: end, Status: tu.State, JobID: tu.JobID, Attempt: tu.Attempt,
			})
		}
		if t.StartedAt != nil {
			marks = append(marks, *t.StartedAt)
		}
		for _, st := range t.Steps {
			if st.FinishedAt != nil {
				marks = append(marks, *st.FinishedAt)
			}
			if st.Kind == "delay" {
				marks = append(marks, st.CreatedAt)
			}
		}
		sort.Slice(marks, func(i, j int) bool { return marks[i].Before(marks[j]) })
		for _, st := range t.Steps {
			switch st.Kind {
			case "delay":
				end := st.FinishedAt
				if st.Status == "waiting" {
					end = st.ResumeAt
				}
				out = append(out, TimelineEntry{
					Kind: TimelineDelay, TaskID: t.ID, TaskKey: t.Key, Name: st.Name,
					Start: st.CreatedAt, End: end, Status: st.Status, ResumeAt: st.ResumeAt,
				})
			case "step":
				end := st.CreatedAt
				if st.FinishedAt != nil {
					end = *st.FinishedAt
				}
				start := end
				for _, m := range marks {
					if !m.Before(end) {
						break
					}
					start = m
				}
				out = append(out, TimelineEntry{
					Kind: TimelineStep, TaskID: t.ID, TaskKey: t.Key, Name: st.Name,
					Start: start, End: &end, Status: st.Status, Attempt: st.Attempts,
				})
			}
		}
		for _, w := range t.Waits {
			if w.Kind != workflow.WaitChildren {
				continue // delays are drawn from their steps
			}
			out = append(out, TimelineEntry{
				Kind: TimelineWait, TaskID: t.ID, TaskKey: t.Key, Name: "children",
				Start: w.Start, End: w.End, Status: w.Status,
			})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out
}
