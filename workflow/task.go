package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/trace"

	"github.com/braidflow/braid/queue"
)

// Task is one invocation of a durable function inside a run, as seen by
// its code during one turn. Its durable calls (Step, Delay, Go, Map) are
// recorded, so a later turn replays them instead of running them again.
//
// A Task is only valid during the turn that passed it to the workflow
// function; do not keep it or use it from other goroutines.
type Task struct {
	ctx      context.Context
	eng      *Engine
	id       uuid.UUID
	runID    uuid.UUID
	parentID *uuid.UUID
	workflow string
	key      string
	// dag is, for a DAG node, the name of its DAG.
	dag string
	// input is the task's input, which an event wait's filter reads.
	input   json.RawMessage
	attempt int
	// job is the turn's River job as its attempt began (nil in a replay):
	// the turn's step records are fenced on it (recordStep).
	job    *rivertype.JobRow
	span   trace.Span
	logger *slog.Logger

	steps    map[string]*stepRecord
	children map[string]*childRecord
	// names counts the calls of each name given to a durable call in
	// this turn, and taken holds every name uniqueName gave (see there).
	names map[string]int
	taken map[string]bool
	// history is the task's recorded durable calls by position, and seq
	// the position of the next call (see enter); halted, once set, is the
	// error that every later call returns and that fails the turn, however
	// the code handles it: a *NondeterminismError, or the error of a
	// handled step failure that could not be recorded (see
	// recordHandledFailure).
	history map[int]call
	seq     int
	halted  error
	// checking is set when the task is only replayed against its history
	// (Replay, CheckReplay): a call that the history does not answer
	// ends the replay instead of running. completed and lastPosition
	// describe the history: whether the task completed, and the last
	// position it recorded (-1 for none).
	checking     bool
	completed    bool
	lastPosition int

	// What the turn ends with.
	suspended bool
	snoozing  bool
	// failedStep is the last step of this turn whose body returned an
	// error without a retry policy of its own, and failedStepErr that
	// error: when the turn fails with it, the task's error names the step.
	failedStep    string
	failedStepErr error
	// unrecorded is such a step's failure while it is not recorded: it is
	// recorded once the code makes another durable call (see enter).
	unrecorded *stepFailure
	snooze     time.Duration
	// wait is what the turn suspended on besides children: a delay, or a
	// wait on a signal or an event.
	wait         *pendingWait
	waitChildren bool
	// nodes is, for a DAG's root task that has no nodes yet (a run
	// started by a process that does not know the DAG), the DAG whose
	// nodes the turn's outcome creates, as the start of a run creates
	// them.
	nodes   *dagSpec
	spawns  []spawn
	spawned map[string]bool
	// detached are the detached children started this turn, each to start
	// as a run of its own.
	detached []spawn
}

// stepRecord is a row of braid_steps as loaded at the start of a turn.
type stepRecord struct {
	kind     string
	status   string
	output   json.RawMessage
	err      storedError
	attempts int
}

// childRecord is a child task as loaded at the start of a turn.
type childRecord struct {
	id       uuid.UUID
	workflow string
	status   string
	output   json.RawMessage
	err      storedError
	// call and position are those of the Go or Map that started it, when
	// its record holds them.
	call     string
	position *int32
}

// call is a durable call as recorded at its position: its kind (step,
// delay, signal, event, set_event, go or map) and its name.
type call struct{ kind, name string }

func (c call) String() string {
	switch c.kind {
	case "signal", "event":
		return fmt.Sprintf("a wait on %s %q", c.kind, strings.TrimPrefix(c.name, c.kind+":"))
	case "set_event":
		return fmt.Sprintf("SetEvent %q", strings.TrimPrefix(c.name, "set-event:"))
	case "go":
		return fmt.Sprintf("Go %q", c.name)
	case "map":
		return fmt.Sprintf("Map %q", c.name)
	}
	return fmt.Sprintf("%s %q", c.kind, c.name)
}

// childCall is the Go or Map call (kind) that started the child key: a
// Map's children are keyed name/i.
func childCall(kind, key string) call {
	if kind == "map" {
		key = key[:max(strings.LastIndexByte(key, '/'), 0)]
	}
	return call{kind: kind, name: key}
}

// enter records that the task's code makes the durable call (kind, name)
// now, and returns its position: the number of durable calls made before
// it in this turn. When the task's history holds another call at that
// position, the code has diverged from what its run recorded: enter
// returns a *NondeterminismError, before anything of the call runs, and
// so does every later call of the turn, which then fails with it however
// the code handles it.
func (t *Task) enter(kind, name string) (int, error) {
	if t.halted != nil {
		return 0, t.halted
	}
	if err := t.recordHandledFailure(); err != nil {
		return 0, err
	}
	p := t.seq
	t.seq++
	rec, ok := t.history[p]
	recorded := rec.String()
	if !ok && t.checking && t.completed && p > t.lastPosition {
		// Replaying a completed task, the code goes on past the last
		// call the task recorded.
		ok, recorded = true, "no call (the task had completed)"
	}
	if ok && (rec.kind != kind || rec.name != name) {
		t.halted = &NondeterminismError{RunID: t.runID.String(), TaskID: t.id.String(), Workflow: t.workflow,
			Position: p, Recorded: recorded, Called: call{kind, name}.String()}
		return p, t.halted
	}
	return p, nil
}

// stepFailure is the failure of a step without a Retry policy of its own,
// at position pos, which the turn has not recorded.
type stepFailure struct {
	name string
	pos  int
	err  error
	// ended says that the turn's context had ended, or its deadline had
	// come, when the step failed: the step may have failed only because
	// of that.
	ended bool
}

// recordHandledFailure records the failure of the step that failed last in
// this turn without a Retry policy of its own, if the code has made a
// durable call since: the code went on from the failure (it compensated,
// say), and every later turn must take the path it took, so the failure
// becomes part of the history, as the failure of a step whose Retry
// attempts are spent is. Replay then returns it as a *StepError, River's
// next attempt of the turn included. A failure the code returns with, its
// turn making no further call, stays unrecorded: River's next attempt runs
// the step again.
//
// A failure is not recorded when the turn's context had ended, or its
// deadline had come, as the step failed (a Cancel, a timeout, a Stop): the
// step may have failed only because of that. One from before the turn's
// own timeout is recorded even after it; after any other end, not. Nor
// does a failure win over a record that another attempt of the turn wrote
// first. When the failure is not recorded, for these reasons or because
// its statement failed, the call fails, and so does every later call and
// the turn, whatever the code makes of the error (halted): River's next
// attempt replays the record that won, or runs the step again.
//
// A turn that completes after such a failure, with no durable call since
// (it fell back on a default, say), records it too (runTurn), so that the
// replay of the completed task (Replay, CheckReplay) takes the same path.
func (t *Task) recordHandledFailure() error {
	f := t.unrecorded
	if f == nil {
		return nil
	}
	t.unrecorded = nil
	err := t.recordFailure(f)
	if err != nil {
		// The code must not go on without the failure in the history,
		// whatever it makes of this error: a later call would take the
		// position of this one, and the next turn, running the step again,
		// another path.
		t.halted = err
	}
	return err
}

// ended reports whether the turn's context has ended or its deadline has
// come: a failure then may be the end's (a driver whose connection
// deadline was set from the context's fails at the deadline, before the
// context's own timer has cancelled it).
func (t *Task) ended() bool {
	if t.ctx.Err() != nil {
		return true
	}
	dl, ok := t.ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// recordFailure records f as a failed step: see recordHandledFailure.
func (t *Task) recordFailure(f *stepFailure) error {
	if f.ended {
		cause := context.Cause(t.ctx)
		if cause == nil {
			cause = context.DeadlineExceeded // its deadline came before its timer fired
		}
		return fmt.Errorf("workflow: step %q failed as the turn ended, so its failure is not recorded: %w", f.name, cause)
	}
	ctx := t.ctx
	if ctx.Err() != nil {
		// Only the turn's own timeout lets a failure from before it be
		// recorded after it, as the turn's outcome is, on a context of its
		// own. A turn that was cancelled, stopped or lost its job records
		// nothing more: its task may be another attempt's by now.
		if !errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
			return fmt.Errorf("workflow: step %q failed, and the turn ended before its failure was recorded: %w", f.name, context.Cause(ctx))
		}
		var cancel context.CancelFunc
		ctx, cancel = t.eng.outcomeContext(t.ctx)
		defer cancel()
	}
	se := t.eng.stepError(f.err, 1)
	rec, err := t.recordStepOn(ctx, f.name, f.pos, "failed", nil, &se, 1)
	if err != nil {
		return err
	}
	if rec.status != "failed" {
		return fmt.Errorf("workflow: step %q failed in this attempt, but another attempt of the turn recorded it %s first", f.name, rec.status)
	}
	return nil
}

// pendingWait is a wait that a turn suspended on, recorded as a step when
// its outcome commits.
type pendingWait struct {
	kind string // "delay", "signal" or "event"
	name string
	// after is a delay's duration, or the timeout of a wait on a message
	// (none when 0); until is a delay's due time, when given as one.
	after time.Duration
	until time.Time
	// on is the signal's name or the event's topic; filter, an event
	// wait's filter.
	on     string
	filter string
	// existing is true when the wait is already recorded and waiting.
	existing bool
	// position is the wait's position among the task's durable calls.
	position int
}

type spawn struct {
	key   string
	def   *definition
	input json.RawMessage
	// runID is the run of a detached child.
	runID uuid.UUID
	// position and call are the position and the kind ("go" or "map")
	// of the durable call that started the child.
	position int
	call     string
	// start is the braid.run.start span of a detached child's run, made
	// by the first batch that starts the run, and ended once the outcome
	// that starts it is recorded (outcome.endDetachedStarts).
	start trace.Span
}

// Context is the turn's context. It carries the turn's span and is
// cancelled when the turn must stop (timeout, cancellation, shutdown).
func (t *Task) Context() context.Context { return t.ctx }

// ID is the task's ID.
func (t *Task) ID() string { return t.id.String() }

// RunID is the ID of the task's run.
func (t *Task) RunID() string { return t.runID.String() }

// Key is the task's name within its parent: "root" for a run's root task,
// the name given to Go or Map (with "/i" per item) for a child.
func (t *Task) Key() string { return t.key }

// Attempt is the River attempt of the current turn, from 1.
func (t *Task) Attempt() int { return t.attempt }

// Logger returns a logger that names the run and the task.
func (t *Task) Logger() *slog.Logger { return t.logger }

// IdempotencyKey returns a key that is stable across every turn and retry
// of this task for the step named stepName (as recorded, with its "#n"
// suffix for a repeated name). Pass it to external systems so a step body
// that runs again after a crash does not repeat its side effect.
func (t *Task) IdempotencyKey(stepName string) string {
	return t.id.String() + "/" + stepName
}

// uniqueName gives a repeated name in one turn an automatic "#n" suffix,
// so durable calls in loops get distinct records: the n-th call of a name
// is named name#n. A name that an earlier call of the turn was given
// already, a name of the code's own that looks like a suffixed one ("a#2"
// after two calls of "a"), or the suffixed name that such a name took
// first, moves on to the next free suffix, so that no two calls of a turn
// ever share a record. The names depend only on the order of the calls,
// so every turn gives the same ones.
func (t *Task) uniqueName(name string) string {
	if t.taken == nil {
		t.taken = map[string]bool{}
	}
	t.names[name]++
	got := name
	if n := t.names[name]; n > 1 || t.taken[name] {
		n = max(n, 2)
		for got = fmt.Sprintf("%s#%d", name, n); t.taken[got]; got = fmt.Sprintf("%s#%d", name, n) {
			n++
		}
	}
	t.taken[got] = true
	return got
}

func (t *Task) suspend() error {
	t.suspended = true
	return ErrSuspended
}

func checkName(what, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("workflow: %s name is empty", what)
	case len(name) > 400:
		return fmt.Errorf("workflow: %s name is %d bytes, over the limit of 400", what, len(name))
	case !isText(name):
		return fmt.Errorf("workflow: %s name %q is not UTF-8 text without NUL characters", what, name)
	}
	return nil
}

// IdempotencyKeyMaxBytes is the longest idempotency key of a run or a
// signal, in bytes.
const IdempotencyKeyMaxBytes = 500

// checkIdempotencyKey checks a run's or a signal's idempotency key: text
// that PostgreSQL stores, of IdempotencyKeyMaxBytes at most. Its error
// names the key, or its length and the limit.
func checkIdempotencyKey(key string) error {
	switch {
	case len(key) > IdempotencyKeyMaxBytes:
		return fmt.Errorf("idempotency key is %d bytes, over the limit of %d", len(key), IdempotencyKeyMaxBytes)
	case !isText(key):
		return fmt.Errorf("idempotency key %q is not UTF-8 text without NUL characters", key)
	}
	return nil
}

// isText reports whether s is text that PostgreSQL's text type can hold:
// valid UTF-8 without NUL characters.
func isText(s string) bool { return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 }

// Delay suspends the task for d, a durable timer: the task's turn ends, and
// the delay processor gives it a new turn once d has passed, by the
// database's clock. It returns ErrSuspended until then, and nil on the turn
// after the delay fired.
func (t *Task) Delay(name string, d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("workflow: delay %q has a negative duration %s", name, d)
	}
	return t.delay(name, &pendingWait{kind: "delay", after: d})
}

// DelayUntil suspends the task until at, like Delay. at must be a time
// that PostgreSQL's timestamptz holds, from DelayUntilMin to DelayUntilMax.
func (t *Task) DelayUntil(name string, at time.Time) error {
	switch {
	case at.IsZero():
		return fmt.Errorf("workflow: delay %q has a zero time", name)
	case !queue.InTimeRange(at):
		return fmt.Errorf("workflow: delay %q is until %s, outside the times PostgreSQL stores (%s to %s)",
			name, at.UTC().Format(time.RFC3339), DelayUntilMin.Format(time.RFC3339), DelayUntilMax.Format(time.RFC3339))
	}
	return t.delay(name, &pendingWait{kind: "delay", until: at})
}

// DelayUntilMin and DelayUntilMax bound the time of Task.DelayUntil: the
// range of PostgreSQL's timestamptz, queue.TimeMin to queue.TimeMax.
var (
	DelayUntilMin = queue.TimeMin
	DelayUntilMax = queue.TimeMax
)

func (t *Task) delay(name string, d *pendingWait) error {
	if t.suspended {
		return ErrSuspended
	}
	if err := checkName("delay", name); err != nil {
		return err
	}
	name = t.uniqueName(name)
	d.name = name
	p, err := t.enter("delay", name)
	if err != nil {
		return err
	}
	d.position = p
	if rec := t.steps[name]; rec != nil {
		if rec.kind != "delay" {
			return fmt.Errorf("workflow: %q is recorded as a %s, not a delay; names of durable calls must be deterministic", name, rec.kind)
		}
		switch rec.status {
		case "fired":
			return nil
		case "cancelled":
			return fmt.Errorf("workflow: delay %q: %w", name, ErrCancelled)
		}
		d.existing = true
	}
	t.wait = d
	return t.suspend()
}

// errNotDeterministic reports a replay that diverged from the record.
var errNotDeterministic = errors.New("workflow: durable calls must be made in the same order with the same names on every turn")
