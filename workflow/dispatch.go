package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/braidflow/braid/queue"
)

// StartByNameOpts are the options of StartByName. The zero value is valid.
type StartByNameOpts struct {
	// ID is the run's ID, a UUID. Default: a new UUIDv7. As with
	// StartOpts, an existing run with this ID is returned.
	ID string

	// IdempotencyKey returns the existing run when a run with the same key
	// exists, instead of starting another. At most 500 bytes.
	IdempotencyKey string

	// Queue overrides the queue of the root task's turns.
	Queue string

	// Priority overrides the priority of the root task's turns.
	Priority queue.Priority

	// Timeout sets the run's deadline, from its start, as
	// StartOpts.Timeout does. Default: the definition's WithRunTimeout
	// when this engine registers the workflow. An engine that does not
	// register it cannot know that option, and no earlier run tells it (a
	// run's timeout may be its caller's own): such a run has a deadline
	// only when Timeout gives one. Negative is an error.
	Timeout time.Duration

	// Force starts a run of a workflow this engine does not register and
	// the database has never seen a run of, with the defaults of Define:
	// queue "default", queue.PriorityNormal and MaxAttemptsDefault. Without
	// it such a name is refused with an error matching ErrUnknownWorkflow,
	// since a misspelt name would start a run that no process ever works.
	Force bool
}

// StartedRun is the run StartByName started or found.
type StartedRun struct {
	// ID is the run's ID.
	ID string `json:"id"`
	// Workflow is the workflow's name.
	Workflow string `json:"workflow"`
	// Existing is true when the run existed already (same ID or
	// idempotency key) and none was started.
	Existing bool `json:"existing"`
}

// StartByName starts a run of the workflow named name with a JSON input
// (nil means null), whether or not this engine registers it. It serves
// processes that start runs for others, such as an admin server or a CLI,
// whose engine has none of the services' definitions.
//
// When name is registered with this engine, it starts the run as
// StartWorkflowTx does. Otherwise the root task's turns take the queue,
// priority and max attempts of the root task of the workflow's most recent
// run, so that the processes that have the definition, and work that
// queue, run it; opts.Queue and opts.Priority still override them, and
// the run has a deadline only when opts.Timeout gives one. A name of which the
// database holds no run is refused with an error matching
// ErrUnknownWorkflow, unless opts.Force.
//
// A DAG started by a process that does not register it has its root task
// only, and the run is pending: the nodes are created by the root's first
// turn, in a process that knows the DAG, as they are created with the root
// otherwise, and the root then waits for them. From then on the run shows
// as a DAG run started by its definition does: waiting while its nodes
// run.
//
// The input is checked as StartWorkflowTx checks it: valid JSON, within
// the payload cap, without NUL characters.
func (e *Engine) StartByName(ctx context.Context, name string, input json.RawMessage, opts *StartByNameOpts) (*StartedRun, error) {
	var run *StartedRun
	err := e.withTx(ctx, func(tx pgx.Tx) error {
		var err error
		run, err = e.StartByNameTx(ctx, tx, name, input, opts)
		return err
	})
	return run, err
}

// StartByNameTx is StartByName inside tx: the run exists only if tx
// commits.
func (e *Engine) StartByNameTx(ctx context.Context, tx pgx.Tx, name string, input json.RawMessage, opts *StartByNameOpts) (*StartedRun, error) {
	var o StartByNameOpts
	if opts != nil {
		o = *opts
	}
	if name == "" {
		return nil, fmt.Errorf("%w: the workflow name is empty", ErrUnknownWorkflow)
	}
	if len(name) > 200 {
		return nil, fmt.Errorf("%w: the workflow name is %d bytes, over the limit of 200", ErrUnknownWorkflow, len(name))
	}
	what := fmt.Sprintf("input of workflow %q", name)
	if len(input) == 0 {
		input = json.RawMessage("null")
	}
	if len(input) > e.cfg.MaxPayloadBytes {
		return nil, &PayloadTooLargeError{What: what, Size: len(input), Limit: e.cfg.MaxPayloadBytes}
	}
	if err := queue.CheckJSONB(input); err != nil {
		return nil, &EncodeError{What: what, Err: err}
	}
	d, err := e.lookup(name)
	if err != nil {
		d, err = e.seenDefinition(ctx, tx, name, o.Force)
		if err != nil {
			return nil, err
		}
	}
	id, existing, err := e.startTx(ctx, tx, d, input, &StartOpts{
		ID: o.ID, IdempotencyKey: o.IdempotencyKey, Queue: o.Queue, Priority: o.Priority, Timeout: o.Timeout,
	}, nil)
	if err != nil {
		return nil, err
	}
	return &StartedRun{ID: id, Workflow: name, Existing: existing}, nil
}

// seenDefinition builds the definition of a workflow this engine does not
// register, for starting runs only (it has no function): the turn options
// of the root task of its most recent run, or Define's defaults when force
// is set and it has none. It has no run timeout: a run's timeout may be
// its caller's own (StartOpts.Timeout), not the definition's. Its runs are
// started as a function's, root task only, even when the workflow is a
// DAG: the root's first turn creates the nodes (dagSpec.result).
func (e *Engine) seenDefinition(ctx context.Context, tx pgx.Tx, name string, force bool) (*definition, error) {
	d := &definition{name: name, maxAttempts: MaxAttemptsDefault, queue: "default", priority: queue.PriorityNormal}
	var (
		q           string
		prio        int16
		maxAttempts int
	)
	err := tx.QueryRow(ctx, `
		SELECT t.queue, t.priority, t.max_attempts
		  FROM braid_runs r JOIN braid_tasks t ON t.run_id = r.id AND t.parent_task_id IS NULL
		 WHERE r.workflow = $1
		 ORDER BY r.created_at DESC LIMIT 1`, name).Scan(&q, &prio, &maxAttempts)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		if !force {
			return nil, fmt.Errorf("%w: %q is not registered with this engine, and the database holds no run of it", ErrUnknownWorkflow, name)
		}
		return d, nil
	case err != nil:
		return nil, fmt.Errorf("workflow: reading the turn options of workflow %q: %w", name, err)
	}
	d.queue, d.priority, d.maxAttempts = q, queue.Priority(prio), maxAttempts
	return d, nil
}
