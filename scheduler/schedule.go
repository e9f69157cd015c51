package scheduler

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/braidflow/braid/leases"
	"github.com/braidflow/braid/queue"
)

// TargetType says what a schedule fires.
type TargetType string

const (
	// TargetJob inserts a River job of kind Target with Args.
	TargetJob TargetType = "job"

	// TargetWorkflow starts a run of the workflow named Target with Args as
	// its input, through Config.Workflows.
	TargetWorkflow TargetType = "workflow"
)

// OverlapPolicy says whether a slot fires while an earlier fire is
// unfinished.
type OverlapPolicy string

const (
	// OverlapSkip skips a slot while a job or run of an earlier fire of
	// the schedule is unfinished (the previous slot's, or a RunNow's): a
	// job not yet completed, cancelled or discarded, or a run not yet
	// completed, failed or cancelled. The skipped slot is not fired later.
	OverlapSkip OverlapPolicy = "skip"

	// OverlapAllow fires every slot regardless of the previous fire.
	OverlapAllow OverlapPolicy = "allow"
)

// CatchUpPolicy says what happens to slots that passed while no scheduler
// was leading, or while the leader was busy: several slots are due at once.
type CatchUpPolicy string

const (
	// CatchUpOnce fires once for all the missed slots: the fire is labelled
	// with the latest slot that passed, and the schedule resumes at the
	// slot after it.
	CatchUpOnce CatchUpPolicy = "once"

	// CatchUpSkip skips missed slots: the latest slot that passed fires
	// only if it is at most Config.MissedSlotGrace late; otherwise nothing
	// fires and the schedule waits for its next slot.
	CatchUpSkip CatchUpPolicy = "skip"

	// CatchUpAll fires every missed slot, oldest first, each as its own job
	// or run. After a long outage of a frequent schedule this makes many
	// fires; use it only where every slot matters. The overlap policy
	// still judges each slot: under OverlapSkip (the default) a missed slot
	// is skipped while the fire before it is unfinished, which the fire of
	// the slot before it, made a moment earlier, almost always is. For
	// every missed slot to fire, use CatchUpAll with OverlapAllow.
	CatchUpAll CatchUpPolicy = "all"
)

// Limits of schedules.
const (
	// NameMaxLength is the longest schedule name, in characters.
	NameMaxLength = 200

	// NameMaxBytes is the longest name, in bytes of UTF-8, of a schedule
	// that starts a workflow. The idempotency key of each slot holds the
	// name (IdempotencyKey), and a workflow run's key is at most 500 bytes
	// (the engine's limit), so a longer name could never start a run.
	NameMaxBytes = 400

	// TargetMaxLength is the longest target, in characters: a workflow
	// name. A River job kind is at most KindMaxLength, River's limit.
	TargetMaxLength = 200

	// DescriptionMaxLength is the longest description, in characters.
	DescriptionMaxLength = 2000

	// CreatedByMaxLength is the longest CreatedBy, in characters.
	CreatedByMaxLength = 200
)

var (
	// ErrScheduleNotFound is returned (wrapped) when no schedule has the
	// given name.
	ErrScheduleNotFound = errors.New("scheduler: schedule not found")

	// ErrScheduleExists is returned (wrapped) by Create when the name is
	// taken.
	ErrScheduleExists = errors.New("scheduler: schedule already exists")

	// ErrInvalidSchedule matches every error of Create and Update that
	// refuses the schedule it was given (a name, expression, target, args
	// or option out of its rules), and no other: a caller that serves
	// requests answers it as the requester's mistake.
	ErrInvalidSchedule = errors.New("scheduler: invalid schedule")

	// ErrUnknownTarget matches the *UnknownTargetError of Create and Update
	// when the scheduler knows the target does not exist. Such an error
	// matches ErrInvalidSchedule too.
	ErrUnknownTarget = errors.New("scheduler: unknown target")

	// ErrArgsTooLarge matches the *ArgsTooLargeError of Create, Update and
	// Ensure when args exceed Config.MaxArgsBytes. That of Create and
	// Update matches ErrInvalidSchedule too.
	ErrArgsTooLarge = errors.New("scheduler: args too large")
)

// UnknownTargetError is returned by Create and Update (and their Tx twins)
// for a target the scheduler knows does not exist: a workflow that
// Config.Workflows does not know (see WorkflowRegistry), or a job kind that
// no worker of Config.Queue works (see queue.Queue.KnowsKind). It matches
// ErrUnknownTarget and ErrInvalidSchedule.
type UnknownTargetError struct {
	Schedule   string
	TargetType TargetType
	Target     string
}

func (e *UnknownTargetError) Error() string {
	if e.TargetType == TargetWorkflow {
		return fmt.Sprintf("scheduler: schedule %q: workflow %q is not registered", e.Schedule, e.Target)
	}
	return fmt.Sprintf("scheduler: schedule %q: job kind %q has no worker in the scheduler's queue", e.Schedule, e.Target)
}

// Is reports whether target is ErrUnknownTarget or ErrInvalidSchedule: an
// unknown target refuses the schedule.
func (e *UnknownTargetError) Is(target error) bool {
	return target == ErrUnknownTarget || target == ErrInvalidSchedule
}

// ArgsTooLargeError is returned when the JSON args of a schedule or of a
// recurring job exceed Config.MaxArgsBytes. It names the schedule, or the
// recurring job's kind and key. It matches ErrArgsTooLarge, and, when it
// names a schedule, ErrInvalidSchedule.
type ArgsTooLargeError struct {
	// Schedule names the schedule; empty for a recurring job.
	Schedule string

	// Kind and Key name the recurring job; empty for a schedule.
	Kind, Key string

	// Size is the length of the encoded args in bytes; Limit is
	// Config.MaxArgsBytes.
	Size, Limit int
}

func (e *ArgsTooLargeError) Error() string {
	what := fmt.Sprintf("schedule %q", e.Schedule)
	if e.Schedule == "" {
		what = fmt.Sprintf("recurring job %s/%s", e.Kind, e.Key)
	}
	return fmt.Sprintf("scheduler: %s: args are %d bytes of JSON; the limit is %d bytes (Config.MaxArgsBytes)", what, e.Size, e.Limit)
}

// Is reports whether target is ErrArgsTooLarge, or ErrInvalidSchedule for
// the args of a schedule.
func (e *ArgsTooLargeError) Is(target error) bool {
	return target == ErrArgsTooLarge || target == ErrInvalidSchedule && e.Schedule != ""
}

// wrappedError is an error of this package that wraps err, most often one
// of the sentinels above, under a text of its own, so that a message names
// the package once ("scheduler: schedule "x" not found") rather than once
// per layer. errors.Is and errors.As see err.
type wrappedError struct {
	msg string
	err error
}

func (e *wrappedError) Error() string { return e.msg }
func (e *wrappedError) Unwrap() error { return e.err }

// scheduleNotFound is the error for a schedule name that no row has.
func scheduleNotFound(name string) error {
	return &wrappedError{fmt.Sprintf("scheduler: schedule %q not found", name), ErrScheduleNotFound}
}

// Schedule is a durable cron entry: a row of braid_schedules.
type Schedule struct {
	ID            int64           `json:"id"`
	Name          string          `json:"name"`
	Description   string          `json:"description"`
	Expression    string          `json:"expression"`
	TimeZone      string          `json:"time_zone"`
	TargetType    TargetType      `json:"target_type"`
	Target        string          `json:"target"`
	Args          json.RawMessage `json:"args"`
	Queue         string          `json:"queue"`
	Priority      int             `json:"priority"`
	MaxAttempts   int             `json:"max_attempts,omitempty"`
	Enabled       bool            `json:"enabled"`
	OverlapPolicy OverlapPolicy   `json:"overlap_policy"`
	CatchUpPolicy CatchUpPolicy   `json:"catch_up_policy"`

	// NextRunAt is the next slot to fire.
	NextRunAt time.Time `json:"next_run_at"`

	// LastRunAt is when the schedule last fired, on the database clock.
	LastRunAt *time.Time `json:"last_run_at,omitempty"`

	// LastJobID is the River job of the last fire of a job target.
	LastJobID *int64 `json:"last_job_id,omitempty"`

	// LastRunID is the workflow run of the last fire of a workflow target.
	LastRunID string `json:"last_run_id,omitempty"`

	// LastError is why the last attempt to fire failed: the job could not
	// be inserted or the run could not be started. A successful fire
	// clears it.
	LastError string `json:"last_error"`

	// LastErrorAt is when LastError happened, on the database clock; nil
	// when there is no error.
	LastErrorAt *time.Time `json:"last_error_at"`

	// FireFailures counts failed attempts to fire the slot that is due:
	// it is back to zero once the schedule moves past that slot.
	FireFailures int `json:"fire_failures"`

	// RetryAt, after a failed fire, is when the slot at NextRunAt is tried
	// again (Config.FireRetryBackoff); nil otherwise.
	RetryAt *time.Time `json:"retry_at,omitempty"`

	CreatedBy string    `json:"created_by"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// ScheduleParams describes a schedule to Create.
type ScheduleParams struct {
	// Name identifies the schedule; 1 to NameMaxLength characters, and at
	// most NameMaxBytes bytes for a workflow target, unique.
	Name string

	// Description is free text for operators, at most
	// DescriptionMaxLength characters.
	Description string

	// Expression is when the schedule fires, in the syntax of Parse.
	Expression string

	// TimeZone is the IANA zone Expression is evaluated in.
	//
	// Defaults to UTC.
	TimeZone string

	// TargetType says whether the schedule inserts a job or starts a
	// workflow. It is required: an empty or any other value is an error.
	TargetType TargetType

	// Target is the River job kind or the workflow name; 1 to
	// TargetMaxLength characters, and a job kind at most KindMaxLength
	// (River's limit). When the scheduler can tell (see
	// Config.Queue and Config.Workflows), it must exist: an unknown one is
	// an *UnknownTargetError.
	Target string

	// Args are the job's args (a JSON object) or the workflow's input.
	// Anything encoding/json accepts; a json.RawMessage is used as is.
	// PostgreSQL's jsonb must be able to store it (queue.CheckJSONB: no
	// \u0000, say). At most Config.MaxArgsBytes once encoded.
	//
	// Defaults to {}.
	Args any

	// Queue is the River queue of the job. Workflow runs use the engine's
	// own queues.
	//
	// Defaults to QueueDefault.
	Queue string

	// Priority is the River priority of the job, 1 (most urgent) to 4.
	//
	// Defaults to PriorityDefault.
	Priority int

	// MaxAttempts is the River max attempts of the job.
	//
	// Defaults to River's own default.
	MaxAttempts int

	// Disabled creates the schedule disabled.
	Disabled bool

	// OverlapPolicy says whether a slot fires while an earlier fire is
	// unfinished.
	//
	// Defaults to OverlapSkip.
	OverlapPolicy OverlapPolicy

	// CatchUpPolicy says what happens to missed slots.
	//
	// Defaults to CatchUpOnce.
	CatchUpPolicy CatchUpPolicy

	// CreatedBy names who created the schedule, for operators, in at most
	// CreatedByMaxLength characters.
	CreatedBy string
}

// argsGiven reports whether ScheduleUpdate.Args gives new args: it is
// not nil, nor a nil pointer, map, slice (a json.RawMessage) or
// interface. A caller's optional field left empty holds such a typed nil,
// which an interface compares unequal to nil: taken as args, it would
// reset them to {}, or fail as null.
func argsGiven(v any) bool {
	if v == nil {
		return false
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Interface:
		return !rv.IsNil()
	}
	return true
}

// ScheduleUpdate changes the fields of a schedule that are non-nil. A
// change of Expression or TimeZone moves next_run_at to the new
// expression's first slot after now. A changed target is checked as in
// Create, and changed Args are capped as in Create. Any update ends the
// backoff of a failed fire: a due slot is tried again at once.
type ScheduleUpdate struct {
	Description   *string
	Expression    *string
	TimeZone      *string
	TargetType    *TargetType
	Target        *string
	Args          any // nil leaves the args unchanged, as does a nil of a type (see argsGiven)
	Queue         *string
	Priority      *int
	MaxAttempts   *int
	Enabled       *bool
	OverlapPolicy *OverlapPolicy
	CatchUpPolicy *CatchUpPolicy
}

// ScheduleListParams filters and pages List.
type ScheduleListParams struct {
	// Enabled, when set, lists only schedules with that state.
	Enabled *bool

	// Limit is the most schedules returned.
	//
	// Defaults to 100.
	Limit int

	// Offset skips that many schedules, in name order.
	Offset int
}

const scheduleColumns = `id, name, description, expression, time_zone, target_type, target, args, queue,
    priority, max_attempts, enabled, overlap_policy, catch_up_policy, next_run_at, last_run_at,
    last_job_id, last_run_id, last_error, last_error_at, fire_failures, retry_at, created_by, created_at, updated_at`

func scanSchedule(row pgx.Row, extra ...any) (*Schedule, error) {
	var (
		sch         Schedule
		maxAttempts *int32
		priority    int16
		lastRunID   *uuid.UUID
		lastError   *string
		failures    int32
	)
	dest := append([]any{
		&sch.ID, &sch.Name, &sch.Description, &sch.Expression, &sch.TimeZone, &sch.TargetType, &sch.Target,
		&sch.Args, &sch.Queue, &priority, &maxAttempts, &sch.Enabled, &sch.OverlapPolicy, &sch.CatchUpPolicy,
		&sch.NextRunAt, &sch.LastRunAt, &sch.LastJobID, &lastRunID, &lastError, &sch.LastErrorAt, &failures, &sch.RetryAt,
		&sch.CreatedBy, &sch.CreatedAt, &sch.UpdatedAt,
	}, extra...)
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	sch.Priority = int(priority)
	if maxAttempts != nil {
		sch.MaxAttempts = int(*maxAttempts)
	}
	if lastRunID != nil {
		sch.LastRunID = lastRunID.String()
	}
	if lastError != nil {
		sch.LastError = *lastError
	}
	sch.FireFailures = int(failures)
	return &sch, nil
}

func validateQueue(name string) error { return queue.ValidateQueueName(name) }

func validatePriority(priority int) error {
	if priority < 1 || priority > 4 {
		return fmt.Errorf("priority %d is out of range 1-4", priority)
	}
	return nil
}

func validateName(name string) error {
	return checkText("schedule name", name, NameMaxLength, "")
}

// encodeArgs encodes args as JSON; nil becomes {}. It refuses JSON that
// PostgreSQL's jsonb cannot store (queue.CheckJSONB), such as a string
// holding \u0000, which encoding/json produces and accepts.
func encodeArgs(args any) (json.RawMessage, error) {
	var b []byte
	switch a := args.(type) {
	case nil:
		return json.RawMessage(`{}`), nil
	case json.RawMessage:
		if len(a) == 0 {
			return json.RawMessage(`{}`), nil
		}
		if !json.Valid(a) {
			return nil, errors.New("args are not valid JSON")
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, a); err != nil {
			return nil, err
		}
		b = buf.Bytes()
	default:
		var err error
		if b, err = json.Marshal(args); err != nil {
			return nil, fmt.Errorf("args cannot be encoded as JSON: %w", err)
		}
	}
	if err := queue.CheckJSONB(b); err != nil {
		return nil, fmt.Errorf("args cannot be stored: %w", err)
	}
	return b, nil
}

// invalidError is an error of validate: it matches ErrInvalidSchedule,
// and unwraps to the rule's own error.
type invalidError struct{ wrappedError }

func (e *invalidError) Is(target error) bool { return target == ErrInvalidSchedule }

// invalid is the error, matching ErrInvalidSchedule, of schedule name
// refused for err.
func invalid(name string, err error) error {
	// An *ExpressionError says "scheduler: " itself; name the package once.
	msg := fmt.Sprintf("scheduler: schedule %q: %s", name, strings.TrimPrefix(err.Error(), "scheduler: "))
	return &invalidError{wrappedError{msg, err}}
}

// validate checks a complete schedule and returns its parsed expression.
// Its errors match ErrInvalidSchedule.
func (sch *Schedule) validate() (*Expression, error) {
	fail := func(err error) (*Expression, error) { return nil, invalid(sch.Name, err) }
	if err := validateName(sch.Name); err != nil {
		return nil, &invalidError{wrappedError{"scheduler: " + err.Error(), err}}
	}
	e, err := Parse(sch.Expression, sch.TimeZone)
	if err != nil {
		return fail(err)
	}
	switch sch.TargetType {
	case TargetJob, TargetWorkflow:
	default:
		return fail(fmt.Errorf("target type %q is invalid; use %q or %q", sch.TargetType, TargetJob, TargetWorkflow))
	}
	if err := checkText("target", sch.Target, TargetMaxLength, ""); err != nil {
		return fail(err)
	}
	for _, f := range []struct {
		what, s string
		max     int
	}{{"description", sch.Description, DescriptionMaxLength}, {"created by", sch.CreatedBy, CreatedByMaxLength}} {
		if f.s == "" {
			continue // both are optional
		}
		if err := checkText(f.what, f.s, f.max, ""); err != nil {
			return fail(err)
		}
	}
	if n := len(sch.Name); sch.TargetType == TargetWorkflow && n > NameMaxBytes {
		return fail(fmt.Errorf("name is %d bytes of UTF-8; the limit for a workflow target is %d bytes, so that the idempotency keys of its slots fit a run's", n, NameMaxBytes))
	}
	if n := utf8.RuneCountInString(sch.Target); sch.TargetType == TargetJob && n > KindMaxLength {
		return fail(fmt.Errorf("target is a job kind of %d characters; River's limit for a job kind is %d", n, KindMaxLength))
	}
	if sch.TargetType == TargetJob && (len(sch.Args) == 0 || sch.Args[0] != '{') {
		return fail(fmt.Errorf("args of a job target must be a JSON object, got %s", sch.Args))
	}
	if err := validateQueue(sch.Queue); err != nil {
		return fail(err)
	}
	if err := validatePriority(sch.Priority); err != nil {
		return fail(err)
	}
	if sch.MaxAttempts < 0 || sch.MaxAttempts > queue.MaxAttemptsMax {
		return fail(fmt.Errorf("max attempts %d is outside 0-%d (0 for River's default)", sch.MaxAttempts, queue.MaxAttemptsMax))
	}
	switch sch.OverlapPolicy {
	case OverlapSkip, OverlapAllow:
	default:
		return fail(fmt.Errorf("overlap policy %q is invalid; use %q or %q", sch.OverlapPolicy, OverlapSkip, OverlapAllow))
	}
	switch sch.CatchUpPolicy {
	case CatchUpOnce, CatchUpSkip, CatchUpAll:
	default:
		return fail(fmt.Errorf("catch-up policy %q is invalid; use %q, %q or %q", sch.CatchUpPolicy, CatchUpOnce, CatchUpSkip, CatchUpAll))
	}
	// Store the canonical forms.
	sch.Expression, sch.TimeZone = e.String(), e.TimeZone()
	return e, nil
}

// checkArgs enforces Config.MaxArgsBytes on a schedule's encoded args.
func (s *Scheduler) checkArgs(sch *Schedule) error {
	if len(sch.Args) > s.cfg.MaxArgsBytes {
		return &ArgsTooLargeError{Schedule: sch.Name, Size: len(sch.Args), Limit: s.cfg.MaxArgsBytes}
	}
	return nil
}

// checkTarget rejects a target the scheduler knows does not exist. Without
// a way to know (no WorkflowRegistry, no Queue, or an insert-only one) it
// accepts any target.
func (s *Scheduler) checkTarget(sch *Schedule) error {
	known := true
	switch sch.TargetType {
	case TargetWorkflow:
		if r, ok := s.cfg.Workflows.(WorkflowRegistry); ok && r != nil {
			known = r.KnowsWorkflow(sch.Target)
		}
	case TargetJob:
		if s.cfg.Queue != nil {
			known = s.cfg.Queue.KnowsKind(sch.Target)
		}
	default:
		return fmt.Errorf("scheduler: schedule %q: target type %q is invalid; use %q or %q", sch.Name, sch.TargetType, TargetJob, TargetWorkflow)
	}
	if !known {
		return &UnknownTargetError{Schedule: sch.Name, TargetType: sch.TargetType, Target: sch.Target}
	}
	return nil
}

// dbNow reads the database clock.
func dbNow(ctx context.Context, db dbtx) (time.Time, error) {
	var now time.Time
	if err := db.QueryRow(ctx, "SELECT braid_now()").Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("scheduler: reading the database clock: %w", err)
	}
	return now, nil
}

// firstSlot is the first slot of a new or changed expression: the next
// slot after now, where @every counts from now truncated to the second.
func firstSlot(e *Expression, now time.Time) time.Time {
	if d, ok := e.Every(); ok {
		return now.Truncate(time.Second).Add(everyStep(d))
	}
	return e.Next(now)
}

// everyStep is the step of an @every grid at the database's microsecond
// precision.
func everyStep(d time.Duration) time.Duration { return d.Truncate(time.Microsecond) }

// nextSlot returns the slot after slot.
func nextSlot(e *Expression, slot time.Time) time.Time {
	if d, ok := e.Every(); ok {
		return slot.Add(everyStep(d))
	}
	return e.Next(slot)
}

// slotAfter returns the first slot of the grid through slot that is
// strictly after now.
func slotAfter(e *Expression, slot, now time.Time) time.Time {
	if !slot.After(now) {
		slot = lastSlot(e, slot, now)
	}
	for !slot.After(now) {
		slot = nextSlot(e, slot)
	}
	return slot
}

// lastSlot returns the latest slot at or before now of the grid through
// first (which is itself at or before now).
func lastSlot(e *Expression, first, now time.Time) time.Time {
	if d, ok := e.Every(); ok {
		step := everyStep(d)
		return first.Add(now.Sub(first) / step * step)
	}
	last := first
	for range 1000 {
		n := e.Next(last)
		if n.After(now) {
			return last
		}
		last = n
	}
	// Far behind: find a slot close to now by looking back over growing
	// windows, then walk forward.
	for _, w := range []time.Duration{time.Minute, time.Hour, 24 * time.Hour, 32 * 24 * time.Hour, 366 * 24 * time.Hour, 10 * 366 * 24 * time.Hour} {
		c := e.Next(now.Add(-w))
		if c.IsZero() || c.After(now) {
			continue
		}
		for {
			n := e.Next(c)
			if n.IsZero() || n.After(now) {
				break
			}
			c = n
		}
		if c.After(last) {
			return c
		}
		return last
	}
	return last
}

// Create adds a schedule. Its first slot is the expression's first slot
// after now (for @every: now, truncated to the second, plus the interval).
func (s *Scheduler) Create(ctx context.Context, params *ScheduleParams) (*Schedule, error) {
	var sch *Schedule
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		sch, err = s.CreateTx(ctx, tx, params)
		return err
	})
	return sch, err
}

// CreateTx is Create inside tx; the schedule exists only if tx commits.
func (s *Scheduler) CreateTx(ctx context.Context, tx pgx.Tx, params *ScheduleParams) (*Schedule, error) {
	if params == nil {
		return nil, errors.New("scheduler: Create needs params")
	}
	args, err := encodeArgs(params.Args)
	if err != nil {
		return nil, invalid(params.Name, err)
	}
	sch := &Schedule{
		Name:          params.Name,
		Description:   params.Description,
		Expression:    params.Expression,
		TimeZone:      params.TimeZone,
		TargetType:    params.TargetType,
		Target:        params.Target,
		Args:          args,
		Queue:         orDefault(params.Queue, QueueDefault),
		Priority:      orDefault(params.Priority, PriorityDefault),
		MaxAttempts:   params.MaxAttempts,
		Enabled:       !params.Disabled,
		OverlapPolicy: orDefault(params.OverlapPolicy, OverlapSkip),
		CatchUpPolicy: orDefault(params.CatchUpPolicy, CatchUpOnce),
		CreatedBy:     params.CreatedBy,
	}
	if err := s.checkArgs(sch); err != nil {
		return nil, err
	}
	e, err := sch.validate()
	if err != nil {
		return nil, err
	}
	if err := s.checkTarget(sch); err != nil {
		return nil, err
	}
	now, err := dbNow(ctx, tx)
	if err != nil {
		return nil, err
	}
	sch.NextRunAt = firstSlot(e, now)

	created, err := scanSchedule(tx.QueryRow(ctx, `
INSERT INTO braid_schedules (name, description, expression, time_zone, target_type, target, args, queue,
    priority, max_attempts, enabled, overlap_policy, catch_up_policy, next_run_at, created_by)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
ON CONFLICT (name) DO NOTHING
RETURNING `+scheduleColumns,
		sch.Name, sch.Description, sch.Expression, sch.TimeZone, sch.TargetType, sch.Target, sch.Args, sch.Queue,
		sch.Priority, nullIfZero(sch.MaxAttempts), sch.Enabled, sch.OverlapPolicy, sch.CatchUpPolicy, sch.NextRunAt, sch.CreatedBy))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, &wrappedError{fmt.Sprintf("scheduler: schedule %q already exists", sch.Name), ErrScheduleExists}
	}
	if err != nil {
		return nil, fmt.Errorf("scheduler: creating schedule %q: %w", sch.Name, err)
	}
	if err := notify(ctx, tx); err != nil {
		return nil, err
	}
	return created, nil
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

func nullIfZero(n int) *int {
	if n == 0 {
		return nil
	}
	return &n
}

// Get returns the named schedule, or an error matching ErrScheduleNotFound.
func (s *Scheduler) Get(ctx context.Context, name string) (*Schedule, error) {
	return getSchedule(ctx, s.pool, name, "")
}

func getSchedule(ctx context.Context, db dbtx, name, lock string) (*Schedule, error) {
	sch, err := scanSchedule(db.QueryRow(ctx, `SELECT `+scheduleColumns+` FROM braid_schedules WHERE name = $1 `+lock, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, scheduleNotFound(name)
	}
	if err != nil {
		return nil, fmt.Errorf("scheduler: reading schedule %q: %w", name, err)
	}
	return sch, nil
}

// List returns schedules in name order.
func (s *Scheduler) List(ctx context.Context, params *ScheduleListParams) ([]*Schedule, error) {
	var p ScheduleListParams
	if params != nil {
		p = *params
	}
	if p.Limit < 0 || p.Offset < 0 {
		return nil, fmt.Errorf("scheduler: list limit %d and offset %d must not be negative", p.Limit, p.Offset)
	}
	if p.Limit == 0 {
		p.Limit = 100
	}
	rows, err := s.pool.Query(ctx, `SELECT `+scheduleColumns+` FROM braid_schedules
WHERE $1::boolean IS NULL OR enabled = $1
ORDER BY name LIMIT $2 OFFSET $3`, p.Enabled, p.Limit, p.Offset)
	if err != nil {
		return nil, fmt.Errorf("scheduler: listing schedules: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*Schedule, error) { return scanSchedule(row) })
	if err != nil {
		return nil, fmt.Errorf("scheduler: listing schedules: %w", err)
	}
	return list, nil
}

// Update changes the named schedule and returns it. It returns an error
// matching ErrScheduleNotFound when there is none.
func (s *Scheduler) Update(ctx context.Context, name string, update *ScheduleUpdate) (*Schedule, error) {
	var sch *Schedule
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		sch, err = s.UpdateTx(ctx, tx, name, update)
		return err
	})
	return sch, err
}

// UpdateTx is Update inside tx.
func (s *Scheduler) UpdateTx(ctx context.Context, tx pgx.Tx, name string, update *ScheduleUpdate) (*Schedule, error) {
	if update == nil {
		update = &ScheduleUpdate{}
	}
	sch, err := getSchedule(ctx, tx, name, "FOR UPDATE")
	if err != nil {
		return nil, err
	}
	oldExpr, oldZone, wasEnabled := sch.Expression, sch.TimeZone, sch.Enabled
	oldType, oldTarget := sch.TargetType, sch.Target
	set := func(dst *string, src *string) {
		if src != nil {
			*dst = *src
		}
	}
	set(&sch.Description, update.Description)
	set(&sch.Expression, update.Expression)
	set(&sch.TimeZone, update.TimeZone)
	set(&sch.Target, update.Target)
	set(&sch.Queue, update.Queue)
	if update.TargetType != nil {
		sch.TargetType = *update.TargetType
	}
	newArgs := argsGiven(update.Args)
	if newArgs {
		if sch.Args, err = encodeArgs(update.Args); err != nil {
			return nil, invalid(name, err)
		}
	}
	if update.Priority != nil {
		sch.Priority = *update.Priority
	}
	if update.MaxAttempts != nil {
		sch.MaxAttempts = *update.MaxAttempts
	}
	if update.Enabled != nil {
		sch.Enabled = *update.Enabled
	}
	if update.OverlapPolicy != nil {
		sch.OverlapPolicy = *update.OverlapPolicy
	}
	if update.CatchUpPolicy != nil {
		sch.CatchUpPolicy = *update.CatchUpPolicy
	}
	if newArgs {
		if err := s.checkArgs(sch); err != nil {
			return nil, err
		}
	}
	e, err := sch.validate()
	if err != nil {
		return nil, err
	}
	if sch.TargetType != oldType || sch.Target != oldTarget {
		if err := s.checkTarget(sch); err != nil {
			return nil, err
		}
	}
	now, err := dbNow(ctx, tx)
	if err != nil {
		return nil, err
	}
	switch {
	case sch.Expression != oldExpr || sch.TimeZone != oldZone:
		sch.NextRunAt = firstSlot(e, now)
	case sch.Enabled && !wasEnabled:
		sch.NextRunAt = slotAfter(e, sch.NextRunAt, now)
	}
	return writeSchedule(ctx, tx, sch)
}

func writeSchedule(ctx context.Context, tx pgx.Tx, sch *Schedule) (*Schedule, error) {
	updated, err := scanSchedule(tx.QueryRow(ctx, `
UPDATE braid_schedules SET description = $2, expression = $3, time_zone = $4, target_type = $5, target = $6,
    args = $7, queue = $8, priority = $9, max_attempts = $10, enabled = $11, overlap_policy = $12,
    catch_up_policy = $13, next_run_at = $14, retry_at = NULL, updated_at = braid_now(),
    fire_failures = CASE WHEN next_run_at = $14 THEN fire_failures ELSE 0 END
WHERE id = $1
RETURNING `+scheduleColumns,
		sch.ID, sch.Description, sch.Expression, sch.TimeZone, sch.TargetType, sch.Target, sch.Args, sch.Queue,
		sch.Priority, nullIfZero(sch.MaxAttempts), sch.Enabled, sch.OverlapPolicy, sch.CatchUpPolicy, sch.NextRunAt))
	if err != nil {
		return nil, fmt.Errorf("scheduler: updating schedule %q: %w", sch.Name, err)
	}
	if err := notify(ctx, tx); err != nil {
		return nil, err
	}
	return updated, nil
}

// Toggle enables or disables the named schedule and returns it. A schedule
// enabled again resumes at its first slot after now: slots that passed
// while it was disabled are not missed slots and never fire.
func (s *Scheduler) Toggle(ctx context.Context, name string, enabled bool) (*Schedule, error) {
	return s.Update(ctx, name, &ScheduleUpdate{Enabled: &enabled})
}

// ToggleTx is Toggle inside tx.
func (s *Scheduler) ToggleTx(ctx context.Context, tx pgx.Tx, name string, enabled bool) (*Schedule, error) {
	return s.UpdateTx(ctx, tx, name, &ScheduleUpdate{Enabled: &enabled})
}

// Delete removes the named schedule. Jobs and runs it already fired are
// not touched. It returns an error matching ErrScheduleNotFound when there
// is none.
func (s *Scheduler) Delete(ctx context.Context, name string) error {
	return s.inTx(ctx, func(tx pgx.Tx) error { return s.DeleteTx(ctx, tx, name) })
}

// DeleteTx is Delete inside tx.
func (s *Scheduler) DeleteTx(ctx context.Context, tx pgx.Tx, name string) error {
	tag, err := tx.Exec(ctx, `DELETE FROM braid_schedules WHERE name = $1`, name)
	if err != nil {
		return fmt.Errorf("scheduler: deleting schedule %q: %w", name, err)
	}
	if tag.RowsAffected() == 0 {
		return scheduleNotFound(name)
	}
	return notify(ctx, tx)
}

// fireNext takes the earliest due schedule, fires or skips its due slot
// and advances next_run_at, all in one transaction. It reports whether a
// due schedule was found.
func (s *Scheduler) fireNext(ctx context.Context, lease *leases.Lease) (bool, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("scheduler: beginning: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	if lease != nil {
		if err := s.cfg.Leases.CheckTx(ctx, tx, lease); err != nil {
			return false, err
		}
	}
	var now time.Time
	sch, err := scanSchedule(tx.QueryRow(ctx, `SELECT `+scheduleColumns+`, braid_now() FROM braid_schedules
WHERE enabled AND next_run_at <= braid_now() AND (retry_at IS NULL OR retry_at <= braid_now())
ORDER BY next_run_at LIMIT 1
FOR UPDATE SKIP LOCKED`), &now)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("scheduler: reading due schedules: %w", err)
	}
	log := s.logger.With(slog.String("schedule", sch.Name))

	e, err := s.parse(sch.Expression, sch.TimeZone)
	if err != nil {
		// This leader cannot read the schedule: a row written around this
		// package, or by a newer version during a rolling upgrade. It is a
		// failed fire of the due slot, held back by the backoff and tried
		// again, perhaps by a leader that can read it; the schedule is
		// neither advanced nor disabled for what one process cannot do.
		delay := s.cfg.FireRetryBackoff.Delay(sch.FireFailures + 1)
		log.ErrorContext(ctx, "scheduler: cannot read the schedule's expression; retrying the slot later",
			slog.Int("failures", sch.FireFailures+1), slog.Duration("retry_in", delay), slog.String("error", err.Error()))
		if err := recordFireFailure(ctx, tx, sch, sch.NextRunAt, err, delay); err != nil {
			return false, err
		}
		return true, commit(ctx, tx)
	}

	first := sch.NextRunAt
	slot := first
	fire := true
	switch sch.CatchUpPolicy {
	case CatchUpAll:
	case CatchUpSkip:
		slot = lastSlot(e, first, now)
		// A slot whose fire failed (FireFailures) was reached in time;
		// its retry, held back by the backoff, is late only from when the
		// backoff let it go (RetryAt), and not at all once an Update ended
		// the backoff. A later slot that passed meanwhile (no leader ran
		// for a while) is a missed slot like any other.
		late := now.Sub(slot)
		if sch.FireFailures > 0 && slot.Equal(first) {
			late = 0
			if sch.RetryAt != nil {
				late = now.Sub(*sch.RetryAt)
			}
		}
		if late > s.cfg.MissedSlotGrace {
			fire = false
			log.InfoContext(ctx, "scheduler: skipping missed slots", slog.Time("first_slot", first), slog.Time("last_slot", slot), slog.Duration("late", late))
		}
	default: // CatchUpOnce
		slot = lastSlot(e, first, now)
	}
	next := nextSlot(e, slot)

	if fire && sch.OverlapPolicy == OverlapSkip {
		busy, err := previousUnfinished(ctx, tx, sch)
		if err != nil {
			return false, err
		}
		if busy {
			fire = false
			log.InfoContext(ctx, "scheduler: skipping slot while an earlier fire is unfinished", slog.Time("slot", slot))
		}
	}

	var (
		jobID *int64
		runID *uuid.UUID
	)
	if fire {
		jobID, runID, err = s.fireTarget(ctx, tx, sch, first, slot)
		if err != nil {
			if ctx.Err() != nil {
				// Stopping or losing the lease is not the schedule's
				// failure: the transaction rolls back and the slot stays
				// due.
				return false, err
			}
			// The slot is not advanced: it stays due and is tried again
			// after a backoff, with the same slot time.
			delay := s.cfg.FireRetryBackoff.Delay(sch.FireFailures + 1)
			log.ErrorContext(ctx, "scheduler: firing schedule failed; retrying the slot later", slog.Time("slot", slot),
				slog.Int("failures", sch.FireFailures+1), slog.Duration("retry_in", delay), slog.String("error", err.Error()))
			if errors.Is(err, errTxBroken) {
				// Nothing more can be written in tx: record the failure in
				// a transaction of its own, fenced on the lease as tx was.
				_ = tx.Rollback(context.WithoutCancel(ctx))
				wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
				defer cancel()
				if rerr := s.recordFireFailureFenced(wctx, lease, sch, first, err, delay); rerr != nil {
					return false, fmt.Errorf("%w (recording it: %w)", err, rerr)
				}
				return true, nil
			}
			if err := recordFireFailure(ctx, tx, sch, first, err, delay); err != nil {
				return false, err
			}
			return true, commit(ctx, tx)
		}
	}

	tag, err := tx.Exec(ctx, `
UPDATE braid_schedules SET next_run_at = $2, retry_at = NULL,
    last_run_at = CASE WHEN $3 THEN braid_now() ELSE last_run_at END,
    last_job_id = CASE WHEN $3 THEN $4 ELSE last_job_id END,
    last_run_id = CASE WHEN $3 THEN $5 ELSE last_run_id END,
    last_error = CASE WHEN $3 THEN NULL ELSE last_error END,
    last_error_at = CASE WHEN $3 THEN NULL ELSE last_error_at END,
    fire_failures = 0
WHERE id = $1 AND next_run_at = $6`, sch.ID, next, fire, jobID, runID, first)
	if err != nil {
		return false, fmt.Errorf("scheduler: advancing schedule %q: %w", sch.Name, err)
	}
	if tag.RowsAffected() != 1 {
		return false, fmt.Errorf("scheduler: schedule %q changed while locked", sch.Name)
	}
	if err := commit(ctx, tx); err != nil {
		return false, err
	}
	if fire {
		log.DebugContext(ctx, "scheduler: fired", slog.Time("slot", slot), slog.Time("next_run_at", next))
	}
	return true, nil
}

// recordFireFailure stores why the slot first of sch failed to fire and
// holds it back for delay, fenced on the slot so that a schedule changed
// meanwhile is left alone.
func recordFireFailure(ctx context.Context, db dbtx, sch *Schedule, first time.Time, fireErr error, delay time.Duration) error {
	_, err := db.Exec(ctx, `
UPDATE braid_schedules SET last_error = $3, last_error_at = braid_now(), fire_failures = fire_failures + 1,
    retry_at = braid_now() + $4::bigint * interval '1 microsecond'
WHERE id = $1 AND next_run_at = $2`, sch.ID, first, queue.SanitizeErrorText(fireErr.Error(), 0), delay.Microseconds())
	if err != nil {
		return fmt.Errorf("scheduler: recording the failed fire of schedule %q: %w", sch.Name, err)
	}
	return nil
}

// recordFireFailureFenced is recordFireFailure in a transaction of its
// own that first checks lease (when not nil), so that a leader that lost
// its lease does not hold back the slot of the one that took it.
func (s *Scheduler) recordFireFailureFenced(ctx context.Context, lease *leases.Lease, sch *Schedule, first time.Time, fireErr error, delay time.Duration) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if lease != nil {
			if err := s.cfg.Leases.CheckTx(ctx, tx, lease); err != nil {
				return err
			}
		}
		return recordFireFailure(ctx, tx, sch, first, fireErr, delay)
	})
}

func commit(ctx context.Context, tx pgx.Tx) error {
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("scheduler: committing: %w", err)
	}
	return nil
}

// errTxBroken marks a failure after which the transaction cannot go on.
var errTxBroken = errors.New("transaction aborted")

// fireTarget inserts the job or starts the run of one slot inside a
// savepoint of tx. An error not matching errTxBroken left tx usable.
func (s *Scheduler) fireTarget(ctx context.Context, tx pgx.Tx, sch *Schedule, first, slot time.Time) (*int64, *uuid.UUID, error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", errTxBroken, err)
	}
	jobID, runID, err := s.insertTarget(ctx, sp, sch, first, slot)
	if err != nil {
		if rbErr := sp.Rollback(ctx); rbErr != nil {
			return nil, nil, fmt.Errorf("%w: %w (rolling back: %w)", errTxBroken, err, rbErr)
		}
		return nil, nil, err
	}
	if err := sp.Commit(ctx); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", errTxBroken, err)
	}
	return jobID, runID, nil
}

// slotFormat writes slots in metadata and idempotency keys.
const slotFormat = time.RFC3339Nano

func (s *Scheduler) insertTarget(ctx context.Context, tx pgx.Tx, sch *Schedule, first, slot time.Time) (*int64, *uuid.UUID, error) {
	switch sch.TargetType {
	case TargetWorkflow:
		if s.cfg.Workflows == nil {
			return nil, nil, fmt.Errorf("schedule targets workflow %q but Config.Workflows is nil", sch.Target)
		}
		key := IdempotencyKey(sch.Name, slot)
		id, err := s.cfg.Workflows.StartWorkflowTx(ctx, tx, sch.Target, sch.Args, key)
		if err != nil {
			return nil, nil, fmt.Errorf("starting workflow %q: %w", sch.Target, err)
		}
		runID, err := uuid.Parse(id)
		if err != nil {
			return nil, nil, fmt.Errorf("workflow %q returned run ID %q, which is not a UUID", sch.Target, id)
		}
		return nil, &runID, nil
	default:
		meta, err := json.Marshal(map[string]string{
			MetadataSchedule:  sch.Name,
			MetadataSlot:      slot.UTC().Format(slotFormat),
			MetadataFirstSlot: first.UTC().Format(slotFormat),
		})
		if err != nil {
			return nil, nil, err
		}
		res, err := s.cfg.Queue.InsertTx(ctx, tx, rawJobArgs{kind: sch.Target, args: sch.Args}, &queue.InsertOpts{
			InsertOpts: river.InsertOpts{
				Queue:       sch.Queue,
				Priority:    sch.Priority,
				MaxAttempts: sch.MaxAttempts,
				Metadata:    meta,
			},
			// A backstop for the fence on next_run_at: a slot inserted
			// twice is the same job.
			IdempotencyKey: IdempotencyKey(sch.Name, slot),
		})
		if err != nil {
			return nil, nil, fmt.Errorf("inserting job of kind %q: %w", sch.Target, err)
		}
		if res.UniqueSkippedAsDuplicate {
			s.logger.WarnContext(ctx, "scheduler: slot had already fired; keeping its job", slog.String("schedule", sch.Name),
				slog.Time("slot", slot), slog.Int64("job_id", res.Job.ID))
		}
		return &res.Job.ID, nil, nil
	}
}

// Metadata keys of the River jobs that schedules insert.
const (
	// MetadataSchedule holds the schedule's name.
	MetadataSchedule = "braid_schedule"

	// MetadataSlot holds the slot fired, in RFC 3339 with fractions.
	MetadataSlot = "braid_slot"

	// MetadataFirstSlot holds the earliest slot this fire stands for:
	// under CatchUpOnce and CatchUpSkip one fire covers every slot from it
	// through MetadataSlot.
	MetadataFirstSlot = "braid_first_slot"
)

// IdempotencyKey returns the idempotency key of a schedule's slot:
// "schedule:<name>:<slot in RFC 3339, UTC>". A schedule starts the workflow
// run of a slot with it, so a run started twice for the same slot is the
// same run, and inserts the job of a slot with it (queue.InsertOpts), so a
// slot inserted twice is the same job.
func IdempotencyKey(schedule string, slot time.Time) string {
	return "schedule:" + schedule + ":" + slot.UTC().Format(slotFormat)
}

// previousUnfinished reports whether a job or run of one of the
// schedule's fires is unfinished: the last fire's, or an earlier one's
// (RunNow records its fire as the last, over a slot's fire that may still
// run).
func previousUnfinished(ctx context.Context, tx pgx.Tx, sch *Schedule) (bool, error) {
	// Every fire's job carries the schedule's name in its metadata, and
	// every fire's run has a key in the range of keyPrefix: RunNow's fires
	// among them, whichever came last. Two partial indexes hold only the
	// unfinished ones (migration 00112).
	// The rest of a key must be a slot, so that schedule "a" does not take
	// the runs of schedule "a:b" for its own.
	// Counts, not EXISTS: an EXISTS that expects to stop at its first row
	// may get a sequential scan, read to its end when, as usual, no fire
	// is unfinished.
	prefix := keyPrefix(sch.Name)
	var busy bool
	err := tx.QueryRow(ctx, `
SELECT (SELECT count(*) FROM river_job WHERE metadata ? 'braid_schedule' AND metadata->>'braid_schedule' = $1
           AND state NOT IN ('completed', 'cancelled', 'discarded')) > 0
    OR (SELECT count(*) FROM braid_runs WHERE idempotency_key ~>=~ $2 AND idempotency_key ~<~ $3
           AND idempotency_key IS NOT NULL AND status IN ('pending', 'running', 'waiting')
           AND substr(idempotency_key, $4) ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?Z$') > 0`,
		sch.Name, prefix, prefixEnd(prefix), utf8.RuneCountInString(prefix)+1).Scan(&busy)
	if err != nil {
		return false, fmt.Errorf("scheduler: checking the previous fires of %q: %w", sch.Name, err)
	}
	return busy, nil
}

// keyPrefix is the start of the idempotency keys of a schedule's slots
// (IdempotencyKey).
func keyPrefix(name string) string { return "schedule:" + name + ":" }

// prefixEnd is the least string, byte by byte, above every string that
// starts with prefix, which ends in the ASCII colon: the same with a
// semicolon.
func prefixEnd(prefix string) string { return strings.TrimSuffix(prefix, ":") + ";" }

func nullUUID(s string) *uuid.UUID {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	id, err := uuid.Parse(s)
	if err != nil {
		return nil
	}
	return &id
}
