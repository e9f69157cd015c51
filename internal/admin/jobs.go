package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/workflow"
)

// Jobs and dead letters: the routes of the classic job-queue admin API
// under /api/admin/jobs (stats, jobs by status, status, priority, boost,
// retry, bulk status and bulk retry), a job's detail with its live
// progress and errors, and the dead letters of jobs and runs.
//
// States are River's: available, pending, scheduled, retryable, running,
// completed, cancelled, discarded (a dead letter). The classic API's
// status names are accepted wherever a state is: queued (available),
// crawling (running), success (completed) and failed (discarded).
//
// A turn job (kind braid_task) is one turn of a task of a run. It is never
// retried alone, since a turn retried alone would find its task failed and
// do nothing: retrying it retries its run, from the failed step. Nor is it
// cancelled alone: its run is.
//
// Priorities are River's four levels: 1 critical, 2 high, 3 normal, 4 low
// (braid's names). The classic job-queue admin API speaks of 0 to 100, highest first; a number
// from 1 to 4 is taken as River's level, and any other from 0 to 100 is
// mapped to the nearest of the named levels, 100 critical, 75 high,
// 50 normal, 25 low (0, background, is low too): 88–100 critical, 63–87
// high, 38–62 normal, 0–37 low. A boost counts levels, not points: River
// has four, so a boost of 1 raises low to normal, and 3 or more makes any
// job critical, as the classic job-queue admin API caps its boosts at 100.

// JobInfo is a job as lists show it.
type JobInfo struct {
	ID    int64  `json:"id"`
	Kind  string `json:"kind"`
	Queue string `json:"queue"`
	// State is River's state of the job.
	State string `json:"state"`
	// Priority is River's priority, 1 (critical) to 4 (low), and
	// PriorityName its name.
	Priority     int             `json:"priority"`
	PriorityName string          `json:"priority_name"`
	Attempt      int             `json:"attempt"`
	MaxAttempts  int             `json:"max_attempts"`
	Args         json.RawMessage `json:"args"`
	Tags         []string        `json:"tags"`
	CreatedAt    time.Time       `json:"created_at"`
	ScheduledAt  time.Time       `json:"scheduled_at"`
	AttemptedAt  *time.Time      `json:"attempted_at,omitempty"`
	FinalizedAt  *time.Time      `json:"finalized_at,omitempty"`
	// LastError is the latest attempt's error, if any.
	LastError *JobError `json:"last_error,omitempty"`
	// Run is the run of a turn job (kind braid_task).
	Run *JobRun `json:"run,omitempty"`
	// Progress is the job's latest progress report, if it made any.
	Progress *queue.JobProgress `json:"progress,omitempty"`
}

// JobRun is the run, task and workflow of a turn job, with the run's
// status.
type JobRun struct {
	workflow.TurnRun
	RunStatus string `json:"run_status,omitempty"`
}

// JobError is the error of one attempt. Trace is a panic's stack.
type JobError struct {
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	Error   string    `json:"error"`
	Trace   string    `json:"trace,omitempty"`
}

// JobDetail is GET /api/admin/jobs/{id}: a job with its metadata, every
// attempt's error and the state changes PUT .../status accepts for it.
type JobDetail struct {
	JobInfo
	Metadata    json.RawMessage `json:"metadata"`
	AttemptedBy []string        `json:"attempted_by"`
	// Errors are the errors of every failed attempt, oldest first.
	Errors []JobError `json:"errors"`
	// Transitions are the states PUT /api/admin/jobs/{id}/status may move
	// the job to now.
	Transitions []string `json:"transitions"`
	// RetriedRun is set by a retry of a turn job: the run that was retried.
	RetriedRun string `json:"retried_run,omitempty"`
}

// JobStatsResponse is GET /api/admin/jobs/stats.
type JobStatsResponse struct {
	Total int64 `json:"total"`
	// ByState counts jobs in each of River's states; every state is
	// present.
	ByState map[string]int64 `json:"by_state"`
	// ByQueue counts, for each queue that has jobs, its jobs in each
	// state.
	ByQueue map[string]map[string]int64 `json:"by_queue"`
	// ByStatus counts by the classic job-queue admin API's names: queued (available), running,
	// failed (discarded: dead letters) and completed.
	ByStatus map[string]int64 `json:"by_status"`
}

// JobStatusRequest is the body of PUT /api/admin/jobs/{id}/status.
type JobStatusRequest struct {
	Status string `json:"status"`
}

// JobPriorityRequest is the body of PUT /api/admin/jobs/{id}/priority:
// River's level 1 to 4, a name (critical, high, normal, low), or the classic job-queue admin API's
// 0–100.
type JobPriorityRequest struct {
	Priority json.RawMessage `json:"priority"`
}

// JobBoostRequest is the body of POST /api/admin/jobs/{id}/boost: how many
// levels to raise the priority by, toward critical.
type JobBoostRequest struct {
	Boost int `json:"boost"`
}

// BulkStatusRequest is the body of PUT /api/admin/jobs/bulk/status.
type BulkStatusRequest struct {
	JobIDs []int64 `json:"job_ids"`
	Status string  `json:"status"`
}

// BulkRetryRequest is the body of POST /api/admin/jobs/bulk/retry.
type BulkRetryRequest struct {
	JobIDs []int64 `json:"job_ids"`
}

// BulkResponse reports each job of a bulk change.
type BulkResponse struct {
	Results   []BulkResult `json:"results"`
	Succeeded int          `json:"succeeded"`
	Failed    int          `json:"failed"`
}

// BulkResult is the outcome for one job of a bulk change. On success State
// is the job's state afterwards; on failure Status is the HTTP status the
// single-job route would have answered, Error says why, and Allowed lists
// the transitions the job could take. RetriedRun is the run retried for a
// turn job.
type BulkResult struct {
	ID         int64    `json:"id"`
	OK         bool     `json:"ok"`
	State      string   `json:"state,omitempty"`
	RetriedRun string   `json:"retried_run,omitempty"`
	Status     int      `json:"status,omitempty"`
	Error      string   `json:"error,omitempty"`
	Allowed    []string `json:"allowed,omitempty"`
}

// jobStateAliases are the classic job-queue admin API's status names.
var jobStateAliases = map[string]rivertype.JobState{
	"queued":   rivertype.JobStateAvailable,
	"crawling": rivertype.JobStateRunning,
	"success":  rivertype.JobStateCompleted,
	"failed":   rivertype.JobStateDiscarded,
}

// jobStateNames lists the accepted state names: River's, then the classic job-queue admin API's.
func jobStateNames() []string {
	var out []string
	for _, s := range rivertype.JobStates() {
		out = append(out, string(s))
	}
	return append(out, "queued", "crawling", "success", "failed")
}

// parseJobState reads a River state or one of the classic job-queue admin API's names.
func parseJobState(what, v string) (rivertype.JobState, error) {
	v = strings.ToLower(strings.TrimSpace(v))
	if s, ok := jobStateAliases[v]; ok {
		return s, nil
	}
	if slices.Contains(rivertype.JobStates(), rivertype.JobState(v)) {
		return rivertype.JobState(v), nil
	}
	return "", unprocessable(jobStateNames(), "unknown %s %q: use one of River's states (%s) or the classic job-queue admin API's queued, crawling, success, failed",
		what, clip(v), joinStates(rivertype.JobStates()))
}

func joinStates(states []rivertype.JobState) string {
	return strings.Join(stateStrings(states), ", ")
}

func stateStrings(states []rivertype.JobState) []string {
	s := make([]string, len(states))
	for i, st := range states {
		s[i] = string(st)
	}
	return s
}

// clip shortens a value quoted back in an error message.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// percentPriority maps the classic API's 0–100 priority (higher first) onto River's
// levels: the nearest of 100 critical, 75 high, 50 normal, 25 low.
func percentPriority(n int) queue.Priority {
	switch {
	case n >= 88:
		return queue.PriorityCritical
	case n >= 63:
		return queue.PriorityHigh
	case n >= 38:
		return queue.PriorityNormal
	}
	return queue.PriorityLow
}

var priorityNames = []string{"critical", "high", "normal", "low", "1", "2", "3", "4", "0-100"}

// parsePriority reads a priority: a name, River's level 1 to 4 (as a
// number or a string), or the classic job-queue admin API's 0–100.
func parsePriority(raw json.RawMessage) (queue.Priority, error) {
	raw = json.RawMessage(strings.TrimSpace(string(raw)))
	if len(raw) == 0 || string(raw) == "null" {
		return 0, unprocessable(priorityNames, "priority is required: a name (critical, high, normal, low), River's level 1 to 4, or 0 to 100")
	}
	var name string
	if err := json.Unmarshal(raw, &name); err == nil {
		p, err := queue.ParsePriority(name)
		if err != nil {
			return 0, unprocessable(priorityNames, "unknown priority %q: use critical, high, normal, low, or River's level 1 to 4", clip(name))
		}
		return p, nil
	}
	var n float64
	if err := json.Unmarshal(raw, &n); err != nil || n != float64(int(n)) {
		return 0, unprocessable(priorityNames, "priority %s is neither a name nor an integer", clip(string(raw)))
	}
	switch {
	case n >= 1 && n <= 4:
		return queue.Priority(int(n)), nil
	case n >= 0 && n <= 100:
		return percentPriority(int(n)), nil
	}
	return 0, unprocessable(priorityNames, "priority %d is out of range: use River's level 1 to 4, or 0 to 100", int(n))
}

var jobListParams = append([]Param{
	{Name: "status", Type: "string", Description: "only jobs in this state: River's (available, pending, scheduled, retryable, running, completed, cancelled, discarded) or the classic job-queue admin API's (queued, crawling, success, failed)"},
	{Name: "kind", Type: "string", Description: "only jobs of this kind"},
	{Name: "queue", Type: "string", Description: "only jobs of this queue"},
	{Name: "state", Type: "string", Description: "status's other name, read when status is not given"},
}, pagingParams...)

// filterMax bounds the length of a kind or queue filter.
const filterMax = 200

func (s *Server) routeJobs() {
	const base = "/api/admin/jobs"
	s.add(&route{
		Method: "GET", Path: base + "/stats", Tag: "jobs",
		Summary:  "Job counts by state and by queue (River's states), and by the classic job-queue admin API's statuses",
		Response: JobStatsResponse{},
		Handle:   s.jobStats,
	})
	s.add(&route{
		Method: "GET", Path: base, Tag: "jobs",
		Summary: "Jobs by status, kind and queue, newest first, with limit/offset and the total; status takes River's states or the classic job-queue admin API's queued (available), crawling (running), success (completed), failed (discarded)",
		Query:   jobListParams, Response: List[JobInfo]{},
		Handle: s.listJobs,
	})
	s.add(&route{
		Method: "GET", Path: base + "/{id}", Tag: "jobs",
		Summary:  "A job: its args, metadata, live progress, every attempt's error, its run when it is a turn job, and the status changes it accepts",
		Response: JobDetail{},
		Handle:   s.getJob,
	})
	s.add(&route{
		Method: "PUT", Path: base + "/{id}/status", Tag: "jobs", Mutates: true,
		Also:    map[int]string{http.StatusConflict: "a turn job, whose run is cancelled or retried instead; a turn job whose run is not failed or cancelled; or another live job holds the same unique key"},
		Summary: "Move a job to another state, safe transitions only: available, pending, scheduled, retryable or running (River's remote cancel) to cancelled; scheduled or retryable to available (run now); completed, cancelled or discarded to available (a retry; a turn job's run is retried). Anything else is 422 with the allowed transitions. The classic job-queue admin API's names are accepted",
		Body:    JobStatusRequest{}, Response: JobDetail{},
		Handle: s.putJobStatus,
	})
	s.add(&route{
		Method: "PUT", Path: base + "/{id}/priority", Tag: "jobs", Mutates: true,
		Also:    map[int]string{http.StatusConflict: "the job already finished"},
		Summary: "Set an unfinished job's priority: critical, high, normal, low, River's 1 (critical) to 4 (low), or the classic job-queue admin API's 0-100 mapped to the nearest of 100 critical, 75 high, 50 normal, 25 low",
		Body:    JobPriorityRequest{}, Response: JobDetail{},
		Handle: s.putJobPriority,
	})
	s.add(&route{
		Method: "POST", Path: base + "/{id}/boost", Tag: "jobs", Mutates: true,
		Also:    map[int]string{http.StatusConflict: "the job already finished"},
		Summary: "Raise an unfinished job's priority by boost levels toward critical, capped at critical: River has 4 levels where the classic job-queue admin API has 0-100, so 3 or more makes any job critical",
		Body:    JobBoostRequest{}, Response: JobDetail{},
		Handle: s.boostJob,
	})
	s.add(&route{
		Method: "POST", Path: base + "/{id}/retry", Tag: "jobs", Mutates: true,
		Also:     map[int]string{http.StatusConflict: "a turn job, whose run is cancelled or retried instead; a turn job whose run is not failed or cancelled; or another live job holds the same unique key"},
		Summary:  "Retry a job: a dead letter, cancelled or completed job runs again (one more attempt if it used them all), a scheduled or retryable one runs now; a turn job retries its run, which must be failed or cancelled",
		Response: JobDetail{},
		Handle: func(w http.ResponseWriter, r *http.Request) error {
			return s.changeOne(w, r, "job.retry", rivertype.JobStateAvailable)
		},
	})
	s.add(&route{
		Method: "PUT", Path: base + "/bulk/status", Tag: "jobs", Mutates: true,
		Summary: fmt.Sprintf("Move up to %d jobs to a state, with the transitions of PUT /api/admin/jobs/{id}/status, reporting each job's outcome; an unknown ID is 404 and changes nothing", queue.IDsMax),
		Body:    BulkStatusRequest{}, Response: BulkResponse{},
		Handle: s.bulkStatus,
	})
	s.add(&route{
		Method: "POST", Path: base + "/bulk/retry", Tag: "jobs", Mutates: true,
		Summary: fmt.Sprintf("Retry up to %d jobs as POST /api/admin/jobs/{id}/retry does, reporting each job's outcome (a turn job's run is retried once); an unknown ID is 404 and changes nothing", queue.IDsMax),
		Body:    BulkRetryRequest{}, Response: BulkResponse{},
		Handle: s.bulkRetry,
	})
	s.add(&route{
		Method: "GET", Path: "/api/admin/dead-letters/jobs", Tag: "jobs",
		Summary: "Dead letters: discarded jobs, most recently discarded first, with their last error and, for a turn job, its run",
		Query: append([]Param{
			{Name: "kind", Type: "string", Description: "only jobs of this kind"},
			{Name: "queue", Type: "string", Description: "only jobs of this queue"},
		}, pagingParams...),
		Response: List[JobInfo]{},
		Handle:   s.deadJobs,
	})
	s.add(&route{
		Method: "GET", Path: "/api/admin/dead-letters/runs", Tag: "jobs",
		Summary: "Failed runs, newest first, with their errors; retry one with POST /api/runs/{id}/retry",
		Query: append([]Param{
			{Name: "workflow", Type: "string", Description: "only runs of this workflow"},
		}, pagingParams...),
		Response: List[workflow.RunInfo]{},
		Handle:   s.deadRuns,
	})
}

func (s *Server) jobStats(w http.ResponseWriter, r *http.Request) error {
	st, err := s.q.Stats(r.Context())
	if err != nil {
		return err
	}
	out := JobStatsResponse{Total: st.Total, ByState: map[string]int64{}, ByQueue: map[string]map[string]int64{}}
	for k, v := range st.ByState {
		out.ByState[string(k)] = v
	}
	for q, m := range st.ByQueue {
		out.ByQueue[q] = map[string]int64{}
		for k, v := range m {
			out.ByQueue[q][string(k)] = v
		}
	}
	out.ByStatus = map[string]int64{
		"queued":    st.ByState[rivertype.JobStateAvailable],
		"running":   st.ByState[rivertype.JobStateRunning],
		"failed":    st.ByState[rivertype.JobStateDiscarded],
		"completed": st.ByState[rivertype.JobStateCompleted],
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// textFilter reads a kind or queue filter.
func textFilter(r *http.Request, name string) (string, error) {
	v := r.URL.Query().Get(name)
	if len(v) > filterMax {
		return "", errorf(http.StatusBadRequest, "%s filter is %d bytes; the limit is %d", name, len(v), filterMax)
	}
	if !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
		return "", errorf(http.StatusBadRequest, "%s filter %q is not UTF-8 text without NUL characters", name, v)
	}
	return v, nil
}

func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) error {
	page, err := paging(r)
	if err != nil {
		return err
	}
	f := queue.JobPageFilter{Limit: page.Limit, Offset: page.Offset}
	q := r.URL.Query()
	status := q.Get("status")
	if status == "" {
		status = q.Get("state")
	}
	if status != "" {
		if f.State, err = parseJobState("status", status); err != nil {
			return err
		}
	}
	if f.Kind, err = textFilter(r, "kind"); err != nil {
		return err
	}
	if f.Queue, err = textFilter(r, "queue"); err != nil {
		return err
	}
	return s.writeJobPage(w, r, f, page)
}

func (s *Server) deadJobs(w http.ResponseWriter, r *http.Request) error {
	page, err := paging(r)
	if err != nil {
		return err
	}
	f := queue.JobPageFilter{State: rivertype.JobStateDiscarded, Order: queue.JobOrderFinalized, Limit: page.Limit, Offset: page.Offset}
	if f.Kind, err = textFilter(r, "kind"); err != nil {
		return err
	}
	if f.Queue, err = textFilter(r, "queue"); err != nil {
		return err
	}
	return s.writeJobPage(w, r, f, page)
}

func (s *Server) writeJobPage(w http.ResponseWriter, r *http.Request, f queue.JobPageFilter, page Page) error {
	res, err := s.q.JobsPage(r.Context(), f)
	if err != nil {
		return err
	}
	items, err := s.jobInfos(r.Context(), res.Jobs)
	if err != nil {
		return err
	}
	list := newList(items, page)
	list.Total = &res.Total
	writeJSON(w, http.StatusOK, list)
	return nil
}

func (s *Server) deadRuns(w http.ResponseWriter, r *http.Request) error {
	page, err := paging(r)
	if err != nil {
		return err
	}
	wf, err := textFilter(r, "workflow")
	if err != nil {
		return err
	}
	f := workflow.RunFilter{Status: "failed", Workflow: wf, Limit: page.Limit, Offset: page.Offset}
	runs, err := workflow.ListRuns(r.Context(), s.pool, f)
	if err != nil {
		return err
	}
	total, err := workflow.CountRuns(r.Context(), s.pool, f)
	if err != nil {
		return err
	}
	items := make([]workflow.RunInfo, len(runs))
	for i, run := range runs {
		items[i] = *run
	}
	list := newList(items, page)
	list.Total = &total
	writeJSON(w, http.StatusOK, list)
	return nil
}

// jobInfos describes jobs for a list: with their last error, the run of
// each turn job, and the progress of those that reported any.
func (s *Server) jobInfos(ctx context.Context, jobs []*rivertype.JobRow) ([]JobInfo, error) {
	runs, err := s.turnRuns(ctx, jobs)
	if err != nil {
		return nil, err
	}
	ids := make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	progress, err := s.q.JobsProgress(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make([]JobInfo, len(jobs))
	for i, j := range jobs {
		out[i] = jobInfo(j, runs[j.ID], progress[j.ID])
	}
	return out, nil
}

// turnRuns finds the run of each turn job among jobs, with its status.
func (s *Server) turnRuns(ctx context.Context, jobs []*rivertype.JobRow) (map[int64]*JobRun, error) {
	found, err := workflow.TurnRuns(ctx, s.pool, jobs)
	if err != nil {
		return nil, err
	}
	out := make(map[int64]*JobRun, len(found))
	if len(found) == 0 {
		return out, nil
	}
	var runIDs []string
	for _, tr := range found {
		if !slices.Contains(runIDs, tr.RunID) {
			runIDs = append(runIDs, tr.RunID)
		}
	}
	rows, err := s.pool.Query(ctx, `SELECT id::text, status FROM braid_runs WHERE id = ANY($1::uuid[])`, runIDs)
	if err != nil {
		return nil, fmt.Errorf("reading the runs of turn jobs: %w", err)
	}
	status := map[string]string{}
	var id, st string
	for rows.Next() {
		if err := rows.Scan(&id, &st); err != nil {
			rows.Close()
			return nil, err
		}
		status[id] = st
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for jobID, tr := range found {
		out[jobID] = &JobRun{TurnRun: tr, RunStatus: status[tr.RunID]}
	}
	return out, nil
}

func jobInfo(j *rivertype.JobRow, run *JobRun, p *queue.JobProgress) JobInfo {
	info := JobInfo{
		ID: j.ID, Kind: j.Kind, Queue: j.Queue, State: string(j.State),
		Priority: j.Priority, PriorityName: queue.Priority(j.Priority).String(),
		Attempt: j.Attempt, MaxAttempts: j.MaxAttempts,
		Args: json.RawMessage(j.EncodedArgs), Tags: j.Tags,
		CreatedAt: j.CreatedAt, ScheduledAt: j.ScheduledAt, AttemptedAt: j.AttemptedAt, FinalizedAt: j.FinalizedAt,
		Run: run, Progress: p,
	}
	if len(info.Args) == 0 || !json.Valid(info.Args) {
		info.Args = json.RawMessage("{}")
	}
	if info.Tags == nil {
		info.Tags = []string{}
	}
	if n := len(j.Errors); n > 0 {
		e := jobError(j.Errors[n-1])
		info.LastError = &e
	}
	return info
}

func jobError(e rivertype.AttemptError) JobError {
	return JobError{Attempt: e.Attempt, At: e.At, Error: e.Error, Trace: e.Trace}
}

// jobByID reads a job, or 404.
func (s *Server) jobByID(ctx context.Context, id int64) (*rivertype.JobRow, error) {
	job, err := s.q.River().JobGet(ctx, id)
	if errors.Is(err, rivertype.ErrNotFound) {
		return nil, errorf(http.StatusNotFound, "job %d not found", id)
	}
	return job, err
}

// jobDetail describes one job fully.
func (s *Server) jobDetail(ctx context.Context, job *rivertype.JobRow) (*JobDetail, error) {
	runs, err := s.turnRuns(ctx, []*rivertype.JobRow{job})
	if err != nil {
		return nil, err
	}
	p, err := s.q.JobProgress(ctx, job.ID)
	if errors.Is(err, rivertype.ErrNotFound) {
		p, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	d := &JobDetail{
		JobInfo:     jobInfo(job, runs[job.ID], p),
		Metadata:    json.RawMessage(job.Metadata),
		AttemptedBy: job.AttemptedBy,
		Errors:      make([]JobError, len(job.Errors)),
		Transitions: stateStrings(queue.Transitions(job.State)),
	}
	if len(d.Metadata) == 0 || !json.Valid(d.Metadata) {
		d.Metadata = json.RawMessage("{}")
	}
	if d.AttemptedBy == nil {
		d.AttemptedBy = []string{}
	}
	for i, e := range job.Errors {
		d.Errors[i] = jobError(e)
	}
	return d, nil
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	job, err := s.jobByID(r.Context(), id)
	if err != nil {
		return err
	}
	d, err := s.jobDetail(r.Context(), job)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, d)
	return nil
}

func (s *Server) putJobStatus(w http.ResponseWriter, r *http.Request) error {
	if _, err := pathID(r, "id"); err != nil {
		return err
	}
	var req JobStatusRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if req.Status == "" {
		return unprocessable(jobStateNames(), "status is required")
	}
	to, err := parseJobState("status", req.Status)
	if err != nil {
		return err
	}
	return s.changeOne(w, r, "job.status."+string(to), to)
}

// changeOne serves a state change of one job: the status route and retry.
func (s *Server) changeOne(w http.ResponseWriter, r *http.Request, action string, to rivertype.JobState) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	ctx := r.Context()
	job, err := s.jobByID(ctx, id)
	if err != nil {
		return err
	}
	runs, err := s.turnRuns(ctx, []*rivertype.JobRow{job})
	if err != nil {
		return err
	}
	after, retried, err := s.changeState(ctx, job, runs[id], to)
	if err != nil {
		return err
	}
	if retried != "" {
		s.audit(r, action, id, "run:"+retried)
	} else {
		s.audit(r, action, id)
	}
	d, err := s.jobDetail(ctx, after)
	if err != nil {
		return err
	}
	d.RetriedRun = retried
	writeJSON(w, http.StatusOK, d)
	return nil
}

// changeState moves job to state to, or retries the run of a turn job
// that asks for available. It returns the job afterwards and the run it
// retried, if any.
//
// A turn job is never retried alone, and job may have been read a while
// ago (a bulk request works through its jobs one by one): a turn job's
// state is read again with its row locked, in the transaction that moves
// it, and a turn job found finished since is decided again.
func (s *Server) changeState(ctx context.Context, job *rivertype.JobRow, run *JobRun, to rivertype.JobState) (*rivertype.JobRow, string, error) {
	for {
		after, retried, again, err := s.changeStateOnce(ctx, job, run, to)
		if !again {
			return after, retried, err
		}
	}
}

// changeStateOnce is one decision of changeState; again is true when a
// turn job was found finished since job was read, with job.State updated.
func (s *Server) changeStateOnce(ctx context.Context, job *rivertype.JobRow, run *JobRun, to rivertype.JobState) (after *rivertype.JobRow, retried string, again bool, err error) {
	if job.Kind == workflow.TaskKind && jobFinished(job.State) && to == rivertype.JobStateAvailable {
		if run == nil {
			return nil, "", false, errorf(http.StatusConflict, "job %d is a turn job whose task no longer exists (its run was deleted); there is nothing to retry", job.ID)
		}
		if err := s.eng.Retry(ctx, run.RunID); err != nil {
			return nil, "", false, turnRetryErr(err, job.ID, run, s.jobRunStatus(ctx, run.RunID))
		}
		after, err := s.jobByID(ctx, job.ID)
		if err != nil {
			// The run was retried: say so, with the job as it was read.
			s.log.Warn("admin: reading a job after retrying its run", "job.id", job.ID, "run.id", run.RunID, "error", err)
			return job, run.RunID, false, nil
		}
		return after, run.RunID, false, nil
	}
	if job.Kind == workflow.TaskKind && to == rivertype.JobStateCancelled && run != nil && job.State != rivertype.JobStateCancelled {
		return nil, "", false, errorf(http.StatusConflict, "job %d is a turn of run %s (workflow %q): cancel the run (POST /api/runs/%s/cancel), not one of its turns", job.ID, run.RunID, run.Workflow, run.RunID)
	}
	if job.Kind == workflow.TaskKind {
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			var st string
			if err := tx.QueryRow(ctx, `SELECT state::text FROM river_job WHERE id = $1 FOR UPDATE`, job.ID).Scan(&st); err != nil {
				if errors.Is(err, pgx.ErrNoRows) {
					return fmt.Errorf("job %d: %w", job.ID, rivertype.ErrNotFound)
				}
				return err
			}
			if now := rivertype.JobState(st); now != job.State && jobFinished(now) {
				job.State, again = now, true
				return nil
			}
			after, err = s.q.SetStateTx(ctx, tx, job.ID, to)
			return err
		})
		if again {
			return nil, "", true, nil
		}
	} else {
		after, err = s.q.SetState(ctx, job.ID, to)
	}
	var te *queue.TransitionError
	switch {
	case errors.As(err, &te):
		return nil, "", false, unprocessable(stateStrings(te.Allowed), "job %d is %s: a %s job cannot be moved to %s; allowed: %s",
			job.ID, te.From, te.From, te.To, allowedText(te.Allowed))
	case errors.Is(err, queue.ErrUniqueConflict):
		return nil, "", false, errorf(http.StatusConflict, "job %d cannot run again: another job of kind %q with the same unique key is live", job.ID, job.Kind)
	case errors.Is(err, rivertype.ErrNotFound):
		return nil, "", false, errorf(http.StatusNotFound, "job %d not found", job.ID)
	case err != nil:
		return nil, "", false, err
	}
	return after, "", false, nil
}

// jobFinished reports whether a job is in one of River's final states.
func jobFinished(st rivertype.JobState) bool {
	return st == rivertype.JobStateCompleted || st == rivertype.JobStateCancelled || st == rivertype.JobStateDiscarded
}

func allowedText(states []rivertype.JobState) string {
	if len(states) == 0 {
		return "none"
	}
	return joinStates(states)
}

// turnRetryErr explains why the run of a turn job was not retried.
func turnRetryErr(err error, jobID int64, run *JobRun, status string) error {
	switch {
	case errors.Is(err, workflow.ErrRunBeingDeleted):
		return errorf(http.StatusConflict, "job %d is a turn of run %s (workflow %q), which is being deleted by retention: it can no longer be retried",
			jobID, run.RunID, run.Workflow)
	case errors.Is(err, workflow.ErrRunNotRetryable):
		return errorf(http.StatusConflict, "job %d is a turn of run %s (workflow %q), which is %s: a turn job is retried by retrying its run, and only a failed or cancelled run can be retried",
			jobID, run.RunID, run.Workflow, status)
	case errors.Is(err, workflow.ErrRunNotFound):
		return errorf(http.StatusConflict, "job %d is a turn of run %s, which no longer exists", jobID, run.RunID)
	}
	var tre *workflow.TurnsRunningError
	if errors.As(err, &tre) {
		return errorf(http.StatusConflict, "run %s of job %d: %d turns of its failed or cancelled tasks still run after %s; nothing changed, try again once they end",
			run.RunID, jobID, tre.Running, tre.Waited)
	}
	return err
}

// jobRunStatus reads a run's stored status for a message.
func (s *Server) jobRunStatus(ctx context.Context, runID string) string {
	var st string
	if err := s.pool.QueryRow(ctx, `SELECT status FROM braid_runs WHERE id = $1::uuid`, runID).Scan(&st); err != nil {
		return "in another state"
	}
	return st
}

func (s *Server) putJobPriority(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	var req JobPriorityRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	p, err := parsePriority(req.Priority)
	if err != nil {
		return err
	}
	job, err := s.q.SetPriority(r.Context(), id, p)
	if err := priorityErr(err, id); err != nil {
		return err
	}
	s.audit(r, "job.priority."+p.String(), id)
	d, err := s.jobDetail(r.Context(), job)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, d)
	return nil
}

func (s *Server) boostJob(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	var req JobBoostRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if req.Boost < 1 {
		return errorf(http.StatusUnprocessableEntity, "boost %d: give the number of levels to raise the priority by, 1 or more", req.Boost)
	}
	job, err := s.q.Boost(r.Context(), id, req.Boost)
	if err := priorityErr(err, id); err != nil {
		return err
	}
	s.audit(r, "job.boost."+strconv.Itoa(req.Boost), id)
	d, err := s.jobDetail(r.Context(), job)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, d)
	return nil
}

func priorityErr(err error, id int64) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, rivertype.ErrNotFound):
		return errorf(http.StatusNotFound, "job %d not found", id)
	case errors.Is(err, queue.ErrJobFinalized):
		return errorf(http.StatusConflict, "%s", strings.TrimPrefix(err.Error(), "queue: "))
	}
	return err
}

// bulkIDs checks the IDs of a bulk request: 1 to queue.IDsMax positive
// IDs, duplicates dropped, every one of an existing job. It returns the
// jobs in the order of the IDs.
func (s *Server) bulkIDs(ctx context.Context, ids []int64) ([]*rivertype.JobRow, error) {
	switch {
	case len(ids) == 0:
		return nil, errorf(http.StatusBadRequest, "job_ids is empty: give 1 to %d job IDs", queue.IDsMax)
	case len(ids) > queue.IDsMax:
		return nil, errorf(http.StatusRequestEntityTooLarge, "job_ids has %d IDs; the limit is %d per request", len(ids), queue.IDsMax)
	}
	var uniq []int64
	seen := make(map[int64]bool, len(ids))
	for _, id := range ids {
		if id < 1 {
			return nil, errorf(http.StatusBadRequest, "invalid job ID %d in job_ids: a positive integer is required", id)
		}
		if !seen[id] {
			seen[id] = true
			uniq = append(uniq, id)
		}
	}
	res, err := s.q.River().JobList(ctx, river.NewJobListParams().IDs(uniq...).First(len(uniq)))
	if err != nil {
		return nil, err
	}
	byID := make(map[int64]*rivertype.JobRow, len(res.Jobs))
	for _, j := range res.Jobs {
		byID[j.ID] = j
	}
	var missing []string
	jobs := make([]*rivertype.JobRow, 0, len(uniq))
	for _, id := range uniq {
		j, ok := byID[id]
		if !ok {
			missing = append(missing, strconv.FormatInt(id, 10))
			continue
		}
		jobs = append(jobs, j)
	}
	if len(missing) > 0 {
		shown := missing
		if len(shown) > 20 {
			shown = append(shown[:20:20], fmt.Sprintf("and %d more", len(missing)-20))
		}
		return nil, errorf(http.StatusNotFound, "job %s not found; nothing was changed", strings.Join(shown, ", "))
	}
	return jobs, nil
}

func (s *Server) bulkStatus(w http.ResponseWriter, r *http.Request) error {
	var req BulkStatusRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if req.Status == "" {
		return unprocessable(jobStateNames(), "status is required")
	}
	to, err := parseJobState("status", req.Status)
	if err != nil {
		return err
	}
	return s.bulk(w, r, "jobs.bulk_status."+string(to), req.JobIDs, to)
}

func (s *Server) bulkRetry(w http.ResponseWriter, r *http.Request) error {
	var req BulkRetryRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	return s.bulk(w, r, "jobs.bulk_retry", req.JobIDs, rivertype.JobStateAvailable)
}

// bulk moves each job to state to, one at a time, and reports each
// outcome. The run of several turn jobs is retried once.
func (s *Server) bulk(w http.ResponseWriter, r *http.Request, action string, ids []int64, to rivertype.JobState) error {
	ctx := r.Context()
	jobs, err := s.bulkIDs(ctx, ids)
	if err != nil {
		return err
	}
	runs, err := s.turnRuns(ctx, jobs)
	if err != nil {
		return err
	}
	out := BulkResponse{Results: make([]BulkResult, 0, len(jobs))}
	retriedRuns := map[string]bool{}
	var changed []any
	for _, job := range jobs {
		res := BulkResult{ID: job.ID}
		run := runs[job.ID]
		var (
			after   *rivertype.JobRow
			retried string
			err     error
		)
		if run != nil && retriedRuns[run.RunID] && to == rivertype.JobStateAvailable && jobFinished(job.State) {
			after, retried = job, run.RunID // retried with an earlier job of this request
		} else {
			after, retried, err = s.changeState(ctx, job, run, to)
		}
		var ae *apiError
		switch {
		case errors.As(err, &ae):
			res.Status, res.Error, res.Allowed = ae.body.Status, ae.body.Message, ae.body.Allowed
		case err != nil:
			ae := s.apiErr(err) // logged: a server fault
			res.Status, res.Error = ae.body.Status, ae.body.Message
		default:
			res.OK, res.State, res.RetriedRun = true, string(after.State), retried
			if retried != "" {
				retriedRuns[retried] = true
			}
			changed = append(changed, job.ID)
		}
		if res.OK {
			out.Succeeded++
		} else {
			out.Failed++
		}
		out.Results = append(out.Results, res)
	}
	var runIDs []any
	for id := range retriedRuns {
		runIDs = append(runIDs, "run:"+id)
	}
	s.audit(r, action, append(changed, runIDs...)...)
	writeJSON(w, http.StatusOK, out)
	return nil
}
