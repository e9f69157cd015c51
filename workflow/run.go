package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/braidflow/braid/queue"
)

// StartOpts are the options of starting a run. The zero value is valid.
type StartOpts struct {
	// ID is the run's ID, a UUID. Default: a new UUIDv7. Starting a run
	// with the ID of an existing run of the same workflow returns that run.
	ID string

	// IdempotencyKey returns the existing run when a run with the same key
	// exists, instead of starting another. At most 500 bytes.
	IdempotencyKey string

	// Queue overrides the definition's queue for the root task's turns.
	Queue string

	// Priority overrides the definition's priority for the root task's
	// turns.
	Priority queue.Priority
}

// Run is a handle on a run whose output is of type Out.
type Run[Out any] struct {
	eng *Engine
	// ID is the run's ID.
	ID string
	// Existing is true when Start returned a run that already existed
	// (same idempotency key or ID).
	Existing bool
}

// Start starts a run of w with input in. The run exists once Start
// returns.
func (w *Workflow[In, Out]) Start(ctx context.Context, eng *Engine, in In, opts *StartOpts) (*Run[Out], error) {
	var run *Run[Out]
	err := eng.withTx(ctx, func(tx pgx.Tx) error {
		var err error
		run, err = w.StartTx(ctx, tx, eng, in, opts)
		return err
	})
	return run, err
}

// StartTx starts a run of w inside tx: the run exists only if tx commits.
func (w *Workflow[In, Out]) StartTx(ctx context.Context, tx pgx.Tx, eng *Engine, in In, opts *StartOpts) (*Run[Out], error) {
	if _, err := eng.lookup(w.d.name); err != nil {
		return nil, err
	}
	input, err := eng.encode(fmt.Sprintf("input of workflow %q", w.d.name), in)
	if err != nil {
		return nil, err
	}
	id, existing, err := eng.startTx(ctx, tx, w.d, input, opts)
	if err != nil {
		return nil, err
	}
	return &Run[Out]{eng: eng, ID: id, Existing: existing}, nil
}

// StartWorkflowTx starts a run of the named workflow with a JSON input
// inside tx. It lets code that does not know the workflow's Go types (the
// scheduler, the CLI) start runs.
func (e *Engine) StartWorkflowTx(ctx context.Context, tx pgx.Tx, workflow string, input json.RawMessage, idempotencyKey string) (string, error) {
	d, err := e.lookup(workflow)
	if err != nil {
		return "", err
	}
	if len(input) == 0 {
		input = json.RawMessage("null")
	}
	if !json.Valid(input) {
		return "", &EncodeError{What: fmt.Sprintf("input of workflow %q", workflow), Err: errors.New("not valid JSON")}
	}
	if len(input) > e.cfg.MaxPayloadBytes {
		return "", &PayloadTooLargeError{What: fmt.Sprintf("input of workflow %q", workflow), Size: len(input), Limit: e.cfg.MaxPayloadBytes}
	}
	if hasNUL(input) {
		return "", &EncodeError{What: fmt.Sprintf("input of workflow %q", workflow), Err: errNUL}
	}
	id, _, err := e.startTx(ctx, tx, d, input, &StartOpts{IdempotencyKey: idempotencyKey})
	return id, err
}

func (e *Engine) startTx(ctx context.Context, tx pgx.Tx, d *definition, input json.RawMessage, opts *StartOpts) (string, bool, error) {
	var o StartOpts
	if opts != nil {
		o = *opts
	}
	if len(o.IdempotencyKey) > 500 {
		return "", false, fmt.Errorf("workflow: idempotency key is %d bytes, over the limit of 500", len(o.IdempotencyKey))
	}
	runID, err := newID(o.ID)
	if err != nil {
		return "", false, err
	}
	q, prio := d.queue, d.priority
	if o.Queue != "" {
		q = o.Queue
	}
	if o.Priority != 0 {
		if o.Priority < queue.PriorityCritical || o.Priority > queue.PriorityLow {
			return "", false, fmt.Errorf("workflow: priority %d is outside %d-%d", o.Priority, queue.PriorityCritical, queue.PriorityLow)
		}
		prio = o.Priority
	}

	ctx, span := e.tracer.Start(ctx, "braid.run.start", trace.WithAttributes(
		attribute.String("run.id", runID.String()),
		attribute.String("workflow", d.name),
	))
	defer span.End()
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)

	var key *string
	if o.IdempotencyKey != "" {
		key = &o.IdempotencyKey
	}
	// The run and its root task in one statement: the task is created only
	// when the run is.
	taskID := mustID()
	var created bool
	err = tx.QueryRow(ctx, `
		WITH run AS (
		    INSERT INTO braid_runs (id, workflow, status, input, idempotency_key, trace_parent, queue, priority)
		    VALUES ($1, $2, 'pending', $3, $4, $5, $6, $7)
		    ON CONFLICT DO NOTHING
		    RETURNING id
		)
		INSERT INTO braid_tasks (id, run_id, key, workflow, status, input, max_attempts, queue, priority)
		SELECT $8, run.id, 'root', $2, 'pending', $3, $9, $6, $7 FROM run
		RETURNING true`,
		runID, d.name, input, key, carrier.Get("traceparent"), q, int16(prio), taskID, d.maxAttempts).Scan(&created)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		span.RecordError(err)
		return "", false, fmt.Errorf("workflow: starting run: %w", err)
	}
	if !created {
		// The ID or the idempotency key exists: return that run.
		var existingID uuid.UUID
		var workflow string
		err := tx.QueryRow(ctx, `
			SELECT id, workflow FROM braid_runs
			WHERE id = $1 OR ($2::text IS NOT NULL AND idempotency_key = $2)
			ORDER BY (idempotency_key = $2) DESC NULLS LAST LIMIT 1`, runID, key).Scan(&existingID, &workflow)
		if err != nil {
			return "", false, fmt.Errorf("workflow: finding the existing run: %w", err)
		}
		if workflow != d.name {
			return "", false, fmt.Errorf("%w: run %s is of workflow %q, not %q", ErrIdempotencyConflict, existingID, workflow, d.name)
		}
		span.SetAttributes(attribute.Bool("run.existing", true))
		return existingID.String(), true, nil
	}

	if err := e.insertTurns(ctx, tx, []turn{{taskID: taskID, workflow: d.name, queue: q, priority: prio, maxAttempts: d.maxAttempts}}); err != nil {
		return "", false, err
	}
	e.metrics.runsStarted.Add(ctx, 1)
	return runID.String(), false, nil
}

func newID(s string) (uuid.UUID, error) {
	if s == "" {
		return mustID(), nil
	}
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, fmt.Errorf("workflow: run ID %q is not a UUID: %w", s, err)
	}
	return id, nil
}

func mustID() uuid.UUID {
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.New()
	}
	return id
}

// Result waits until the run finishes and returns its output, or its
// error: a *RunError (errors.Is(err, ErrCancelled) for a cancelled run). It
// waits on a notification, and polls as a fallback.
func (r *Run[Out]) Result(ctx context.Context) (Out, error) {
	var zero Out
	raw, err := r.eng.wait(ctx, r.ID)
	if err != nil {
		return zero, err
	}
	var out Out
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			return zero, &EncodeError{What: fmt.Sprintf("output of run %s", r.ID), Err: err}
		}
	}
	return out, nil
}

// Wait waits until the run finishes and returns its raw JSON output, or
// its error as Run.Result does.
func (e *Engine) Wait(ctx context.Context, runID string) (json.RawMessage, error) {
	return e.wait(ctx, runID)
}

func (e *Engine) wait(ctx context.Context, runID string) (json.RawMessage, error) {
	id, err := uuid.Parse(runID)
	if err != nil {
		return nil, fmt.Errorf("%w: %q is not a UUID", ErrRunNotFound, runID)
	}
	ch, unsubscribe := e.notifier.subscribe(id.String())
	defer unsubscribe()
	for {
		var (
			status, workflow string
			output, errJSON  []byte
		)
		err := e.pool.QueryRow(ctx, `SELECT status, workflow, output, error FROM braid_runs WHERE id = $1`, id).
			Scan(&status, &workflow, &output, &errJSON)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("%w: %s", ErrRunNotFound, runID)
		}
		if err != nil {
			return nil, fmt.Errorf("workflow: reading run %s: %w", runID, err)
		}
		switch status {
		case "completed":
			return output, nil
		case "failed", "cancelled":
			var se storedError
			_ = json.Unmarshal(errJSON, &se)
			if se.Message == "" && status == "cancelled" {
				se.Message = "cancelled"
			}
			return nil, &RunError{RunID: runID, Workflow: workflow, Status: status, Message: se.Message}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-ch:
		case <-time.After(e.cfg.ResultPollInterval):
		}
	}
}
