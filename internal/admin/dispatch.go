package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/scheduler"
	"github.com/braidflow/braid/workflow"
)

// Dispatch: enqueue a job of a given kind with JSON args and
// insert options, or start a run of a named workflow with JSON input and an
// idempotency key.
//
// The server works no jobs and registers no workflow, so it cannot know
// from code which kinds and workflows exist. It checks names against what
// the database has seen: the kinds of jobs in river_job, of job schedules
// and of recurring jobs; the workflows of runs and of workflow schedules.
// An unknown name is refused with 422 listing the known ones, since a
// misspelt kind would sit in its queue for ever; "force": true skips the
// check, to dispatch what is deployed but has never run.

// DispatchJobRequest is the body of POST /api/admin/dispatch/job.
type DispatchJobRequest struct {
	// Kind is the job's kind, as its worker's args name it.
	Kind string `json:"kind"`
	// Args are the job's args, a JSON object; {} when absent.
	Args json.RawMessage `json:"args,omitempty"`
	// Queue defaults to "default".
	Queue string `json:"queue,omitempty"`
	// Priority: critical, high, normal, low, River's 1 to 4, or the classic
	// 0-100 scale. Defaults to normal.
	Priority json.RawMessage `json:"priority,omitempty"`
	// MaxAttempts defaults to the queue's (25, River's).
	MaxAttempts int `json:"max_attempts,omitempty"`
	// ScheduledAt runs the job at this time rather than now.
	ScheduledAt *time.Time `json:"scheduled_at,omitempty"`
	// Tags are River's job tags.
	Tags []string `json:"tags,omitempty"`
	// IdempotencyKey returns the existing job of this kind inserted with
	// the same key, instead of inserting another. UniqueKey is another
	// name for it.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	UniqueKey      string `json:"unique_key,omitempty"`
	// Force skips the check that the database has seen the kind.
	Force bool `json:"force,omitempty"`
}

// DispatchJobResponse answers POST /api/admin/dispatch/job: the job, and
// whether it existed already (same idempotency key).
type DispatchJobResponse struct {
	Job      JobInfo `json:"job"`
	Existing bool    `json:"existing"`
}

// DispatchRunRequest is the body of POST /api/admin/dispatch/run.
type DispatchRunRequest struct {
	Workflow string `json:"workflow"`
	// Input is the run's input, any JSON value; null when absent.
	Input json.RawMessage `json:"input,omitempty"`
	// IdempotencyKey returns the existing run started with the same key.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// Queue and Priority override the turn options the workflow's earlier
	// runs had.
	Queue    string          `json:"queue,omitempty"`
	Priority json.RawMessage `json:"priority,omitempty"`
	// Force skips the check that the database has seen the workflow.
	Force bool `json:"force,omitempty"`
}

// DispatchRunResponse answers POST /api/admin/dispatch/run.
type DispatchRunResponse struct {
	Run workflow.StartedRun `json:"run"`
}

// KnownNames is GET /api/admin/dispatch/known: the job kinds and the
// workflows the database has seen, which dispatch accepts without force.
type KnownNames struct {
	Kinds     []string `json:"kinds"`
	Workflows []string `json:"workflows"`
}

// River's rule for tags, checked here to answer 400 with the offending
// value.
var dispatchTagRE = regexp.MustCompile(`\A[\w][\w\-]+[\w]\z`)

const (
	dispatchNameMax = 200
	// knownShown bounds the names listed in a 422.
	knownShown = 100
)

func (s *Server) routeDispatch() {
	s.add(&route{
		Method: "GET", Path: "/api/admin/dispatch/known", Tag: "dispatch",
		Summary:  "The job kinds (of jobs, job schedules and recurring jobs) and workflows (of runs and workflow schedules) the database has seen: what dispatch accepts without force",
		Response: KnownNames{},
		Handle: func(w http.ResponseWriter, r *http.Request) error {
			kinds, err := s.knownKinds(r.Context())
			if err != nil {
				return err
			}
			wfs, err := s.knownWorkflows(r.Context())
			if err != nil {
				return err
			}
			writeJSON(w, http.StatusOK, KnownNames{Kinds: kinds, Workflows: wfs})
			return nil
		},
	})
	s.add(&route{
		Method: "POST", Path: "/api/admin/dispatch/job", Tag: "dispatch", Mutates: true, Status: http.StatusCreated,
		Also:    map[int]string{http.StatusOK: "a live job of the kind already holds the idempotency key: that job, with existing true"},
		Summary: "Enqueue a job of a kind with JSON args and insert options (queue, priority, max_attempts, scheduled_at, tags, idempotency_key); an unknown kind is 422 listing the known ones unless force is true; a repeated idempotency key answers 200 with the existing job",
		Body:    DispatchJobRequest{}, Response: DispatchJobResponse{},
		Handle: s.dispatchJob,
	})
	s.add(&route{
		Method: "POST", Path: "/api/admin/dispatch/run", Tag: "dispatch", Mutates: true, Status: http.StatusCreated,
		Also: map[int]string{
			http.StatusOK:       "a run of the workflow already holds the idempotency key: that run, with existing true",
			http.StatusConflict: "a run of another workflow holds the idempotency key",
		},
		Summary: "Start a run of a named workflow with JSON input and an idempotency key; its turns take the queue, priority and max attempts of the workflow's earlier runs; an unknown workflow is 422 listing the known ones unless force is true; a repeated idempotency key answers 200 with the existing run",
		Body:    DispatchRunRequest{}, Response: DispatchRunResponse{},
		Handle: s.dispatchRun,
	})
}

// knownKinds lists the job kinds the database has seen, turn jobs aside.
// The kinds of river_job are read with a loose index scan of its kind
// index, one probe per kind, however many jobs there are.
func (s *Server) knownKinds(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `
		WITH RECURSIVE k(kind) AS (
		    (SELECT kind FROM river_job ORDER BY kind LIMIT 1)
		    UNION ALL
		    SELECT (SELECT j.kind FROM river_job j WHERE j.kind > k.kind ORDER BY j.kind LIMIT 1) FROM k WHERE k.kind IS NOT NULL
		)
		SELECT kind FROM k WHERE kind IS NOT NULL AND kind <> $1
		UNION SELECT target FROM braid_schedules WHERE target_type = 'job'
		UNION SELECT kind FROM braid_recurring
		ORDER BY 1`, workflow.TaskKind)
	if err != nil {
		return nil, fmt.Errorf("listing known job kinds: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("listing known job kinds: %w", err)
	}
	if out == nil {
		out = []string{}
	}
	return out, nil
}

// knownWorkflows lists the workflows the database has seen, with a loose
// index scan of braid_runs' workflow index.
func (s *Server) knownWorkflows(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `
		WITH RECURSIVE w(name) AS (
		    (SELECT workflow FROM braid_runs ORDER BY workflow LIMIT 1)
		    UNION ALL
		    SELECT (SELECT r.workflow FROM braid_runs r WHERE r.workflow > w.name ORDER BY r.workflow LIMIT 1) FROM w WHERE w.name IS NOT NULL
		)
		SELECT name FROM w WHERE name IS NOT NULL
		UNION SELECT target FROM braid_schedules WHERE target_type = 'workflow'
		ORDER BY 1`)
	if err != nil {
		return nil, fmt.Errorf("listing known workflows: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("listing known workflows: %w", err)
	}
	if out == nil {
		out = []string{}
	}
	return out, nil
}

// unknownName is the 422 of a kind or workflow the database has not seen.
func unknownName(what, name string, known []string) error {
	shown := known
	more := ""
	if len(shown) > knownShown {
		shown = shown[:knownShown]
		more = fmt.Sprintf(" and %d more", len(known)-knownShown)
	}
	list := "none yet"
	if len(shown) > 0 {
		list = strings.Join(shown, ", ") + more
	}
	return unprocessable(shown, "unknown %s %q: the database has seen no %s of that name (known: %s); check the spelling, or set \"force\": true to dispatch it anyway",
		what, clip(name), what, list)
}

// checkName checks a kind or workflow name.
func checkName(what, name string) error {
	switch {
	case strings.TrimSpace(name) == "":
		return errorf(http.StatusBadRequest, "%s is required", what)
	case len(name) > dispatchNameMax:
		return errorf(http.StatusBadRequest, "%s is %d bytes; the limit is %d", what, len(name), dispatchNameMax)
	case !utf8.ValidString(name) || strings.ContainsRune(name, 0):
		return errorf(http.StatusBadRequest, "%s must be valid UTF-8 text without NUL characters", what)
	}
	return nil
}

// rawJobArgs inserts a job of any kind with args given as JSON: River
// encodes args with json.Marshal, which takes MarshalJSON's output as is.
type rawJobArgs struct {
	kind string
	args json.RawMessage
}

func (a rawJobArgs) Kind() string                 { return a.kind }
func (a rawJobArgs) MarshalJSON() ([]byte, error) { return a.args, nil }

func (s *Server) dispatchJob(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	var req DispatchJobRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if err := checkName("kind", req.Kind); err != nil {
		return err
	}
	if n := utf8.RuneCountInString(req.Kind); n > scheduler.KindMaxLength {
		return errorf(http.StatusBadRequest, "kind is %d characters; River's limit for a job kind is %d", n, scheduler.KindMaxLength)
	}
	if req.Kind == workflow.TaskKind {
		return errorf(http.StatusUnprocessableEntity, "kind %q is a workflow turn, which the engine inserts itself; start a run with POST /api/admin/dispatch/run", req.Kind)
	}
	args := json.RawMessage(strings.TrimSpace(string(req.Args)))
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	if args[0] != '{' {
		return errorf(http.StatusBadRequest, "args must be a JSON object, not %s", clip(string(args)))
	}
	if err := queue.CheckJSONB(args); err != nil {
		return errorf(http.StatusBadRequest, "args cannot be stored: %s", err)
	}
	opts := &queue.InsertOpts{InsertOpts: river.InsertOpts{Queue: req.Queue, MaxAttempts: req.MaxAttempts, Tags: req.Tags}}
	if req.Queue != "" {
		if err := queue.ValidateQueueName(req.Queue); err != nil {
			return errorf(http.StatusBadRequest, "%s", err)
		}
	}
	if req.MaxAttempts < 0 || req.MaxAttempts > queue.MaxAttemptsMax {
		return errorf(http.StatusBadRequest, "max_attempts %d is outside 1-%d: leave it out for the default", req.MaxAttempts, queue.MaxAttemptsMax)
	}
	for _, tag := range req.Tags {
		if len(tag) > 255 || !dispatchTagRE.MatchString(tag) {
			return errorf(http.StatusBadRequest, "invalid tag %q: River's tags are 3 to 255 letters, digits, underscores and hyphens, starting and ending with a letter, digit or underscore", clip(tag))
		}
	}
	if len(req.Priority) > 0 && string(req.Priority) != "null" {
		p, err := parsePriority(req.Priority)
		if err != nil {
			return err
		}
		opts.Priority = int(p)
	}
	if req.ScheduledAt != nil {
		opts.ScheduledAt = *req.ScheduledAt
	}
	key := req.IdempotencyKey
	if req.UniqueKey != "" {
		if key != "" && key != req.UniqueKey {
			return errorf(http.StatusBadRequest, "idempotency_key and unique_key name the same key and differ: give one of them")
		}
		key = req.UniqueKey
	}
	if n := utf8.RuneCountInString(key); n > queue.IdempotencyKeyMaxLength {
		return errorf(http.StatusBadRequest, "idempotency key is %d characters; the limit is %d", n, queue.IdempotencyKeyMaxLength)
	}
	if strings.ContainsRune(key, 0) {
		return errorf(http.StatusBadRequest, "idempotency key %q holds a NUL character", key)
	}
	opts.IdempotencyKey = key
	if !req.Force {
		known, err := s.knownKinds(ctx)
		if err != nil {
			return err
		}
		if !slices.Contains(known, req.Kind) {
			return unknownName("job kind", req.Kind, known)
		}
	}
	q := s.q
	if !q.KnowsKind(req.Kind) {
		// The server's queue works turns (or the jobs of the process that
		// serves the API), and River refuses to insert a kind it has no
		// worker for. An insert-only queue on the same pool inserts any
		// kind, for the processes that work it.
		q = s.insertQ
	}
	res, err := q.Insert(ctx, rawJobArgs{kind: req.Kind, args: args}, opts)
	if err != nil {
		return err
	}
	status := http.StatusCreated
	if res.UniqueSkippedAsDuplicate {
		status = http.StatusOK
	}
	s.audit(r, "dispatch.job", res.Job.ID, "kind:"+req.Kind)
	runs, err := s.turnRuns(ctx, []*rivertype.JobRow{res.Job})
	if err != nil {
		return err
	}
	writeJSON(w, status, DispatchJobResponse{Job: jobInfo(res.Job, runs[res.Job.ID], nil), Existing: res.UniqueSkippedAsDuplicate})
	return nil
}

func (s *Server) dispatchRun(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	var req DispatchRunRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if err := checkName("workflow", req.Workflow); err != nil {
		return err
	}
	if len(req.IdempotencyKey) > 500 {
		return errorf(http.StatusBadRequest, "idempotency_key is %d bytes; the limit is 500", len(req.IdempotencyKey))
	}
	if strings.ContainsRune(req.IdempotencyKey, 0) {
		return errorf(http.StatusBadRequest, "idempotency_key %q holds a NUL character", req.IdempotencyKey)
	}
	if req.Queue != "" {
		if err := queue.ValidateQueueName(req.Queue); err != nil {
			return errorf(http.StatusBadRequest, "%s", err)
		}
	}
	opts := &workflow.StartByNameOpts{IdempotencyKey: req.IdempotencyKey, Queue: req.Queue, Force: req.Force}
	if len(req.Priority) > 0 && string(req.Priority) != "null" {
		p, err := parsePriority(req.Priority)
		if err != nil {
			return err
		}
		opts.Priority = p
	}
	if !req.Force && !s.eng.KnowsWorkflow(req.Workflow) {
		known, err := s.knownWorkflows(ctx)
		if err != nil {
			return err
		}
		if !slices.Contains(known, req.Workflow) {
			return unknownName("workflow", req.Workflow, known)
		}
		// Seen (a schedule names it, if no run did): start it with the
		// defaults when no run gives turn options.
		opts.Force = true
	}
	run, err := s.eng.StartByName(ctx, req.Workflow, req.Input, opts)
	if err != nil {
		var (
			ee *workflow.EncodeError
			pe *workflow.PayloadTooLargeError
		)
		switch {
		case errors.As(err, &pe):
			return errorf(http.StatusRequestEntityTooLarge, "%s", strings.TrimPrefix(err.Error(), "workflow: "))
		case errors.As(err, &ee):
			return errorf(http.StatusBadRequest, "%s", strings.TrimPrefix(err.Error(), "workflow: "))
		case errors.Is(err, workflow.ErrIdempotencyConflict):
			return errorf(http.StatusConflict, "%s", strings.TrimPrefix(err.Error(), "workflow: "))
		case errors.Is(err, workflow.ErrUnknownWorkflow):
			return errorf(http.StatusUnprocessableEntity, "%s", strings.TrimPrefix(err.Error(), "workflow: "))
		}
		return err
	}
	status := http.StatusCreated
	if run.Existing {
		status = http.StatusOK
	}
	s.audit(r, "dispatch.run", run.ID, "workflow:"+req.Workflow)
	writeJSON(w, status, DispatchRunResponse{Run: *run})
	return nil
}
