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
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/braidflow/braid/queue"
)

// StartOpts are the options of starting a run. The zero value is valid.
type StartOpts struct {
	// ID is the run's ID, a UUID. Default: a new UUIDv7. Starting a run
	// with the ID of an existing run of the same workflow returns that run.
	// It is braid's identifier, not a business one: name a run by what it
	// is for with IdempotencyKey.
	ID string

	// IdempotencyKey is the run's business identifier ("digest:42:monday"):
	// starting a run with the key of an existing run returns that run
	// instead of starting another, and Workflow.GetByKey finds the run by
	// it, from any process. At most 500 bytes. It holds while the run is
	// kept (Config.Retention).
	IdempotencyKey string

	// Queue overrides the definition's queue for the root task's turns.
	// It must be a name River accepts (queue.ValidateQueueName); another
	// fails the start before anything is written.
	Queue string

	// Priority overrides the definition's priority for the root task's
	// turns.
	Priority queue.Priority

	// Timeout gives the run a durable deadline: Timeout after the run
	// starts, by the database's clock, the run is cancelled with every
	// task, child, DAG node and delay in it, and Result returns a
	// *TimeoutError (which also matches ErrCancelled). The deadline is
	// stored with the run, so it holds across restarts like a delay. It
	// overrides the definition's WithRunTimeout. Default 0: the
	// definition's, if any, else no deadline. A negative Timeout is an
	// error.
	Timeout time.Duration
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
	var (
		run *Run[Out]
		fin txCounts
	)
	err := eng.withTx(ctx, func(tx pgx.Tx) error {
		var err error
		fin = txCounts{}
		run, err = w.startIn(ctx, tx, eng, in, opts, &fin)
		return err
	})
	if err == nil {
		fin.record(ctx, eng.metrics)
	}
	return run, err
}

// StartTx starts a run of w inside tx: the run exists only if tx commits.
func (w *Workflow[In, Out]) StartTx(ctx context.Context, tx pgx.Tx, eng *Engine, in In, opts *StartOpts) (*Run[Out], error) {
	return w.startIn(ctx, tx, eng, in, opts, nil)
}

// startIn is StartTx, counting the run it starts in fin, for its caller
// to record once tx has committed; with fin nil, it is counted at once.
func (w *Workflow[In, Out]) startIn(ctx context.Context, tx pgx.Tx, eng *Engine, in In, opts *StartOpts, fin *txCounts) (*Run[Out], error) {
	if _, err := eng.lookup(w.d.name); err != nil {
		return nil, err
	}
	input, err := eng.encode(fmt.Sprintf("input of workflow %q", w.d.name), in)
	if err != nil {
		return nil, err
	}
	id, existing, err := eng.startTx(ctx, tx, w.d, input, opts, fin)
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
	if len(input) > e.cfg.MaxPayloadBytes {
		return "", &PayloadTooLargeError{What: fmt.Sprintf("input of workflow %q", workflow), Size: len(input), Limit: e.cfg.MaxPayloadBytes}
	}
	if err := queue.CheckJSONB(input); err != nil {
		return "", &EncodeError{What: fmt.Sprintf("input of workflow %q", workflow), Err: err}
	}
	id, _, err := e.startTx(ctx, tx, d, input, &StartOpts{IdempotencyKey: idempotencyKey}, nil)
	return id, err
}

// StartManyParams is one run to start with StartMany or StartManyTx.
type StartManyParams[In any] struct {
	// Input is the run's input.
	Input In
	// Opts are the run's options; nil for the defaults.
	Opts *StartOpts
}

// StartMany starts one run of w per params, in one transaction and a
// handful of statements whatever their number, as River's InsertMany
// inserts jobs. Runs that exist already (same ID or idempotency key) are
// returned with Existing set.
func (w *Workflow[In, Out]) StartMany(ctx context.Context, eng *Engine, params []StartManyParams[In]) ([]*Run[Out], error) {
	var (
		runs []*Run[Out]
		fin  txCounts
	)
	err := eng.withTx(ctx, func(tx pgx.Tx) error {
		var err error
		fin = txCounts{}
		runs, err = w.startManyIn(ctx, tx, eng, params, &fin)
		return err
	})
	if err == nil {
		fin.record(ctx, eng.metrics)
	}
	return runs, err
}

// StartManyTx starts one run of w per params inside tx: the runs exist
// only if tx commits.
func (w *Workflow[In, Out]) StartManyTx(ctx context.Context, tx pgx.Tx, eng *Engine, params []StartManyParams[In]) ([]*Run[Out], error) {
	return w.startManyIn(ctx, tx, eng, params, nil)
}

// startManyIn is StartManyTx, counting the runs it starts in fin as
// startIn does.
func (w *Workflow[In, Out]) startManyIn(ctx context.Context, tx pgx.Tx, eng *Engine, params []StartManyParams[In], fin *txCounts) ([]*Run[Out], error) {
	if _, err := eng.lookup(w.d.name); err != nil {
		return nil, err
	}
	starts := make([]start, len(params))
	for i, p := range params {
		input, err := eng.encode(fmt.Sprintf("input of workflow %q (run %d of %d)", w.d.name, i+1, len(params)), p.Input)
		if err != nil {
			return nil, err
		}
		starts[i] = start{input: input, opts: p.Opts}
	}
	if err := eng.startManyTx(ctx, tx, w.d, starts, fin); err != nil {
		return nil, err
	}
	runs := make([]*Run[Out], len(starts))
	for i, st := range starts {
		runs[i] = &Run[Out]{eng: eng, ID: st.id, Existing: st.existing}
	}
	return runs, nil
}

// start is one run to start, and, once started, its ID.
type start struct {
	input    json.RawMessage
	opts     *StartOpts
	id       string
	existing bool
	// by is, for a detached child, the outcome of the turn that started
	// it.
	by *outcome
	// span is, when set, the run's braid.run.start span, which its maker
	// ends; queueRuns makes and ends one for a start without it.
	span trace.Span
	// link is, for a detached child, the link of its first turns: to the
	// turn that started it.
	link *turnLink
}

func (e *Engine) startTx(ctx context.Context, tx pgx.Tx, d *definition, input json.RawMessage, opts *StartOpts, fin *txCounts) (string, bool, error) {
	st := []start{{input: input, opts: opts}}
	if err := e.startManyTx(ctx, tx, d, st, fin); err != nil {
		return "", false, err
	}
	return st[0].id, st[0].existing, nil
}

// startManyTx starts runs of d, each with its root task, in two statements
// and one insert of their first turns. A run whose ID or idempotency key
// exists is not started: its ID is returned, with existing set. The runs
// it starts are counted in fin, for the caller to record once tx has
// committed, or at once with fin nil: a caller's transaction (StartTx),
// whose commit the engine does not see.
func (e *Engine) startManyTx(ctx context.Context, tx pgx.Tx, d *definition, starts []start, fin *txCounts) error {
	turns, err := e.createRunsTx(ctx, tx, d, starts, fin)
	if err != nil {
		return err
	}
	return e.insertTurns(ctx, tx, turns)
}

// createRunsTx creates the runs of startManyTx, and returns their first
// turns for the caller to insert: startManyTx, or a batch that starts
// detached children and claims their turns like its other new ones.
func (e *Engine) createRunsTx(ctx context.Context, tx pgx.Tx, d *definition, starts []start, fin *txCounts) ([]turn, error) {
	b := &pgx.Batch{}
	c, err := e.queueRuns(ctx, b, d, starts)
	if err != nil || c == nil {
		return nil, err
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		err = fmt.Errorf("workflow: starting %d runs: %w", len(starts), err)
		c.endSpans(err)
		return nil, err
	}
	counts := fin
	if counts == nil {
		counts = &txCounts{}
	}
	turns, err := c.finish(ctx, tx, counts)
	if err != nil {
		return nil, err
	}
	if fin == nil {
		counts.record(ctx, e.metrics)
	}
	return turns, nil
}

// runsCreation is the creation of runs that queueRuns queued: once its
// statement has run, finish completes it.
type runsCreation struct {
	e       *Engine
	d       *definition
	starts  []start
	created []uuid.UUID
	runIDs  []uuid.UUID
	taskIDs []uuid.UUID
	inputs  []string
	keys    []*string
	timeout []int64
	turns   []turn
	index   map[uuid.UUID]int
	// spans are the braid.run.start spans that queueRuns made (nil for a
	// start that brought its own), ended by finish once it knows which
	// runs it created.
	spans []trace.Span
}

// endSpans ends the braid.run.start spans that queueRuns made, with err,
// when not nil, as their status.
func (c *runsCreation) endSpans(err error) {
	for i, span := range c.spans {
		if span == nil {
			continue
		}
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
		c.spans[i] = nil
	}
}

// queueRuns queues on b the statement that creates the runs of starts of
// d with their root tasks, so that a batch of outcomes sends it with its
// other statements. It returns nil for no starts.
func (e *Engine) queueRuns(ctx context.Context, b *pgx.Batch, d *definition, starts []start) (_ *runsCreation, err error) {
	n := len(starts)
	if n == 0 {
		return nil, nil
	}
	spans := make([]trace.Span, n)
	defer func() {
		if err != nil {
			(&runsCreation{spans: spans}).endSpans(err)
		}
	}()
	var (
		runIDs, taskIDs = make([]uuid.UUID, n), make([]uuid.UUID, n)
		inputs          = make([]string, n)
		keys            = make([]*string, n)
		traces          = make([]string, n)
		queues          = make([]string, n)
		prios           = make([]int16, n)
		timeouts        = make([]int64, n) // microseconds; 0 for no deadline
		turns           = make([]turn, 0, n)
		index           = make(map[uuid.UUID]int, n)
	)
	for i := range starts {
		var o StartOpts
		if starts[i].opts != nil {
			o = *starts[i].opts
		}
		if err := checkIdempotencyKey(o.IdempotencyKey); err != nil {
			return nil, fmt.Errorf("workflow: %w", err)
		}
		runID, err := newID(o.ID)
		if err != nil {
			return nil, err
		}
		q, prio := d.queue, d.priority
		if o.Queue != "" {
			// River refuses the turn of a bad queue name only once the
			// run is written: refuse it before anything is.
			if err := queue.ValidateQueueName(o.Queue); err != nil {
				return nil, fmt.Errorf("workflow: starting a run of %q: %w", d.name, err)
			}
			q = o.Queue
		}
		if o.Priority != 0 {
			if o.Priority < queue.PriorityCritical || o.Priority > queue.PriorityLow {
				return nil, fmt.Errorf("workflow: priority %d is outside %d-%d", o.Priority, queue.PriorityCritical, queue.PriorityLow)
			}
			prio = o.Priority
		}
		timeout, err := runTimeout(d, &o)
		if err != nil {
			return nil, err
		}
		carrier := propagation.MapCarrier{}
		if span := starts[i].span; span != nil {
			propagation.TraceContext{}.Inject(trace.ContextWithSpan(ctx, span), carrier)
		} else {
			// Ended by finish, which knows whether the run is created
			// or found.
			sctx, span := e.tracer.Start(ctx, "braid.run.start", runStartAttributes(runID, d.name))
			propagation.TraceContext{}.Inject(sctx, carrier)
			spans[i] = span
		}
		if o.IdempotencyKey != "" {
			k := o.IdempotencyKey
			keys[i] = &k
		}
		runIDs[i], taskIDs[i] = runID, mustID()
		inputs[i], traces[i], queues[i], prios[i] = string(starts[i].input), carrier.Get("traceparent"), q, int16(prio)
		timeouts[i] = timeoutMicros(timeout)
		index[runID] = i
		starts[i].id = runID.String()
		turns = append(turns, turn{taskID: taskIDs[i], workflow: d.name, queue: q, priority: prio, maxAttempts: d.maxAttempts})
	}
	// The runs and their root tasks in one statement: a task is created
	// only when its run is. A DAG's root task waits for its nodes from the
	// start: its first turn comes once every node is final. Its run is
	// created as a root's suspension on its children leaves a run
	// (suspendTasks), waiting and started, so that it shows the same as a
	// DAG run whose nodes the root's first turn creates (StartByName from
	// a process that does not register the DAG). A run with a timeout gets
	// its deadline by the database's clock.
	rootStatus, rootRemaining, runStatus := "pending", 0, "pending"
	if d.dag != nil {
		rootStatus, rootRemaining, runStatus = "waiting", len(d.dag.nodes), "waiting"
	}
	c := &runsCreation{e: e, d: d, starts: starts, runIDs: runIDs, taskIDs: taskIDs, inputs: inputs, keys: keys,
		timeout: timeouts, turns: turns, index: index, spans: spans}
	b.Queue(`
		WITH u AS (
		    SELECT u.*, CASE WHEN u.timeout_us > 0 THEN u.timeout_us * interval '1 microsecond' END AS timeout
		      FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[], $7::smallint[], $13::bigint[])
		           AS u(id, task_id, input, key, trace, queue, prio, timeout_us)
		), run AS (
		    INSERT INTO braid_runs (id, workflow, status, input, idempotency_key, trace_parent, queue, priority, started_at,
		                            timeout, deadline_at)
		    SELECT u.id, $8, $12, u.input::jsonb, u.key, u.trace, u.queue, u.prio, CASE WHEN $12 = 'waiting' THEN braid_now() END,
		           u.timeout, braid_now() + u.timeout FROM u
		    ON CONFLICT DO NOTHING
		    RETURNING id
		)
		INSERT INTO braid_tasks (id, run_id, key, workflow, status, input, max_attempts, queue, priority, remaining)
		SELECT u.task_id, run.id, 'root', $8, $10, u.input::jsonb, $9, u.queue, u.prio, $11 FROM run JOIN u ON u.id = run.id
		RETURNING run_id`,
		pgIDs(runIDs), pgIDs(taskIDs), inputs, keys, traces, queues, prios, d.name, d.maxAttempts, rootStatus, rootRemaining, runStatus, timeouts).
		Query(func(rows pgx.Rows) error {
			var err error
			c.created, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
			return err
		})
	return c, nil
}

// finish completes the creation of runs once its statement has run: it
// finds the runs that existed, creates DAG runs' nodes, and returns the
// first turns of the runs it created.
func (c *runsCreation) finish(ctx context.Context, tx pgx.Tx, fin *txCounts) (_ []turn, err error) {
	defer func() { c.endSpans(err) }()
	e, d, starts := c.e, c.d, c.starts
	runIDs, taskIDs, inputs, keys, timeouts, turns := c.runIDs, c.taskIDs, c.inputs, c.keys, c.timeout, c.turns
	isNew := make([]bool, len(starts))
	for _, id := range c.created {
		isNew[c.index[id]] = true
	}
	kept := turns[:0]
	var dagRoots []dagRoot
	deadlines := false
	for i := range starts {
		if isNew[i] {
			deadlines = deadlines || timeouts[i] > 0
			if d.dag != nil {
				dagRoots = append(dagRoots, dagRoot{spec: d.dag, runID: runIDs[i], rootID: taskIDs[i], input: inputs[i], link: starts[i].link})
			} else {
				kept = append(kept, turns[i])
			}
			continue
		}
		// The ID or the idempotency key exists: return that run.
		var existingID uuid.UUID
		var workflow string
		err := tx.QueryRow(ctx, `
			SELECT id, workflow FROM braid_runs
			WHERE id = $1 OR ($2::text IS NOT NULL AND idempotency_key = $2)
			ORDER BY (idempotency_key = $2) DESC NULLS LAST LIMIT 1`, runIDs[i], keys[i]).Scan(&existingID, &workflow)
		if errors.Is(err, pgx.ErrNoRows) {
			// The run that held the ID or the key was deleted (by
			// retention) after the insert met it: start the run now.
			more, err := c.startAgain(ctx, tx, i, fin)
			if err != nil {
				return nil, err
			}
			kept = append(kept, more...)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("workflow: finding the existing run: %w", err)
		}
		if workflow != d.name {
			return nil, fmt.Errorf("%w: run %s is of workflow %q, not %q", ErrIdempotencyConflict, existingID, workflow, d.name)
		}
		starts[i].id, starts[i].existing = existingID.String(), true
		if span := c.spans[i]; span != nil {
			// The start found its run: its span names that run.
			span.SetAttributes(attribute.String("run.id", existingID.String()), attribute.Bool("run.existing", true))
		}
	}
	if len(dagRoots) > 0 {
		nodeTurns, err := e.createNodesTx(ctx, tx, dagRoots, fin)
		if err != nil {
			return nil, err
		}
		kept = append(kept, nodeTurns...)
	}
	if deadlines {
		// The delay processor keeps the deadlines: tell it, as a new delay
		// does, so that one nearer than its next look is not late.
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, '')`, channelDelay); err != nil {
			return nil, err
		}
	}
	fin.started += int64(len(c.created))
	return kept, nil
}

// startAgain starts anew the run of starts[i], whose insert met a run
// that was gone by the time finish read it, and returns its first turns.
// The start keeps the braid.run.start span made for it, which then names
// the run it started.
func (c *runsCreation) startAgain(ctx context.Context, tx pgx.Tx, i int, fin *txCounts) ([]turn, error) {
	again := []start{c.starts[i]}
	span := c.spans[i]
	if span != nil {
		again[0].span = span
	}
	turns, err := c.e.createRunsTx(ctx, tx, c.d, again, fin)
	if err != nil {
		return nil, err
	}
	c.starts[i].id, c.starts[i].existing = again[0].id, again[0].existing
	if span != nil {
		span.SetAttributes(attribute.String("run.id", again[0].id))
		if again[0].existing {
			span.SetAttributes(attribute.Bool("run.existing", true))
		}
	}
	return turns, nil
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
// error: a *RunError (errors.Is(err, ErrCancelled) for a cancelled run).
// When the run's deadline passed, the *RunError wraps a *TimeoutError, so
// errors.As finds either. It waits on a notification, and polls as a
// fallback. A read that loses its connection (a restart or failover of
// the server) is read again at the next poll, until ctx ends: only the
// run's own end, ctx, or an error of the read itself ends the wait.
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
			timeout          *int64
			deadline         *time.Time
		)
		err := e.pool.QueryRow(ctx, `SELECT status, workflow, output, error, `+timeoutMicrosSQL+`, deadline_at FROM braid_runs WHERE id = $1`, id).
			Scan(&status, &workflow, &output, &errJSON, &timeout, &deadline)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("%w: %s", ErrRunNotFound, runID)
		}
		if err != nil && !(connectionLost(err) && ctx.Err() == nil) {
			return nil, fmt.Errorf("workflow: reading run %s: %w", runID, err)
		}
		if err != nil {
			// The run is durable, and its result will be there: read again
			// at the next poll, on another connection.
			e.logger.DebugContext(ctx, "workflow: reading a run's result lost its connection; reading again", "run.id", runID, "error", err)
			status = ""
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
			re := &RunError{RunID: runID, Workflow: workflow, Status: status, Message: se.Message}
			if status == "cancelled" && se.Kind == errKindTimeout {
				re.Err = newTimeoutError(runID, workflow, timeout, deadline)
			}
			return nil, re
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-ch:
		case <-time.After(e.cfg.ResultPollInterval):
		}
	}
}

// runStartAttributes are the attributes of a run's braid.run.start span.
func runStartAttributes(runID uuid.UUID, workflow string) trace.SpanStartOption {
	return trace.WithAttributes(
		attribute.String("run.id", runID.String()),
		attribute.String("workflow", workflow),
	)
}
