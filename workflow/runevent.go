package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// A run publishes state that callers outside it read: SetEvent sets a
// value under a key, once per durable call, and GetEvent reads the
// current value, waiting for it when it is not set yet. Each run keeps one
// value per key, the last set (table braid_run_events).

// RunEventChannel is the PostgreSQL NOTIFY channel on which SetEvent
// announces that a run set an event, with the run's ID as the payload.
// GetEvent waits on it; operator tools may LISTEN too.
const RunEventChannel = "braid_run_event"

const channelRunEvent = RunEventChannel

// MaxEventKeyBytes is the longest key of a run's event, in bytes.
const MaxEventKeyBytes = 200

// stepKindSetEvent is the kind of the step that records a SetEvent call.
const stepKindSetEvent = "set_event"

// checkEventKey refuses a key that braid_run_events cannot keep, naming it
// and the limit.
func checkEventKey(key string) error {
	switch {
	case key == "":
		return errors.New("workflow: event key is empty")
	case len(key) > MaxEventKeyBytes:
		return fmt.Errorf("workflow: event key beginning %q is %d bytes, over the limit of %d bytes", key[:32], len(key), MaxEventKeyBytes)
	case !isText(key):
		return fmt.Errorf("workflow: event key %q is not UTF-8 text without NUL characters", key)
	}
	return nil
}

// SetEvent sets the run's event key to value, for callers outside the run
// to read with GetEvent or Run.GetEvent: the run's published state, such
// as its progress or an intermediate result. Each run keeps one value per
// key; the last one set wins.
//
// SetEvent is a durable call, recorded like a step under the name
// "set-event:"+key (with a "#n" suffix when repeated in one task): a later
// turn that replays it sets nothing again, so an event set earlier in the
// code never overwrites one set later. The value is written in one
// transaction with its record, only while the task still runs, so a turn
// whose task was cancelled sets nothing. value is encoded as JSON, within
// Config.MaxPayloadBytes; a key is 1 to MaxEventKeyBytes bytes.
func SetEvent(t *Task, key string, value any) error {
	if t.suspended {
		return ErrSuspended
	}
	if err := checkEventKey(key); err != nil {
		return err
	}
	name := t.uniqueName("set-event:" + key)
	pos, err := t.enter(stepKindSetEvent, name)
	if err != nil {
		return err
	}
	if rec := t.steps[name]; rec != nil {
		if rec.kind != stepKindSetEvent {
			return fmt.Errorf("workflow: %q is recorded as a %s, not an event set: %w", name, rec.kind, errNotDeterministic)
		}
		return nil
	}
	if t.checking {
		return t.suspend() // a replay writes nothing
	}
	// As for a step: a turn whose context ended sets nothing more.
	if err := t.ctx.Err(); err != nil {
		return fmt.Errorf("workflow: event %q not set: %w", key, context.Cause(t.ctx))
	}
	raw, err := t.eng.encode(fmt.Sprintf("value of event %q", key), value)
	if err != nil {
		return err
	}
	if err := t.recordEvent(name, pos, key, raw); err != nil {
		return t.halt(err)
	}
	return nil
}

// recordEvent records the SetEvent call name and sets the run's event key
// to value, in one transaction. The record is fenced, as recordStep's, on
// the task still running, under a share lock of the task row, and on the
// turn's own job still running its attempt: nothing is set after Cancel
// commits, nor by an attempt that lost its job. Only the transaction that inserts the record
// writes the value and notifies the run's waiters; a turn that finds the
// call recorded by another goes on without writing.
func (t *Task) recordEvent(name string, position int, key string, value json.RawMessage) error {
	job, attempt, at := t.jobAttempt()
	err := t.eng.withTx(t.ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(t.ctx, `
			INSERT INTO braid_steps (task_id, name, kind, status, output, attempts, started_at, finished_at, position)
			SELECT $1, $2, '`+stepKindSetEvent+`', 'completed', $3, 1, braid_now(), braid_now(), $4
			  FROM braid_tasks WHERE id = $1 AND status IN ('pending', 'running')
			   AND `+attemptRunsSQL("$5::bigint", "$6::int", "$7::timestamptz")+`
			   FOR SHARE
			ON CONFLICT (task_id, name) DO NOTHING`,
			t.id, name, []byte(value), position, job, attempt, at)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			// Another turn recorded this call first, and set the event;
			// or the task is no longer running, and nothing is set.
			var kind string
			err := tx.QueryRow(t.ctx, `SELECT kind FROM braid_steps WHERE task_id = $1 AND name = $2`, t.id, name).Scan(&kind)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				return errTaskNotRunning
			case err != nil:
				return err
			case kind != stepKindSetEvent:
				return fmt.Errorf("%q is recorded as a %s, not an event set: %w", name, kind, errNotDeterministic)
			}
			return nil
		}
		if _, err := tx.Exec(t.ctx, `
			INSERT INTO braid_run_events (run_id, key, value, task_id) VALUES ($1, $2, $3, $4)
			ON CONFLICT (run_id, key) DO UPDATE
			   SET value = EXCLUDED.value, task_id = EXCLUDED.task_id, updated_at = braid_now()`,
			t.runID, key, []byte(value), t.id); err != nil {
			return err
		}
		_, err = tx.Exec(t.ctx, `SELECT pg_notify($1, $2)`, channelRunEvent, t.runID.String())
		return err
	})
	if err != nil {
		return fmt.Errorf("workflow: setting event %q: %w", key, err)
	}
	t.steps[name] = &stepRecord{kind: stepKindSetEvent, status: "completed", output: value, attempts: 1}
	return nil
}

// GetEvent returns the current value of the run's event key, decoded into
// T. When the run has not set it yet, GetEvent waits up to timeout for it:
// on a notification, with a poll every Config.ResultPollInterval as a
// fallback, holding no pool connection while it waits. A timeout of 0
// reads once and does not wait.
//
// It fails with an error wrapping ErrEventNotSet when the key is not set
// within the timeout, or at once when the run finished without setting it
// (a finished run sets nothing more); with ErrRunNotFound for an unknown
// run or an ID that is not a UUID; and with ctx's error when ctx ends
// first.
func GetEvent[T any](ctx context.Context, e *Engine, runID, key string, timeout time.Duration) (T, error) {
	var out T
	if e == nil {
		return out, errors.New("workflow: GetEvent: the engine is nil")
	}
	raw, err := e.getEvent(ctx, runID, key, timeout)
	if err != nil {
		return out, err
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		var zero T
		return zero, &EncodeError{What: fmt.Sprintf("value of event %q of run %s", key, runID), Err: err}
	}
	return out, nil
}

// GetEvent reads the run's event key into out, a non-nil pointer, as
// json.Unmarshal does; it waits and fails as the function GetEvent does.
// (A method cannot have type parameters of its own, hence out.)
func (r *Run[Out]) GetEvent(ctx context.Context, key string, timeout time.Duration, out any) error {
	if v := reflect.ValueOf(out); v.Kind() != reflect.Pointer || v.IsNil() {
		return fmt.Errorf("workflow: GetEvent of event %q: out must be a non-nil pointer, not %T", key, out)
	}
	raw, err := r.eng.getEvent(ctx, r.ID, key, timeout)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return &EncodeError{What: fmt.Sprintf("value of event %q of run %s", key, r.ID), Err: err}
	}
	return nil
}

// getEvent returns the raw value of the run's event key, waiting up to
// timeout for it; see GetEvent.
func (e *Engine) getEvent(ctx context.Context, runID, key string, timeout time.Duration) (json.RawMessage, error) {
	if timeout < 0 {
		return nil, fmt.Errorf("workflow: GetEvent of event %q: timeout %s is negative", key, timeout)
	}
	if err := checkEventKey(key); err != nil {
		return nil, err
	}
	id, err := uuid.Parse(runID)
	if err != nil {
		return nil, fmt.Errorf("%w: run ID %q is not a UUID", ErrRunNotFound, runID)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var wake <-chan struct{}
	if timeout > 0 {
		// Subscribed before the first read, so that a value set after it
		// wakes the wait. The run's end wakes it too: a finished run sets
		// nothing more.
		ch, unsubscribe := e.notifier.subscribeOn(id.String(), channelRunEvent, channelRunFinished)
		defer unsubscribe()
		wake = ch
	}
	deadline := time.Now().Add(timeout)
	for {
		var (
			status string
			value  []byte
		)
		err := e.pool.QueryRow(ctx, `
			SELECT r.status, ev.value FROM braid_runs r
			  LEFT JOIN braid_run_events ev ON ev.run_id = r.id AND ev.key = $2
			 WHERE r.id = $1`, id, key).Scan(&status, &value)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("%w: %s", ErrRunNotFound, runID)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("workflow: reading event %q of run %s: %w", key, runID, err)
		}
		if value != nil {
			return value, nil
		}
		switch status {
		case "completed", "failed", "cancelled":
			return nil, fmt.Errorf("%w: run %s %s without setting event %q", ErrEventNotSet, runID, status, key)
		}
		left := time.Until(deadline)
		if left <= 0 {
			if timeout == 0 {
				return nil, fmt.Errorf("%w: run %s has not set event %q", ErrEventNotSet, runID, key)
			}
			return nil, fmt.Errorf("%w: run %s did not set event %q within %s", ErrEventNotSet, runID, key, timeout)
		}
		poll := time.NewTimer(min(left, e.cfg.ResultPollInterval))
		select {
		case <-ctx.Done():
			poll.Stop()
			return nil, ctx.Err()
		case <-wake:
		case <-poll.C:
		}
		poll.Stop()
	}
}

// RunEventInfo is an event a run set with SetEvent: its key's current
// value, the task that set it and when.
type RunEventInfo struct {
	Key       string          `json:"key"`
	Value     json.RawMessage `json:"value"`
	TaskID    string          `json:"task_id"`
	UpdatedAt time.Time       `json:"updated_at"`
}

// inspectEvents reads the events the run set, sorted by key.
func inspectEvents(ctx context.Context, db Querier, runID uuid.UUID, run *RunInfo) error {
	rows, err := db.Query(ctx, `
		SELECT key, value, task_id, updated_at FROM braid_run_events
		 WHERE run_id = $1 ORDER BY key COLLATE "C"`, runID)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			ev     RunEventInfo
			value  []byte
			taskID uuid.UUID
		)
		if err := rows.Scan(&ev.Key, &value, &taskID, &ev.UpdatedAt); err != nil {
			return err
		}
		ev.Value, ev.TaskID = value, taskID.String()
		run.Events = append(run.Events, ev)
	}
	return rows.Err()
}
