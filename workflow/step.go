package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/braidflow/braid/queue"
)

// StepOption configures one step.
type StepOption interface{ applyStep(*stepConfig) }

type stepConfig struct {
	retry *Retry
}

// Retry is a step's own retry policy. A failing step is retried by
// snoozing the turn for Backoff.Delay(attempt), without spending the task's
// River attempts. Once MaxAttempts attempts have failed, Step returns a
// *StepError to the workflow code, and replay returns the same error.
//
// Without a Retry, a failing step returns its error to the workflow code
// unrecorded; if the workflow returns it, River retries the turn and
// replay resumes at that step. If the workflow code goes on from the
// failure instead, making another durable call (it compensates, say) or
// completing, the failure is recorded first, and every later turn,
// River's retries of this one included, replays it: Step then returns a
// *StepError with the error's message, where the turn that ran the step
// got the step's own error. The *StepError matches, with errors.Is, the
// errors the step's error was (by type and message: see StepError.Is),
// so code that branches on sentinel errors takes the same path each time;
// errors.As cannot recover the step's own error types. Should the failure
// not be recorded (the turn's context had ended, or its deadline had come,
// as the step failed; or the record failed), the call fails, and so does
// the turn, whatever the code makes of it.
type Retry struct {
	MaxAttempts int
	Backoff     queue.Backoff
}

func (r Retry) applyStep(c *stepConfig) { c.retry = &r }

type stepKeyContext struct{}

// StepIdempotencyKey returns, inside a step's function, the key that
// Task.IdempotencyKey gives for that step.
func StepIdempotencyKey(ctx context.Context) string {
	s, _ := ctx.Value(stepKeyContext{}).(string)
	return s
}

// Step runs fn once and records its result under name, memoized by (task,
// name): every later turn returns the recorded result without running fn.
// A repeated name in one task gets an automatic "#n" suffix, so steps in
// loops work; a name that another call of the turn was given already
// takes the next free suffix (see the package documentation). The first recorded result wins; a turn that finishes the same
// step later gets the winner's result.
func Step[T any](t *Task, name string, fn func(ctx context.Context) (T, error), opts ...StepOption) (T, error) {
	var zero T
	if t.suspended {
		return zero, ErrSuspended
	}
	if err := checkName("step", name); err != nil {
		return zero, err
	}
	if fn == nil {
		return zero, fmt.Errorf("workflow: step %q has a nil function", name)
	}
	var cfg stepConfig
	for _, o := range opts {
		o.applyStep(&cfg)
	}
	if cfg.retry != nil && cfg.retry.MaxAttempts < 1 {
		return zero, fmt.Errorf("workflow: step %q: Retry.MaxAttempts %d is below 1", name, cfg.retry.MaxAttempts)
	}
	name = t.uniqueName(name)
	pos, err := t.enter("step", name)
	if err != nil {
		return zero, err
	}

	attempt := 1
	if rec := t.steps[name]; rec != nil {
		if rec.kind != "step" {
			return zero, fmt.Errorf("workflow: %q is recorded as a %s, not a step: %w", name, rec.kind, errNotDeterministic)
		}
		switch rec.status {
		case "completed":
			return decodeStep[T](name, rec.output)
		case "failed":
			return zero, &StepError{Step: name, Attempts: rec.attempts, Message: rec.err.Message, causes: rec.err.Causes}
		case "retrying":
			attempt = rec.attempts + 1
		}
	}

	if t.checking {
		return zero, t.suspend() // a replay runs no step body
	}
	// A turn whose context ended (cancelled run, timeout, lost job, Stop)
	// starts no more step bodies, and one whose task was cancelled since
	// its last step stops at the record of the next (see recordStep).
	// Cancel waits for the turns it cancelled to end.
	if err := t.ctx.Err(); err != nil {
		return zero, fmt.Errorf("workflow: step %q not started: %w", name, context.Cause(t.ctx))
	}
	out, runErr := runStep(t, name, attempt, fn)
	if runErr == nil {
		raw, err := t.eng.encode(fmt.Sprintf("output of step %q", name), out)
		if err != nil {
			return zero, err
		}
		rec, err := t.recordStep(name, pos, "completed", raw, nil, attempt)
		if err != nil {
			return zero, t.halt(err)
		}
		return replayStep[T](name, rec)
	}
	if errors.Is(runErr, ErrSuspended) {
		return zero, runErr
	}
	if cfg.retry == nil {
		t.failedStep, t.failedStepErr = name, runErr
		t.unrecorded = &stepFailure{name: name, pos: pos, err: runErr, ended: t.ended()}
		return zero, runErr
	}
	stored := t.eng.stepError(runErr, attempt)
	se := &stored
	if attempt < cfg.retry.MaxAttempts {
		if _, err := t.recordStep(name, pos, "retrying", nil, se, attempt); err != nil {
			return zero, t.halt(err)
		}
		t.snoozing = true
		t.snooze = cfg.retry.Backoff.Delay(attempt)
		t.logger.InfoContext(t.ctx, "workflow: step failed; retrying it", "step", name, "attempt", attempt, "in", t.snooze, "error", runErr)
		return zero, t.suspend()
	}
	rec, err := t.recordStep(name, pos, "failed", nil, se, attempt)
	if err != nil {
		return zero, t.halt(err)
	}
	return replayStep[T](name, rec)
}

// halt makes err, the failure of a call's record, the error of every
// later durable call and of the turn, whatever the code makes of it: the
// call left nothing at its position, so code that went on from the error
// (a compensation, say) would record its path where the next turn, which
// makes the call again, may take another (see recordHandledFailure).
func (t *Task) halt(err error) error {
	if t.halted == nil {
		t.halted = err
	}
	return err
}

// replayStep returns the result of the step name as its final record rec
// holds it: its output, or its *StepError. A record that is not final
// (recordStep returns none) is an error, never a zero value.
func replayStep[T any](name string, rec *stepRecord) (T, error) {
	var zero T
	switch rec.status {
	case "completed":
		return decodeStep[T](name, rec.output)
	case "failed":
		return zero, &StepError{Step: name, Attempts: rec.attempts, Message: rec.err.Message, causes: rec.err.Causes}
	}
	return zero, fmt.Errorf("%w (step %q is recorded as %s, not as a result)", errTaskNotRunning, name, rec.status)
}

func decodeStep[T any](name string, raw json.RawMessage) (T, error) {
	var out T
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			return out, &EncodeError{What: fmt.Sprintf("recorded output of step %q", name), Err: err}
		}
	}
	return out, nil
}

// runStep runs one step body under its span. A panic becomes an error.
func runStep[T any](t *Task, name string, attempt int, fn func(ctx context.Context) (T, error)) (out T, err error) {
	ctx, span := t.eng.tracer.Start(t.ctx, "braid.step "+name, trace.WithAttributes(
		attribute.String("run.id", t.runID.String()),
		attribute.String("task.id", t.id.String()),
		attribute.String("workflow", t.workflow),
		attribute.String("step", name),
		attribute.Int("step.attempt", attempt),
	))
	ctx = context.WithValue(ctx, stepKeyContext{}, t.IdempotencyKey(name))
	start := time.Now()
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: string(debug.Stack())}
		}
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		t.eng.metrics.stepDuration.Record(ctx, time.Since(start).Seconds())
		span.End()
	}()
	return fn(ctx)
}

func nullJSON(b json.RawMessage) any {
	if b == nil {
		return nil
	}
	return []byte(b)
}
