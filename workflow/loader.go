package workflow

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// loaderMax bounds the tasks one load reads.
const loaderMax = 500

// loaders is how many loads may be in flight at once.
const loaders = 2

// loadedTask is a task as a turn starts it: its row, its run's trace, its
// steps and its children.
type loadedTask struct {
	runID       uuid.UUID
	parentID    *uuid.UUID
	key         string
	workflow    string
	status      string
	input       []byte
	suspended   *string
	traceParent *string
	// dag is, for a DAG node, the name of its DAG.
	dag      *string
	steps    map[string]*stepRecord
	children map[string]*childRecord
	// history is the task's recorded durable calls by position.
	history map[int]call
}

type loadRequest struct {
	id   uuid.UUID
	task *loadedTask // nil when the task does not exist
	err  error
	done chan struct{}
}

// loader reads the tasks of the turns that start together in one round
// trip: a turn hands in its task ID, and whichever loader is free takes
// every request waiting, so that a burst of turns (River fetches them in
// batches) costs one read, not one per turn. A turn writes nothing when it
// starts: River's fetch has recorded its attempt already.
type loader struct {
	e  *Engine
	in chan *loadRequest

	mu   sync.Mutex
	stop context.CancelFunc
	wg   sync.WaitGroup
}

func newLoader(e *Engine) *loader {
	return &loader{e: e, in: make(chan *loadRequest, loaderMax)}
}

func (l *loader) start() {
	l.mu.Lock()
	defer l.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	l.stop = cancel
	for range loaders {
		l.wg.Go(func() { l.run(ctx) })
	}
}

// halt stops the loaders. Call it after every turn has returned.
func (l *loader) halt() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stop != nil {
		l.stop()
		l.wg.Wait()
		l.stop = nil
	}
}

// load returns the task id, read together with the tasks of the turns
// starting at the same time.
func (l *loader) load(ctx context.Context, id uuid.UUID) (*loadedTask, error) {
	r := &loadRequest{id: id, done: make(chan struct{})}
	select {
	case l.in <- r:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	select {
	case <-r.done:
		return r.task, r.err
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

func (l *loader) run(ctx context.Context) {
	for {
		var batch []*loadRequest
		select {
		case r := <-l.in:
			batch = append(batch, r)
		case <-ctx.Done():
			return
		}
	more:
		for len(batch) < loaderMax {
			select {
			case r := <-l.in:
				batch = append(batch, r)
			default:
				break more
			}
		}
		lctx, cancel := context.WithTimeout(ctx, l.e.cfg.OutcomeTimeout)
		err := l.e.loadTasks(lctx, batch)
		cancel()
		for _, r := range batch {
			if err != nil {
				r.err = err
			}
			close(r.done)
		}
	}
}

// loadTasks reads the batch's tasks, their steps and their children in
// one round trip.
func (e *Engine) loadTasks(ctx context.Context, batch []*loadRequest) error {
	ids := make([]uuid.UUID, len(batch))
	for i, r := range batch {
		ids[i] = r.id
	}
	b := &pgx.Batch{}
	b.Queue(`
		SELECT t.id, t.run_id, t.parent_task_id, t.key, t.workflow, t.status, t.input, t.suspended_span, r.trace_parent, `+nodeDAGSQL+`
		  FROM braid_tasks t JOIN braid_runs r ON r.id = t.run_id
		 WHERE t.id = ANY($1)`, ids)
	b.Queue(`SELECT task_id, name, kind, status, output, error, attempts, position FROM braid_steps WHERE task_id = ANY($1)`, ids)
	b.Queue(`SELECT parent_task_id, id, key, workflow, status, output, error, position, call FROM braid_tasks WHERE parent_task_id = ANY($1)`, ids)
	br := e.pool.SendBatch(ctx, b)
	defer func() { _ = br.Close() }()

	tasks := make(map[uuid.UUID]*loadedTask, len(batch))
	rows, err := br.Query()
	if err != nil {
		return fmt.Errorf("workflow: loading %d tasks: %w", len(ids), err)
	}
	for rows.Next() {
		var id uuid.UUID
		lt := &loadedTask{steps: map[string]*stepRecord{}, children: map[string]*childRecord{}, history: map[int]call{}}
		if err := rows.Scan(&id, &lt.runID, &lt.parentID, &lt.key, &lt.workflow, &lt.status, &lt.input, &lt.suspended, &lt.traceParent, &lt.dag); err != nil {
			rows.Close()
			return fmt.Errorf("workflow: loading %d tasks: %w", len(ids), err)
		}
		tasks[id] = lt
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("workflow: loading %d tasks: %w", len(ids), err)
	}

	rows, err = br.Query()
	if err != nil {
		return fmt.Errorf("workflow: loading steps: %w", err)
	}
	for rows.Next() {
		var id uuid.UUID
		var name string
		var errRaw []byte
		rec := &stepRecord{}
		var pos *int32
		if err := rows.Scan(&id, &name, &rec.kind, &rec.status, &rec.output, &errRaw, &rec.attempts, &pos); err != nil {
			rows.Close()
			return fmt.Errorf("workflow: loading steps: %w", err)
		}
		if len(errRaw) > 0 {
			_ = json.Unmarshal(errRaw, &rec.err)
		}
		if lt := tasks[id]; lt != nil {
			lt.steps[name] = rec
			if pos != nil {
				lt.history[int(*pos)] = call{kind: rec.kind, name: name}
			}
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("workflow: loading steps: %w", err)
	}

	rows, err = br.Query()
	if err != nil {
		return fmt.Errorf("workflow: loading children: %w", err)
	}
	for rows.Next() {
		var parent uuid.UUID
		var key string
		var errRaw []byte
		c := &childRecord{}
		var pos *int32
		var kind *string
		if err := rows.Scan(&parent, &c.id, &key, &c.workflow, &c.status, &c.output, &errRaw, &pos, &kind); err != nil {
			rows.Close()
			return fmt.Errorf("workflow: loading children: %w", err)
		}
		if len(errRaw) > 0 {
			_ = json.Unmarshal(errRaw, &c.err)
		}
		if lt := tasks[parent]; lt != nil {
			lt.children[key] = c
			if pos != nil && kind != nil {
				lt.history[int(*pos)] = childCall(*kind, key)
			}
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("workflow: loading children: %w", err)
	}
	for _, r := range batch {
		r.task = tasks[r.id]
	}
	return nil
}
