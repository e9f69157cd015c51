package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Future is the eventual output of a child task started with Go.
type Future[Out any] struct {
	t   *Task
	key string
	err error
	// runID is the run of a detached child.
	runID string
}

// Key is the child's key within its parent.
func (f *Future[Out]) Key() string { return f.key }

// RunID is the ID of the run of a detached child (see Detached), "" for a
// child of the parent's own run. Get a typed handle on it with
// Workflow.Get, to wait for it or cancel it, from anywhere.
func (f *Future[Out]) RunID() string { return f.runID }

// GoOption configures a child started with Go.
type GoOption interface{ applyGo(*goOptions) }

type goOptions struct{ detached bool }

type goOption func(*goOptions)

func (o goOption) applyGo(g *goOptions) { o(g) }

// Detached starts the child as a run of its own, which outlives the task
// that started it: it runs to its end whatever the parent does, and stays
// cancellable through its own run ID (Future.RunID). Its run's ID is
// derived from the parent task and the child's name, so that every turn
// of the parent names the same run and the run starts once, when the turn
// that first calls Go ends. That turn's outcome records the start in the
// parent's history, so the parent's later turns do not start the child
// again, even once retention has deleted its run (Config.Retention after
// the child finished). A detached child is not awaited: its Future.Get
// returns ErrDetached.
//
// Without Detached, a child belongs to its parent: when the parent task
// finishes (completes or fails) before the child has, the child is
// cancelled, with its own children.
func Detached() GoOption { return goOption(func(g *goOptions) { g.detached = true }) }

// ErrDetached is returned by Future.Get for a detached child, which its
// parent does not await.
var ErrDetached = errors.New("workflow: a detached child is not awaited by its parent; get its run with Workflow.Get and Future.RunID")

// Go starts a child task running w with input in, as its own River job
// with its own retries, and returns a future for its output. The child is
// created when the current turn ends. Go itself never blocks. A child that
// is still running when its parent finishes is cancelled, unless it was
// started Detached.
func Go[In, Out any](t *Task, name string, w *Workflow[In, Out], in In, opts ...GoOption) *Future[Out] {
	if t.suspended {
		return &Future[Out]{err: ErrSuspended}
	}
	if err := checkName("child", name); err != nil {
		return &Future[Out]{err: err}
	}
	var g goOptions
	for _, o := range opts {
		if o != nil {
			o.applyGo(&g)
		}
	}
	key := t.uniqueName(name)
	pos, err := t.enter("go", key)
	if err != nil {
		return &Future[Out]{err: err}
	}
	if g.detached {
		runID, err := t.detach(key, w.d, in)
		return &Future[Out]{t: t, key: key, err: err, runID: runID}
	}
	if err := t.spawn(key, w.d, in, pos, "go"); err != nil {
		return &Future[Out]{err: err}
	}
	return &Future[Out]{t: t, key: key}
}

// Get returns the child's output once it has finished. Until then it
// suspends the task (returning ErrSuspended). A suspended task resumes when
// every child it has started and not yet finished has finished. A child
// that failed permanently or was cancelled gives a *ChildError naming it.
func (f *Future[Out]) Get() (Out, error) {
	var zero Out
	if f.err != nil {
		return zero, f.err
	}
	if f.runID != "" {
		return zero, ErrDetached
	}
	if f.t.suspended {
		return zero, ErrSuspended
	}
	c := f.t.children[f.key]
	if c == nil || !finished(c.status) {
		f.t.waitChildren = true
		return zero, f.t.suspend()
	}
	return childOutput[Out](f.key, c)
}

// Map starts one child task per item, each running w as its own River job
// with its own retries, and returns their outputs in input order once every
// child has finished. Until then it suspends the task. If a child failed
// permanently, Map returns a *ChildError naming the first such child in
// input order.
func Map[In, Out any](t *Task, name string, w *Workflow[In, Out], items []In) ([]Out, error) {
	if t.suspended {
		return nil, ErrSuspended
	}
	if err := checkName("map", name); err != nil {
		return nil, err
	}
	if len(items) > t.eng.cfg.MaxMapItems {
		return nil, &LimitError{What: fmt.Sprintf("Map %q", name), Count: len(items), Limit: t.eng.cfg.MaxMapItems}
	}
	base := t.uniqueName(name)
	pos, err := t.enter("map", base)
	if err != nil {
		return nil, err
	}
	waiting := false
	spawnedBefore, inputBytes := len(t.spawns), 0
	first := spawnedBefore
	// A Map that fails starts none of its children.
	undo := func() {
		for _, s := range t.spawns[first:] {
			delete(t.spawned, s.key)
		}
		t.spawns = t.spawns[:first]
	}
	for i, item := range items {
		key := fmt.Sprintf("%s/%d", base, i)
		t.taken[key] = true // a later Go of this name gets a suffix
		if err := t.spawn(key, w.d, item, pos, "map"); err != nil {
			undo()
			return nil, err
		}
		if len(t.spawns) > spawnedBefore {
			inputBytes += len(t.spawns[len(t.spawns)-1].input)
			spawnedBefore = len(t.spawns)
			if inputBytes > t.eng.cfg.MaxMapInputBytes {
				undo()
				return nil, &PayloadTooLargeError{What: fmt.Sprintf("total input of Map %q", name), Size: inputBytes, Limit: t.eng.cfg.MaxMapInputBytes}
			}
		}
		if c := t.children[key]; c == nil || !finished(c.status) {
			waiting = true
		}
	}
	if waiting {
		t.waitChildren = true
		return nil, t.suspend()
	}
	outs := make([]Out, len(items))
	for i := range items {
		key := fmt.Sprintf("%s/%d", base, i)
		out, err := childOutput[Out](key, t.children[key])
		if err != nil {
			return nil, err
		}
		outs[i] = out
	}
	return outs, nil
}

// spawn records a child to create at the end of the turn, unless it
// exists.
func (t *Task) spawn(key string, d *definition, in any, position int, call string) error {
	if c, ok := t.children[key]; ok {
		if c.workflow != d.name {
			return fmt.Errorf("workflow: child %q is recorded as workflow %q, not %q: %w", key, c.workflow, d.name, errNotDeterministic)
		}
		if c.call != "" && c.position != nil && (c.call != call || int(*c.position) != position) {
			return fmt.Errorf("workflow: child %q was started by a %s at durable call %d, not by this %s at durable call %d: %w",
				key, c.call, *c.position, call, position, errNotDeterministic)
		}
		return nil
	}
	if t.spawned[key] {
		return fmt.Errorf("workflow: child %q is started twice in one turn", key)
	}
	if _, err := t.eng.lookup(d.name); err != nil {
		return err
	}
	input, err := t.eng.encode(fmt.Sprintf("input of child %q", key), in)
	if err != nil {
		return err
	}
	t.spawned[key] = true
	t.spawns = append(t.spawns, spawn{key: key, def: d, input: input, position: position, call: call})
	return nil
}

// stepKindDetached is the kind of the step that records, in its parent's
// task, the start of a detached child: its name is the child's key, its
// output the child's run ID. It is recorded without a position, outside
// the history that replay checks, so that an engine of an earlier
// version, which does not know the kind, reads a parent's history as
// before; and Retry, which forgets records by position, keeps it.
const stepKindDetached = "detached"

// detachedNamespace is the UUID namespace of detached children's run IDs.
var detachedNamespace = uuid.MustParse("5b1d7a3e-2f0c-4f7e-9a51-0d6c1e8b4a27")

// detach records a detached child, to start as a run of its own at the
// end of the turn, and returns its run's ID: derived from the task and
// the child's key, the same on every turn. A child whose start the task
// has recorded (a step of kind detached, written with the run) is not
// started again, even once retention has deleted its run.
func (t *Task) detach(key string, d *definition, in any) (string, error) {
	runID := uuid.NewSHA1(detachedNamespace, []byte(t.id.String()+"/"+key))
	if t.spawned[key] {
		return "", fmt.Errorf("workflow: child %q is started twice in one turn", key)
	}
	if _, err := t.eng.lookup(d.name); err != nil {
		return "", err
	}
	if rec := t.steps[key]; rec != nil && rec.kind == stepKindDetached {
		t.spawned[key] = true
		return runID.String(), nil
	}
	input, err := t.eng.encode(fmt.Sprintf("input of detached child %q", key), in)
	if err != nil {
		return "", err
	}
	t.spawned[key] = true
	t.detached = append(t.detached, spawn{key: key, def: d, input: input, runID: runID})
	return runID.String(), nil
}

// mayLeaveChildren reports whether the task, finishing at the end of
// this turn, may leave children unfinished: one it started this turn, or
// one loaded unfinished. A task whose children all finished (the usual
// case: it awaited them) leaves none.
func (t *Task) mayLeaveChildren() bool {
	if len(t.spawns) > 0 {
		return true
	}
	for _, c := range t.children {
		if !finished(c.status) {
			return true
		}
	}
	return false
}

func finished(status string) bool {
	switch status {
	case "completed", "failed", "cancelled", "skipped":
		return true
	}
	return false
}

func childOutput[Out any](key string, c *childRecord) (Out, error) {
	var out Out
	if c.status != "completed" {
		return out, &ChildError{Child: key, Workflow: c.workflow, Status: c.status, Message: c.err.Message}
	}
	if len(c.output) > 0 {
		if err := json.Unmarshal(c.output, &out); err != nil {
			return out, &EncodeError{What: fmt.Sprintf("output of child %q", key), Err: err}
		}
	}
	return out, nil
}

// taskTreeSQL is the one walk down the task tree, a recursive WITH query
// to follow WITH RECURSIVE: name holds the tasks that first (a SELECT of
// task IDs) selects, and below them, however deep, each child (k) of a
// task already held for which keep (a condition on k) holds. Each level
// reads the children of the one before by their parent's key (a lateral
// subquery that OFFSET 0 keeps from being folded into a join), so that no
// plan reads every task to find a few. A task reached twice (first holds
// a task and its descendant) is held once.
func taskTreeSQL(name, first, keep string) string {
	return name + ` AS (
	    ` + first + `
	    UNION
	    SELECT k.id FROM ` + name + ` p CROSS JOIN LATERAL (
	        SELECT k.id FROM braid_tasks k WHERE k.parent_task_id = p.id AND ` + keep + ` OFFSET 0) k
	)`
}

// unfinishedDescendantsSQL selects the unfinished descendants of the
// tasks given by param, however deep, as a parenthesized subquery. Use
// it as id = ANY(ARRAY…): an IN over it lets the planner scan every task
// for the few it names.
func unfinishedDescendantsSQL(param string) string {
	unfinished := `k.status NOT IN ` + finalStatuses
	return `(WITH RECURSIVE ` + taskTreeSQL("d",
		`SELECT k.id FROM braid_tasks k WHERE k.parent_task_id = ANY(`+param+`) AND `+unfinished, unfinished) + `
	 SELECT id FROM d)`
}

// cancelOrphansTx cancels the unfinished children, with their
// descendants, of the tasks that settled has finished: a child belongs to
// its parent, and one the parent never awaited does not outlive it (a
// detached child is a run of its own). Their waiting delays are cancelled
// too. The batch's lock statement has taken them, before their parents,
// as they stood when it began; a descendant created since, by a batch
// that committed while the lock statement waited, is locked here with
// NOWAIT, never waiting, since it comes before the tasks the batch holds
// in the lock order: should another transaction hold it, the batch fails
// and its outcomes are recorded again one at a time. It returns the tasks
// it cancelled, whose live turns are cancelled once the batch has
// committed (cancelTurnsOf).
func (e *Engine) cancelOrphansTx(ctx context.Context, tx pgx.Tx, settled []settlement, may []uuid.UUID) ([]uuid.UUID, error) {
	var parents []uuid.UUID
	for _, s := range settled {
		if (s.status == "completed" || s.status == "failed") && slices.Contains(may, s.taskID) {
			parents = append(parents, s.taskID)
		}
	}
	if len(parents) == 0 {
		return nil, nil
	}
	errJSON, _ := json.Marshal(storedError{Message: "cancelled: its parent finished without awaiting it", Kind: "orphan"})
	rows, err := tx.Query(ctx, `
		WITH locked AS (
		    SELECT id FROM braid_tasks WHERE id = ANY(ARRAY`+unfinishedDescendantsSQL("$1")+`)
		     ORDER BY created_at DESC, id DESC
		       FOR UPDATE NOWAIT
		)
		UPDATE braid_tasks t SET status = 'cancelled', error = $2, remaining = 0, finished_at = braid_now(), updated_at = braid_now()
		  FROM locked WHERE t.id = locked.id
		RETURNING t.id`, parents, errJSON)
	if err != nil {
		return nil, fmt.Errorf("workflow: cancelling the unfinished children of %d finished tasks: %w", len(parents), err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	if _, err := tx.Exec(ctx, `
		UPDATE braid_steps SET status = 'cancelled', finished_at = braid_now()
		 WHERE task_id = ANY($1) AND status = 'waiting'`, ids); err != nil {
		return nil, fmt.Errorf("workflow: cancelling the delays of %d cancelled children: %w", len(ids), err)
	}
	return ids, nil
}

// cancelTurnsOf cancels, through River, the live turns of tasks that a
// committed batch cancelled, so that a running one's context ends. A turn
// that is not cancelled here finds its task cancelled all the same: it
// does nothing, or records nothing.
func (e *Engine) cancelTurnsOf(ctx context.Context, tasks []uuid.UUID) {
	if len(tasks) == 0 {
		return
	}
	if err := e.cancelLiveTurns(ctx, `
		SELECT id FROM river_job
		 WHERE kind = $1 AND braid_turn_task(unique_key, args) = ANY($2) AND state IN `+liveJobStates, pgIDs(tasks)); err != nil {
		e.logger.WarnContext(ctx, "workflow: cancelling the turns of cancelled children", "children", len(tasks), "error", err)
	}
}

// queueDetached queues on b the creation of the detached children of the
// batch's live turns, each a run of its own, one statement per workflow,
// and the records of their starts in their parents' histories;
// startDetached completes it once b is sent. A run that exists is left
// alone. A child whose start its parent recorded in an earlier turn is
// not among the turn's (detach).
func (e *Engine) queueDetached(ctx context.Context, b *pgx.Batch, st *batchState) ([]*runsCreation, error) {
	byDef := map[*definition][]start{}
	var (
		defs        []*definition
		tasks, runs []uuid.UUID
		names       []string
	)
	for _, o := range st.owned {
		if o.t == nil || len(o.t.detached) == 0 || (o.kind != outcomeComplete && o.kind != outcomeSuspend) || !isRunnable(st.status[o.taskID]) {
			continue
		}
		for i := range o.t.detached {
			s := &o.t.detached[i]
			if byDef[s.def] == nil {
				defs = append(defs, s.def)
			}
			if s.start == nil {
				// One span per run, whatever the number of batches that
				// try to start it: ended once the outcome is recorded.
				_, s.start = e.tracer.Start(ctx, "braid.run.start", runStartAttributes(s.runID, s.def.name))
			}
			byDef[s.def] = append(byDef[s.def], start{input: s.input, opts: &StartOpts{ID: s.runID.String()}, by: o, span: s.start,
				link: newTurnLink(o.traceParent(), linkSpawning)})
			tasks, runs, names = append(tasks, o.taskID), append(runs, s.runID), append(names, s.key)
		}
	}
	if len(tasks) == 0 {
		return nil, nil
	}
	// Each start is recorded in its parent's history, with the run: the
	// record, not the run, tells the parent's later turns that the child
	// was started, so that retention may delete the run first.
	b.Queue(`
		INSERT INTO braid_steps (task_id, name, kind, status, output, attempts, started_at, finished_at)
		SELECT u.task_id, u.name, '`+stepKindDetached+`', 'completed', to_jsonb(u.run_id::text), 1, braid_now(), braid_now()
		  FROM unnest($1::uuid[], $2::text[], $3::uuid[]) AS u(task_id, name, run_id)
		ON CONFLICT (task_id, name) DO NOTHING`, pgIDs(tasks), names, pgIDs(runs))
	var out []*runsCreation
	for _, d := range defs {
		c, err := e.queueRuns(ctx, b, d, byDef[d])
		if err != nil {
			return nil, fmt.Errorf("workflow: starting %d detached children: %w", len(byDef[d]), err)
		}
		out = append(out, c)
	}
	return out, nil
}

// startDetached completes the creation of detached children that
// queueDetached queued. Their first turns join the batch's new turns, so
// that the worker of the turn that started one may run it next, as it
// would a child.
func (e *Engine) startDetached(ctx context.Context, tx pgx.Tx, st *batchState, created []*runsCreation) error {
	for _, c := range created {
		turns, err := c.finish(ctx, tx, &st.finished)
		if err != nil {
			return fmt.Errorf("workflow: starting %d detached children: %w", len(c.starts), err)
		}
		// finish returns the turns of the runs it created, in the order
		// of their starts; a run that existed has none. (A DAG's are its
		// nodes' first turns, left to River's fetch, each linked to the
		// turn that started the DAG.)
		i := 0
		for _, s := range c.starts {
			if c.d.dag != nil || s.existing || i >= len(turns) {
				continue
			}
			turns[i].by, turns[i].link = s.by, newTurnLink(s.by.traceParent(), linkSpawning)
			i++
		}
		st.fresh = append(st.fresh, turns...)
	}
	return nil
}
