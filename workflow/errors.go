package workflow

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/braidflow/braid/queue"
)

// ErrSuspended is returned by durable calls (Task.Delay, Future.Get, Map, a
// Step whose retry is pending) when the task must wait. Return it from the
// workflow function like any error. If the function swallows it, the engine
// still suspends the task: every durable call after a suspension in the same
// turn returns this error without running anything.
var ErrSuspended = errors.New("workflow: task suspended")

// ErrUnknownWorkflow is returned when a workflow that is not registered with
// the engine is started or spawned.
var ErrUnknownWorkflow = errors.New("workflow: unknown workflow")

// ErrRunNotFound is returned for a run ID that does not exist.
var ErrRunNotFound = errors.New("workflow: run not found")

// ErrEventNotSet is returned by GetEvent when the run has not set the
// event's key: not within the timeout, or not at all because the run
// finished without setting it. The message names the run and the key.
var ErrEventNotSet = errors.New("workflow: event not set")

// ErrRunFinished is returned when cancelling a run that already finished.
var ErrRunFinished = errors.New("workflow: run already finished")

// ErrRunNotRetryable is returned when retrying a run that is neither failed
// nor cancelled, or that retention is deleting (ErrRunBeingDeleted).
var ErrRunNotRetryable = errors.New("workflow: run is neither failed nor cancelled")

// ErrRunBeingDeleted is matched, as ErrRunNotRetryable is, by the error of
// a Retry of a run that retention has begun to delete over several
// transactions (see the package documentation, "Retention"): it finished
// more than Config.Retention ago, and some of its tasks may be gone.
var ErrRunBeingDeleted = errors.New("workflow: run is being deleted by retention")

// runBeingDeletedError is the error of a Retry of a run being deleted.
type runBeingDeletedError struct{ runID string }

func (e *runBeingDeletedError) Error() string {
	return fmt.Sprintf("workflow: run %s is being deleted by retention, having finished more than the retention ago; it can no longer be retried", e.runID)
}

func (e *runBeingDeletedError) Is(target error) bool {
	return target == ErrRunBeingDeleted || target == ErrRunNotRetryable
}

// ErrCancelled is matched by the error of a cancelled run.
var ErrCancelled = errors.New("workflow: cancelled")

// ErrIdempotencyConflict is returned when an idempotency key or run ID is
// reused for a different workflow.
var ErrIdempotencyConflict = errors.New("workflow: idempotency key or run ID already used by another workflow")

// PayloadTooLargeError is returned when an input, output or step result is
// larger than Config.MaxPayloadBytes once encoded as JSON.
type PayloadTooLargeError struct {
	What  string // for example `input of workflow "digest"` or `output of step "send"`
	Size  int
	Limit int
}

func (e *PayloadTooLargeError) Error() string {
	return fmt.Sprintf("workflow: %s is %d bytes, over the limit of %d bytes", e.What, e.Size, e.Limit)
}

// EncodeError is returned when a value cannot be encoded as or decoded from
// JSON.
type EncodeError struct {
	What string
	Err  error
}

func (e *EncodeError) Error() string {
	return fmt.Sprintf("workflow: %s cannot be encoded as JSON: %v", e.What, e.Err)
}

func (e *EncodeError) Unwrap() error { return e.Err }

// DefinitionError is returned by NewEngine for an invalid definition.
type DefinitionError struct {
	Workflow string
	Reason   string
}

func (e *DefinitionError) Error() string {
	return fmt.Sprintf("workflow: definition %q: %s", e.Workflow, e.Reason)
}

// StepError is the recorded failure of a step whose retry policy is
// exhausted. Replay returns the same error.
type StepError struct {
	Step     string
	Attempts int
	Message  string

	// causes name the errors that the step's error was when it failed
	// (see Is).
	causes []string
}

func (e *StepError) Error() string {
	return fmt.Sprintf("step %q failed after %d attempts: %s", e.Step, e.Attempts, e.Message)
}

// Is reports whether target is, by its type and message, an error that
// the step's error was when the step failed: the error itself, one it
// wrapped (through Unwrap), or one of a few standard sentinels it matched
// through an Is method (fs.ErrNotExist, fs.ErrExist, fs.ErrPermission,
// fs.ErrInvalid, fs.ErrClosed, os.ErrDeadlineExceeded, context.Canceled,
// context.DeadlineExceeded, io.EOF, io.ErrUnexpectedEOF, net.ErrClosed,
// errors.ErrUnsupported). The error itself is not kept, only those names:
// so errors.Is(err, ErrNotFound), for a sentinel error, holds on every
// replay of the failed step as it held for the error the step's body
// returned, and code that branches on it takes the same path each time.
// errors.As cannot recover the body's own error values, nor can Is match
// a sentinel that the body's error matched through an Is method of its
// own. The names hold types as Go prints them (%T): an error whose type
// changes between the turn that recorded the failure and a later one (a
// renamed type, a dependency upgrade that makes a sentinel another way)
// no longer matches, and the code may take another path; Engine.CheckReplay
// lists the runs in flight that would, before such a deploy. A failure
// recorded before braid kept these names matches nothing. The names take
// at most MaxErrorBytes besides the message, the shortest first.
func (e *StepError) Is(target error) bool {
	if target == nil || len(e.causes) == 0 {
		return false
	}
	name, ok := causeName(target)
	return ok && slices.Contains(e.causes, name)
}

// ChildError is returned by Future.Get and Map when a child task failed
// permanently or was cancelled. It names the child.
type ChildError struct {
	Child    string // the child's key, for example "fetch/3"
	Workflow string
	Status   string // "failed" or "cancelled"
	Message  string
}

func (e *ChildError) Error() string {
	return fmt.Sprintf("child %q (workflow %q) %s: %s", e.Child, e.Workflow, e.Status, e.Message)
}

// Is makes a cancelled child match ErrCancelled.
func (e *ChildError) Is(target error) bool { return target == ErrCancelled && e.Status == "cancelled" }

// NodeError is the error of a DAG run that failed because one of its
// nodes failed under the FailDAG policy (or was cancelled). It names the
// node.
type NodeError struct {
	DAG      string
	Node     string
	Workflow string // the node's workflow
	Status   string // "failed" or "cancelled"
	Message  string
}

func (e *NodeError) Error() string {
	return fmt.Sprintf("DAG %q: node %q (workflow %q) %s: %s", e.DAG, e.Node, e.Workflow, e.Status, e.Message)
}

// RunError is the error of a failed or cancelled run, returned by
// Run.Result.
type RunError struct {
	RunID    string
	Workflow string
	Status   string // "failed" or "cancelled"
	Message  string
	// Err is the cause, when braid knows it as an error of its own: a
	// *TimeoutError for a run that its deadline cancelled; nil otherwise.
	Err error
}

func (e *RunError) Error() string {
	return fmt.Sprintf("run %s of workflow %q %s: %s", e.RunID, e.Workflow, e.Status, e.Message)
}

// Is makes a cancelled run match ErrCancelled.
func (e *RunError) Is(target error) bool { return target == ErrCancelled && e.Status == "cancelled" }

// Unwrap returns the cause, so that errors.As finds a *TimeoutError.
func (e *RunError) Unwrap() error { return e.Err }

// PanicError is the error of an attempt whose workflow or step code
// panicked. It carries the stack. It is the queue's, so that the queue
// counts and traces such an attempt as a panic.
type PanicError = queue.PanicError

// LimitError is returned when a call exceeds a configured limit.
type LimitError struct {
	What  string
	Count int
	Limit int
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("workflow: %s has %d items, over the limit of %d", e.What, e.Count, e.Limit)
}

// storedError is how errors are kept in the error columns.
type storedError struct {
	Message string `json:"message"`
	Kind    string `json:"kind,omitempty"`
	Child   string `json:"child,omitempty"`
	// Step names the step whose body returned the error, when the turn
	// failed because of it: a step without a retry policy records no
	// failure of its own (unless the code went on from it), so the task's
	// error says which step it was.
	Step    string `json:"step,omitempty"`
	Attempt int    `json:"attempt,omitempty"`
	// Causes, on a failed step's record, name the errors that the step's
	// error was (stepCauses), which StepError.Is matches.
	Causes []string `json:"causes,omitempty"`
}

// TurnsRunningError is returned by Cancel and Retry when turns of the run
// are still running after they waited TurnEndWaitDefault for them to end:
// their code does not return when its context is cancelled. After Cancel,
// the run is cancelled all the same; Retry changed nothing.
type TurnsRunningError struct {
	RunID   string
	Running int
	Waited  time.Duration
}

func (e *TurnsRunningError) Error() string {
	return fmt.Sprintf("workflow: run %s: %d turns of its failed or cancelled tasks are still running after %s; their code does not return when its context is cancelled", e.RunID, e.Running, e.Waited)
}

// NondeterminismError fails a turn whose code made a durable call other
// than the one its task recorded at the same position: a step renamed,
// two calls reordered, a delay removed, between the turn that recorded
// the history and this one (new code deployed while the run was in
// flight). It is returned before anything of the call runs, so no step
// body runs against a history it does not match. The attempt fails, and
// River retries it (a process still running the old code may take it);
// once its attempts are spent, the run fails and can be retried
// (Engine.Retry, braid runs retry) after code that makes the recorded
// calls is deployed. Engine.CheckReplay finds such runs before a deploy.
type NondeterminismError struct {
	RunID, TaskID, Workflow string
	// Position is the call's position among the task's durable calls,
	// from 0.
	Position int
	// Recorded is the call the history holds at Position; Called, the
	// call the code made there.
	Recorded, Called string
}

func (e *NondeterminismError) Error() string {
	return fmt.Sprintf("workflow: task %s of workflow %q (run %s) diverged from its recorded history at durable call %d: "+
		"recorded %s, called %s; no step body ran. Deploy code that makes the recorded calls in the same order "+
		"(or start new runs under a new workflow name), then retry the run",
		e.TaskID, e.Workflow, e.RunID, e.Position, e.Recorded, e.Called)
}
