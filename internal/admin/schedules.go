package admin

import (
	"bytes"
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

	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/scheduler"
	"github.com/braidflow/braid/workflow"
)

// Scheduled jobs are the classic job-queue admin API's routes over braid's durable cron schedules
// (scheduler.Schedule). A schedule is identified by its name: {id} in the
// paths is the name, URL-escaped. A numeric {id} that names no schedule is
// taken as the schedule's numeric ID, so clients that keep the id of the
// list keep working; a schedule named like a number wins over an ID.

// ScheduledJob is a schedule as the API shows it: the classic job-queue admin API's fields (name,
// description, cron_expression, enabled, priority, next_run_at,
// last_run_at) and braid's own: the target (a job kind with its args, or a
// workflow with its input), the time zone, the queue, the overlap and
// catch-up policies, and the outcome of the last fire.
type ScheduledJob struct {
	ID          int64  `json:"id"`
	Name        string `json:"name"`
	Description string `json:"description"`
	// CronExpression is when the schedule fires: @hourly, @daily, @weekly,
	// @monthly, @yearly, @every <duration> (units ns to d), or 5-field
	// cron, evaluated in TimeZone.
	CronExpression string `json:"cron_expression"`
	TimeZone       string `json:"time_zone"`
	Enabled        bool   `json:"enabled"`
	// Priority is the River priority of the schedule's jobs: 1 (critical,
	// worked first) to 4 (low).
	Priority int `json:"priority"`
	// TargetType is "job" (Kind and Args) or "workflow" (Workflow and
	// Input).
	TargetType string          `json:"target_type"`
	Kind       string          `json:"kind,omitempty"`
	Args       json.RawMessage `json:"args,omitempty"`
	Workflow   string          `json:"workflow,omitempty"`
	Input      json.RawMessage `json:"input,omitempty"`
	// Queue is the River queue of the schedule's jobs.
	Queue       string `json:"queue"`
	MaxAttempts int    `json:"max_attempts,omitempty"`
	// OverlapPolicy is "skip" or "allow"; CatchUpPolicy is "once", "skip"
	// or "all". See package scheduler.
	OverlapPolicy string `json:"overlap_policy"`
	CatchUpPolicy string `json:"catch_up_policy"`
	// NextRunAt is the next slot to fire.
	NextRunAt time.Time `json:"next_run_at"`
	// LastRunAt is when the schedule last fired; LastJobID or LastRunID is
	// what that fire inserted or started.
	LastRunAt *time.Time `json:"last_run_at"`
	LastJobID *int64     `json:"last_job_id,omitempty"`
	LastRunID string     `json:"last_run_id,omitempty"`
	// LastError is why the last attempt to fire failed, null after a
	// success. FireFailures counts the failed attempts in a row, and
	// RetryAt is when the failed slot is tried again.
	LastError    *string    `json:"last_error"`
	LastErrorAt  *time.Time `json:"last_error_at"`
	FireFailures int        `json:"fire_failures"`
	RetryAt      *time.Time `json:"retry_at,omitempty"`
	CreatedBy    string     `json:"created_by"`
	CreatedAt    time.Time  `json:"created_at"`
	UpdatedAt    time.Time  `json:"updated_at"`
}

// scheduledJobOf shows a schedule.
func scheduledJobOf(sch *scheduler.Schedule) ScheduledJob {
	j := ScheduledJob{
		ID: sch.ID, Name: sch.Name, Description: sch.Description, CronExpression: sch.Expression,
		TimeZone: sch.TimeZone, Enabled: sch.Enabled, Priority: sch.Priority, TargetType: string(sch.TargetType),
		Queue: sch.Queue, MaxAttempts: sch.MaxAttempts, OverlapPolicy: string(sch.OverlapPolicy),
		CatchUpPolicy: string(sch.CatchUpPolicy), NextRunAt: sch.NextRunAt, LastRunAt: sch.LastRunAt,
		LastJobID: sch.LastJobID, LastRunID: sch.LastRunID, LastErrorAt: sch.LastErrorAt,
		FireFailures: sch.FireFailures, RetryAt: sch.RetryAt, CreatedBy: sch.CreatedBy,
		CreatedAt: sch.CreatedAt, UpdatedAt: sch.UpdatedAt,
	}
	if sch.LastError != "" {
		e := sch.LastError
		j.LastError = &e
	}
	if sch.TargetType == scheduler.TargetWorkflow {
		j.Workflow, j.Input = sch.Target, sch.Args
	} else {
		j.Kind, j.Args = sch.Target, sch.Args
	}
	return j
}

// ScheduledJobRequest is the body of POST /api/admin/scheduled-jobs and PUT
// /api/admin/scheduled-jobs/{id}: the classic job-queue admin API's fields and braid's. A create
// needs name, cron_expression, and either kind (with optional args, a JSON
// object) or workflow (with optional input, any JSON). An update changes
// only the fields it gives; its name, when given, must be the schedule's
// own, since a schedule cannot be renamed.
type ScheduledJobRequest struct {
	Name           *string         `json:"name,omitempty"`
	Description    *string         `json:"description,omitempty"`
	CronExpression *string         `json:"cron_expression,omitempty"`
	TimeZone       *string         `json:"time_zone,omitempty"`
	Enabled        *bool           `json:"enabled,omitempty"`
	Priority       *int            `json:"priority,omitempty"`
	Kind           *string         `json:"kind,omitempty"`
	Args           json.RawMessage `json:"args,omitempty"`
	Workflow       *string         `json:"workflow,omitempty"`
	Input          json.RawMessage `json:"input,omitempty"`
	Queue          *string         `json:"queue,omitempty"`
	MaxAttempts    *int            `json:"max_attempts,omitempty"`
	OverlapPolicy  *string         `json:"overlap_policy,omitempty"`
	CatchUpPolicy  *string         `json:"catch_up_policy,omitempty"`
}

// ToggleRequest is the body of POST /api/admin/scheduled-jobs/{id}/toggle.
type ToggleRequest struct {
	Enabled *bool `json:"enabled" required:"true"`
}

// ScheduleFire is the answer of POST /api/admin/scheduled-jobs/{id}/run:
// the schedule after the fire, the moment of the fire on the database
// clock, and the job inserted or the run started.
type ScheduleFire struct {
	Schedule ScheduledJob `json:"schedule"`
	FiredAt  time.Time    `json:"fired_at"`
	JobID    *int64       `json:"job_id,omitempty"`
	RunID    string       `json:"run_id,omitempty"`
}

// DeletedSchedule is the answer of DELETE /api/admin/scheduled-jobs/{id}.
type DeletedSchedule struct {
	ID      int64  `json:"id"`
	Name    string `json:"name"`
	Deleted bool   `json:"deleted"`
}

var (
	schedPriorities    = []string{"1", "2", "3", "4"}
	schedOverlaps      = []string{string(scheduler.OverlapSkip), string(scheduler.OverlapAllow)}
	schedCatchUps      = []string{string(scheduler.CatchUpOnce), string(scheduler.CatchUpSkip), string(scheduler.CatchUpAll)}
	schedScheduleParam = "the schedule's name (URL-escaped), or its numeric id"
)

func (s *Server) routeSchedules() {
	const base = "/api/admin/scheduled-jobs"
	sw := s.sched
	s.add(&route{
		Method: "GET", Path: base, Tag: "schedules",
		Summary:  "List scheduled jobs (cron schedules) in name order",
		Query:    append([]Param{{Name: "enabled", Type: "boolean", Description: "only enabled (true) or disabled (false) schedules"}}, pagingParams...),
		Response: List[ScheduledJob]{},
		Handle:   s.listSchedules,
	})
	s.add(&route{
		Method: "POST", Path: base, Tag: "schedules", Mutates: true,
		Also:    map[int]string{http.StatusConflict: "a schedule of that name exists"},
		Summary: "Create a scheduled job: a cron schedule that inserts a job or starts a workflow run",
		Body:    ScheduledJobRequest{}, Response: ScheduledJob{}, Status: http.StatusCreated,
		Handle: func(w http.ResponseWriter, r *http.Request) error { return s.createSchedule(w, r, sw) },
	})
	s.add(&route{
		Method: "GET", Path: base + "/{id}", Tag: "schedules",
		Summary:  "A scheduled job, with its next and last run and the error of its last failed fire; {id} is " + schedScheduleParam,
		Response: ScheduledJob{},
		Handle: func(w http.ResponseWriter, r *http.Request) error {
			sch, err := s.scheduleOf(r)
			if err != nil {
				return err
			}
			writeJSON(w, http.StatusOK, scheduledJobOf(sch))
			return nil
		},
	})
	s.add(&route{
		Method: "PUT", Path: base + "/{id}", Tag: "schedules", Mutates: true,
		Summary: "Update a scheduled job: only the fields given change; a new expression or time zone moves next_run_at to its first slot after now",
		Body:    ScheduledJobRequest{}, Response: ScheduledJob{},
		Handle: func(w http.ResponseWriter, r *http.Request) error { return s.updateSchedule(w, r, sw) },
	})
	s.add(&route{
		Method: "DELETE", Path: base + "/{id}", Tag: "schedules", Mutates: true,
		Summary:  "Delete a scheduled job; the jobs and runs it fired are kept",
		Response: DeletedSchedule{},
		Handle: func(w http.ResponseWriter, r *http.Request) error {
			sch, err := s.scheduleOf(r)
			if err != nil {
				return err
			}
			if err := sw.Delete(r.Context(), sch.Name); err != nil {
				return schedErr(err)
			}
			s.audit(r, "schedule.delete", sch.Name, sch.ID)
			writeJSON(w, http.StatusOK, DeletedSchedule{ID: sch.ID, Name: sch.Name, Deleted: true})
			return nil
		},
	})
	s.add(&route{
		Method: "POST", Path: base + "/{id}/toggle", Tag: "schedules", Mutates: true,
		Summary: "Enable or disable a scheduled job; enabled again, it resumes at its next slot after now",
		Body:    ToggleRequest{}, Response: ScheduledJob{},
		Handle: func(w http.ResponseWriter, r *http.Request) error {
			var body ToggleRequest
			if err := decode(r, &body); err != nil {
				return err
			}
			if body.Enabled == nil {
				return errorf(http.StatusUnprocessableEntity, `field "enabled" is required: true or false`)
			}
			sch, err := s.scheduleOf(r)
			if err != nil {
				return err
			}
			updated, err := sw.Toggle(r.Context(), sch.Name, *body.Enabled)
			if err != nil {
				return schedErr(err)
			}
			s.audit(r, "schedule.toggle", sch.Name, sch.ID, fmt.Sprintf("enabled=%t", *body.Enabled))
			writeJSON(w, http.StatusOK, scheduledJobOf(updated))
			return nil
		},
	})
	s.add(&route{
		Method: "POST", Path: base + "/{id}/run", Tag: "schedules", Mutates: true,
		Also:     map[int]string{http.StatusConflict: "this server's scheduler cannot fire the schedule's target"},
		Summary:  "Run a scheduled job now: insert its job or start its run once, in one transaction, without moving next_run_at",
		Response: ScheduleFire{},
		Handle: func(w http.ResponseWriter, r *http.Request) error {
			sch, err := s.scheduleOf(r)
			if err != nil {
				return err
			}
			f, err := sw.RunNow(r.Context(), sch.Name)
			if err != nil {
				return schedErr(err)
			}
			out := ScheduleFire{Schedule: scheduledJobOf(f.Schedule), FiredAt: f.At, JobID: f.JobID, RunID: f.RunID}
			ids := []any{sch.Name, sch.ID}
			if f.JobID != nil {
				ids = append(ids, "job="+strconv.FormatInt(*f.JobID, 10))
			}
			if f.RunID != "" {
				ids = append(ids, "run="+f.RunID)
			}
			s.audit(r, "schedule.run_now", ids...)
			writeJSON(w, http.StatusOK, out)
			return nil
		},
	})
}

// schedBoolParam reads an optional boolean query parameter.
func schedBoolParam(r *http.Request, name string) (*bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return nil, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return nil, unprocessable([]string{"true", "false"}, "invalid %s %q: use true or false", name, v)
	}
	return &b, nil
}

func (s *Server) listSchedules(w http.ResponseWriter, r *http.Request) error {
	page, err := paging(r)
	if err != nil {
		return err
	}
	enabled, err := schedBoolParam(r, "enabled")
	if err != nil {
		return err
	}
	list, err := s.sched.List(r.Context(), &scheduler.ScheduleListParams{Enabled: enabled, Limit: page.Limit, Offset: page.Offset})
	if err != nil {
		return err
	}
	var total int64
	if err := s.pool.QueryRow(r.Context(), `SELECT count(*) FROM braid_schedules WHERE $1::boolean IS NULL OR enabled = $1`, enabled).Scan(&total); err != nil {
		return fmt.Errorf("counting schedules: %w", err)
	}
	items := make([]ScheduledJob, len(list))
	for i, sch := range list {
		items[i] = scheduledJobOf(sch)
	}
	out := newList(items, page)
	out.Total = &total
	writeJSON(w, http.StatusOK, out)
	return nil
}

// scheduleOf returns the schedule that the path's {id} names: by name, or
// by numeric ID when no schedule has that name.
func (s *Server) scheduleOf(r *http.Request) (*scheduler.Schedule, error) {
	ref := r.PathValue("id")
	if !utf8.ValidString(ref) || strings.ContainsRune(ref, 0) {
		return nil, errorf(http.StatusBadRequest, "invalid scheduled job %q: a name is UTF-8 text without NUL", ref)
	}
	sch, err := s.sched.Get(r.Context(), ref)
	if err == nil || !errors.Is(err, scheduler.ErrScheduleNotFound) {
		return sch, schedErr(err)
	}
	if id, perr := strconv.ParseInt(ref, 10, 64); perr == nil && id > 0 {
		var name string
		err := s.pool.QueryRow(r.Context(), `SELECT name FROM braid_schedules WHERE id = $1`, id).Scan(&name)
		switch {
		case err == nil:
			sch, err := s.sched.Get(r.Context(), name)
			return sch, schedErr(err)
		case !errors.Is(err, pgx.ErrNoRows):
			return nil, fmt.Errorf("finding schedule %d: %w", id, err)
		}
	}
	return nil, errorf(http.StatusNotFound, "scheduled job %q not found: no schedule has that name or id", ref)
}

// schedErr maps the scheduler's errors to API errors.
func schedErr(err error) error {
	if err == nil {
		return nil
	}
	var ee *scheduler.ExpressionError
	var ut *scheduler.UnknownTargetError
	var at *scheduler.ArgsTooLargeError
	switch {
	case errors.As(err, &ee):
		return errorf(http.StatusUnprocessableEntity, "cron_expression %q is invalid: %s", ee.Expression, ee.Reason)
	case errors.As(err, &ut):
		return errorf(http.StatusUnprocessableEntity, "%s", strings.TrimPrefix(ut.Error(), "scheduler: "))
	case errors.As(err, &at):
		return errorf(http.StatusUnprocessableEntity, "%s", strings.TrimPrefix(at.Error(), "scheduler: "))
	case errors.Is(err, scheduler.ErrScheduleNotFound):
		return errorf(http.StatusNotFound, "%s", strings.TrimPrefix(err.Error(), "scheduler: "))
	case errors.Is(err, scheduler.ErrScheduleExists):
		return errorf(http.StatusConflict, "%s; pick another name or update that one", strings.TrimPrefix(err.Error(), "scheduler: "))
	case errors.Is(err, scheduler.ErrCannotFire):
		return errorf(http.StatusConflict, "%s", strings.TrimPrefix(err.Error(), "scheduler: "))
	case errors.Is(err, workflow.ErrUnknownWorkflow):
		return errorf(http.StatusUnprocessableEntity, "%s", strings.TrimPrefix(err.Error(), "scheduler: "))
	case errors.Is(err, scheduler.ErrInvalidSchedule):
		// A rule of the scheduler's that the request's own checks do not
		// repeat: still the requester's mistake, named as the scheduler
		// names it.
		return errorf(http.StatusUnprocessableEntity, "%s", strings.TrimPrefix(err.Error(), "scheduler: "))
	}
	return err
}

// schedTarget is the target of a request: which of kind or workflow it
// gives, and its args or input.
type schedTarget struct {
	typ    scheduler.TargetType
	target string
	args   json.RawMessage // nil when not given
}

// checkScheduleRequest validates the fields a request gives, each against
// the scheduler's rules, so that bad input gets a 422 that names the field
// and changes nothing. It returns the target the request sets, if any.
func checkScheduleRequest(req *ScheduledJobRequest) (*schedTarget, error) {
	bad := func(format string, args ...any) (*schedTarget, error) {
		return nil, errorf(http.StatusUnprocessableEntity, format, args...)
	}
	texts := []struct {
		field string
		v     *string
	}{{"name", req.Name}, {"description", req.Description}, {"kind", req.Kind}, {"workflow", req.Workflow}, {"time_zone", req.TimeZone}, {"cron_expression", req.CronExpression}}
	for _, t := range texts {
		if t.v != nil && strings.ContainsRune(*t.v, 0) {
			return bad(`field %q holds a NUL character, which PostgreSQL cannot store`, t.field)
		}
	}
	if req.Name != nil {
		n := *req.Name
		switch {
		case strings.TrimSpace(n) == "":
			return bad(`field "name" is empty: give 1 to %d characters`, scheduler.NameMaxLength)
		case !utf8.ValidString(n):
			return bad(`field "name" is not valid UTF-8`)
		case utf8.RuneCountInString(n) > scheduler.NameMaxLength:
			return bad(`field "name" is %d characters; the limit is %d`, utf8.RuneCountInString(n), scheduler.NameMaxLength)
		}
	}
	if req.Description != nil {
		if n := utf8.RuneCountInString(*req.Description); n > scheduler.DescriptionMaxLength {
			return bad(`field "description" is %d characters; the limit is %d`, n, scheduler.DescriptionMaxLength)
		}
	}
	if req.TimeZone != nil && *req.TimeZone != "" {
		if _, err := scheduler.Parse("@daily", *req.TimeZone); err != nil {
			var ee *scheduler.ExpressionError
			if errors.As(err, &ee) {
				return bad(`time_zone %q is invalid: %s`, *req.TimeZone, ee.Reason)
			}
			return nil, err
		}
	}
	if req.CronExpression != nil {
		tz := ""
		if req.TimeZone != nil {
			tz = *req.TimeZone
		}
		if _, err := scheduler.Parse(*req.CronExpression, tz); err != nil {
			return nil, schedErr(err)
		}
	}
	if req.Priority != nil && (*req.Priority < 1 || *req.Priority > 4) {
		return nil, unprocessable(schedPriorities, "priority %d is out of range: use River's priority, 1 (critical, worked first) to 4 (low)", *req.Priority)
	}
	if req.Queue != nil {
		if err := queue.ValidateQueueName(*req.Queue); err != nil {
			return bad("%s", err)
		}
	}
	if req.MaxAttempts != nil && (*req.MaxAttempts < 0 || *req.MaxAttempts > queue.MaxAttemptsMax) {
		return bad(`max_attempts %d is outside 0-%d: give 0 for the default`, *req.MaxAttempts, queue.MaxAttemptsMax)
	}
	if req.OverlapPolicy != nil && !slices.Contains(schedOverlaps, *req.OverlapPolicy) {
		return nil, unprocessable(schedOverlaps, "overlap_policy %q is invalid", *req.OverlapPolicy)
	}
	if req.CatchUpPolicy != nil && !slices.Contains(schedCatchUps, *req.CatchUpPolicy) {
		return nil, unprocessable(schedCatchUps, "catch_up_policy %q is invalid", *req.CatchUpPolicy)
	}
	args, input := schedNullAsAbsent(req.Args), schedNullAsAbsent(req.Input)
	switch {
	case req.Kind != nil && req.Workflow != nil:
		return bad(`give either "kind" (a job kind) or "workflow" (a workflow name), not both`)
	case req.Kind != nil && input != nil:
		return bad(`field "input" goes with "workflow"; a job kind takes "args"`)
	case req.Workflow != nil && args != nil:
		return bad(`field "args" goes with "kind"; a workflow takes "input"`)
	case args != nil && input != nil:
		return bad(`give either "args" (of a job) or "input" (of a workflow), not both`)
	}
	for _, f := range []struct {
		name string
		raw  json.RawMessage
	}{{"args", args}, {"input", input}} {
		if f.raw == nil {
			continue
		}
		if err := queue.CheckJSONB(f.raw); err != nil {
			return bad("field %q cannot be stored: %s", f.name, err)
		}
	}
	if args != nil && !schedIsObject(args) {
		return bad(`field "args" must be a JSON object, such as {"feed_id": 42}`)
	}
	t := &schedTarget{}
	switch {
	case req.Kind != nil:
		t.typ, t.target, t.args = scheduler.TargetJob, *req.Kind, args
	case req.Workflow != nil:
		t.typ, t.target, t.args = scheduler.TargetWorkflow, *req.Workflow, input
	default:
		if args != nil {
			t.typ, t.args = scheduler.TargetJob, args
		} else if input != nil {
			t.typ, t.args = scheduler.TargetWorkflow, input
		} else {
			return nil, nil
		}
		return t, nil
	}
	field := "kind"
	if t.typ == scheduler.TargetWorkflow {
		field = "workflow"
	}
	if strings.TrimSpace(t.target) == "" || utf8.RuneCountInString(t.target) > scheduler.TargetMaxLength {
		return bad(`field %q must be 1 to %d characters`, field, scheduler.TargetMaxLength)
	}
	if n := utf8.RuneCountInString(t.target); t.typ == scheduler.TargetJob && n > scheduler.KindMaxLength {
		return bad(`field "kind" is %d characters; River's limit for a job kind is %d`, n, scheduler.KindMaxLength)
	}
	return t, nil
}

// schedNullAsAbsent treats a JSON null as a field not given.
func schedNullAsAbsent(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil
	}
	return raw
}

func schedIsObject(raw json.RawMessage) bool {
	b := bytes.TrimSpace(raw)
	return len(b) > 0 && b[0] == '{'
}

func (s *Server) createSchedule(w http.ResponseWriter, r *http.Request, sw *scheduler.Scheduler) error {
	var req ScheduledJobRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	switch {
	case req.Name == nil:
		return errorf(http.StatusUnprocessableEntity, `field "name" is required`)
	case req.CronExpression == nil:
		return errorf(http.StatusUnprocessableEntity, `field "cron_expression" is required, such as "@daily", "@every 30m" or "0 3 * * *"`)
	case req.Kind == nil && req.Workflow == nil:
		return errorf(http.StatusUnprocessableEntity, `a target is required: give "kind" (a job kind, with "args") or "workflow" (a workflow name, with "input")`)
	}
	t, err := checkScheduleRequest(&req)
	if err != nil {
		return err
	}
	p := &scheduler.ScheduleParams{
		Name: *req.Name, Expression: *req.CronExpression, TargetType: t.typ, Target: t.target,
		CreatedBy: tokenName(r.Context()),
	}
	if t.args != nil {
		p.Args = t.args
	}
	if req.Description != nil {
		p.Description = *req.Description
	}
	if req.TimeZone != nil {
		p.TimeZone = *req.TimeZone
	}
	if req.Enabled != nil {
		p.Disabled = !*req.Enabled
	}
	if req.Priority != nil {
		p.Priority = *req.Priority
	}
	if req.Queue != nil {
		p.Queue = *req.Queue
	}
	if req.MaxAttempts != nil {
		p.MaxAttempts = *req.MaxAttempts
	}
	if req.OverlapPolicy != nil {
		p.OverlapPolicy = scheduler.OverlapPolicy(*req.OverlapPolicy)
	}
	if req.CatchUpPolicy != nil {
		p.CatchUpPolicy = scheduler.CatchUpPolicy(*req.CatchUpPolicy)
	}
	sch, err := sw.Create(r.Context(), p)
	if err != nil {
		return schedErr(err)
	}
	s.audit(r, "schedule.create", sch.Name, sch.ID)
	writeJSON(w, http.StatusCreated, scheduledJobOf(sch))
	return nil
}

func (s *Server) updateSchedule(w http.ResponseWriter, r *http.Request, sw *scheduler.Scheduler) error {
	var req ScheduledJobRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	t, err := checkScheduleRequest(&req)
	if err != nil {
		return err
	}
	sch, err := s.scheduleOf(r)
	if err != nil {
		return err
	}
	if req.Name != nil && *req.Name != sch.Name {
		return errorf(http.StatusUnprocessableEntity, "a scheduled job cannot be renamed (%q to %q): create %q and delete %q instead", sch.Name, *req.Name, *req.Name, sch.Name)
	}
	u := &scheduler.ScheduleUpdate{
		Description: req.Description, Expression: req.CronExpression, TimeZone: req.TimeZone,
		Priority: req.Priority, Queue: req.Queue, MaxAttempts: req.MaxAttempts, Enabled: req.Enabled,
	}
	if req.OverlapPolicy != nil {
		o := scheduler.OverlapPolicy(*req.OverlapPolicy)
		u.OverlapPolicy = &o
	}
	if req.CatchUpPolicy != nil {
		c := scheduler.CatchUpPolicy(*req.CatchUpPolicy)
		u.CatchUpPolicy = &c
	}
	if req.CronExpression != nil && req.TimeZone == nil {
		// The new expression is checked in the schedule's own zone.
		if _, err := scheduler.Parse(*req.CronExpression, sch.TimeZone); err != nil {
			return schedErr(err)
		}
	}
	if t != nil {
		switch {
		case t.target != "":
			u.TargetType, u.Target = &t.typ, &t.target
			if t.typ == scheduler.TargetJob && t.args == nil && !schedIsObject(sch.Args) {
				return errorf(http.StatusUnprocessableEntity, `field "args" is required to change the target to job kind %q: the current input %s is not a JSON object`, t.target, sch.Args)
			}
		case t.typ != sch.TargetType:
			if t.typ == scheduler.TargetJob {
				return errorf(http.StatusUnprocessableEntity, `field "args" is for a job kind; scheduled job %q starts workflow %q, which takes "input"`, sch.Name, sch.Target)
			}
			return errorf(http.StatusUnprocessableEntity, `field "input" is for a workflow; scheduled job %q inserts job kind %q, which takes "args"`, sch.Name, sch.Target)
		}
		if t.args != nil {
			u.Args = t.args
		}
	}
	updated, err := sw.Update(r.Context(), sch.Name, u)
	if err != nil {
		return schedErr(err)
	}
	s.audit(r, "schedule.update", sch.Name, sch.ID)
	writeJSON(w, http.StatusOK, scheduledJobOf(updated))
	return nil
}

// schedulesMissed lists the enabled schedules whose next slot is older
// than grace on the database clock: the slot was not fired.
func (s *Server) schedulesMissed(ctx context.Context, grace time.Duration, limit int) ([]*scheduler.Schedule, int64, error) {
	var total int64
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM braid_schedules
WHERE enabled AND next_run_at < braid_now() - $1::bigint * interval '1 microsecond'`, grace.Microseconds()).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("finding missed schedules: %w", err)
	}
	if total == 0 {
		return nil, 0, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT name FROM braid_schedules
WHERE enabled AND next_run_at < braid_now() - $1::bigint * interval '1 microsecond'
ORDER BY next_run_at LIMIT $2`, grace.Microseconds(), limit)
	if err != nil {
		return nil, 0, fmt.Errorf("finding missed schedules: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, 0, fmt.Errorf("finding missed schedules: %w", err)
	}
	var out []*scheduler.Schedule
	for _, n := range names {
		sch, err := s.sched.Get(ctx, n)
		if errors.Is(err, scheduler.ErrScheduleNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, 0, err
		}
		out = append(out, sch)
	}
	return out, total, nil
}
