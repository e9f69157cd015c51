package workflow

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// ErrWrongWorkflow is returned by Workflow.Get and Workflow.GetByKey for a
// run of another workflow: its output is not of the handle's type.
var ErrWrongWorkflow = errors.New("workflow: the run is of another workflow")

// Get returns a typed handle on the run runID of w, wherever it was
// started: by this process, another one, a schedule or the CLI. Its Result
// is typed, so a caller never handles the run's raw JSON. It fails with
// ErrRunNotFound for an unknown run and ErrWrongWorkflow for a run of
// another workflow.
//
// A run's ID is a UUID that braid gives it (or StartOpts.ID sets). To find
// a run by a business identifier, start it with an idempotency key and use
// GetByKey.
func (w *Workflow[In, Out]) Get(ctx context.Context, eng *Engine, runID string) (*Run[Out], error) {
	id, err := uuid.Parse(runID)
	if err != nil {
		return nil, fmt.Errorf("%w: %q is not a UUID", ErrRunNotFound, runID)
	}
	return w.get(ctx, eng, `SELECT id, workflow FROM braid_runs WHERE id = $1`, id, runID)
}

// GetByKey returns a typed handle on the run of w that was started with
// the idempotency key key (StartOpts.IdempotencyKey), wherever it was
// started. An idempotency key is the business identifier of a run ("the
// digest of user 42 for Monday"); it holds while the run is kept (see
// Config.Retention). It fails with ErrRunNotFound when no kept run has the
// key, and ErrWrongWorkflow when the run is of another workflow.
func (w *Workflow[In, Out]) GetByKey(ctx context.Context, eng *Engine, key string) (*Run[Out], error) {
	return w.get(ctx, eng, `SELECT id, workflow FROM braid_runs WHERE idempotency_key = $1`, key, "with idempotency key "+key)
}

func (w *Workflow[In, Out]) get(ctx context.Context, eng *Engine, query string, arg any, what string) (*Run[Out], error) {
	var (
		id       uuid.UUID
		workflow string
	)
	err := eng.pool.QueryRow(ctx, query, arg).Scan(&id, &workflow)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s", ErrRunNotFound, what)
	}
	if err != nil {
		return nil, fmt.Errorf("workflow: reading run %s: %w", what, err)
	}
	if workflow != w.d.name {
		return nil, fmt.Errorf("%w: run %s is of workflow %q, not %q", ErrWrongWorkflow, id, workflow, w.d.name)
	}
	return &Run[Out]{eng: eng, ID: id.String(), Existing: true}, nil
}

// Cancel cancels the run; see Engine.Cancel.
func (r *Run[Out]) Cancel(ctx context.Context) error { return r.eng.Cancel(ctx, r.ID) }

// Retry resumes the run once it failed or was cancelled; see
// Engine.Retry.
func (r *Run[Out]) Retry(ctx context.Context) error { return r.eng.Retry(ctx, r.ID) }

// Signal sends the run the signal name with payload; see Engine.Signal.
func (r *Run[Out]) Signal(ctx context.Context, name string, payload any, opts *SignalOpts) error {
	return r.eng.Signal(ctx, r.ID, name, payload, opts)
}
