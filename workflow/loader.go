package workflow

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// loaderMax bounds the tasks one load reads.
const loaderMax = 500

// loaders is how many loads may be in flight at once.
const loaders = 2

// newLoader returns the gather that loads the tasks of starting turns.
func newLoader(e *Engine) *gather[loadRequest, *loadedTask] {
	return newGather(loaderMax, loaders, e.cfg.OutcomeTimeout, e.loadTasks)
}

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
	// link is the span link kept for the task's turn (turnLink).
	link *turnLink
	// dag is, for a DAG node, the name of its DAG.
	dag      *string
	steps    map[string]*stepRecord
	children map[string]*childRecord
	// history is the task's recorded durable calls by position.
	history map[int]call
}

// loadRequest asks for a task, and for its children when the turn may
// find some (readsChildren).
type loadRequest struct {
	id       uuid.UUID
	children bool
}

// load returns the task id, read in one round trip with the tasks of the
// turns starting at the same time: River fetches turns in batches, and a
// burst of them costs one read, not one per turn. A turn writes nothing
// when it starts: River's fetch has recorded its attempt already. The
// task's children are read only with children set. The task is nil when
// it does not exist.
func (e *Engine) load(ctx context.Context, id uuid.UUID, children bool) (*loadedTask, error) {
	q := loadRequest{id: id, children: children}
	lt, ok, err := e.loader.call(ctx, q)
	if !ok {
		r := &gathered[loadRequest, *loadedTask]{q: q}
		err = e.loadTasks(ctx, []*gathered[loadRequest, *loadedTask]{r})
		lt = r.a
	}
	return lt, err
}

// loadTasks reads the batch's tasks, their steps and, for those that ask,
// their children, in one round trip, on generic plans (keyedPlansSQL).
func (e *Engine) loadTasks(ctx context.Context, batch []*gathered[loadRequest, *loadedTask]) error {
	ids := make([]uuid.UUID, len(batch))
	var parents []uuid.UUID
	for i, r := range batch {
		ids[i] = r.q.id
		if r.q.children {
			parents = append(parents, r.q.id)
		}
	}
	b := &pgx.Batch{}
	b.Queue(keyedPlansSQL)
	tasks := queueLoad(b, ids, parents)
	if err := e.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("workflow: loading %d tasks: %w", len(ids), err)
	}
	for _, r := range batch {
		r.a = tasks[r.q.id]
	}
	return nil
}

// The statements of a load read the tasks, the steps and the children of
// the tasks whose IDs are $1. Each reads its table by an index condition
// on those keys, and the run's trace by a subquery on the run's key, so
// that its generic plan (keyedPlansSQL) reads by key whatever the size of
// the table when the plan was made.
const (
	loadTasksSQL = `
		SELECT t.id, t.run_id, t.parent_task_id, t.key, t.workflow, t.status, t.input, t.suspended_span,
		       (SELECT r.trace_parent FROM braid_runs r WHERE r.id = t.run_id), t.turn_link, ` + nodeDAGSQL + `
		  FROM braid_tasks t
		 WHERE t.id = ANY($1)`
	loadStepsSQL    = `SELECT task_id, name, kind, status, output, error, attempts, position FROM braid_steps WHERE task_id = ANY($1)`
	loadChildrenSQL = `SELECT parent_task_id, id, key, workflow, status, output, error, position, call FROM braid_tasks WHERE parent_task_id = ANY($1)`
)

// queueLoad queues on b the statements that read the tasks ids, their
// steps, and the children of those among them in parents. Once b is
// sent, the map it returns holds the tasks that exist.
//
// A task on the first attempt of its first turn has no children, and
// skipping their read for it matters: a fan-out's children are nearly all
// such tasks, and while the planner's statistics still count the fan-out's
// parent, it reads the children of a batch of them with a scan of the
// whole table.
func queueLoad(b *pgx.Batch, ids, parents []uuid.UUID) map[uuid.UUID]*loadedTask {
	tasks := make(map[uuid.UUID]*loadedTask, len(ids))
	args := pgIDs(ids)
	b.Queue(loadTasksSQL, args).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var id uuid.UUID
			lt := &loadedTask{steps: map[string]*stepRecord{}, children: map[string]*childRecord{}, history: map[int]call{}}
			if err := rows.Scan(&id, &lt.runID, &lt.parentID, &lt.key, &lt.workflow, &lt.status, &lt.input, &lt.suspended, &lt.traceParent, &lt.link, &lt.dag); err != nil {
				return err
			}
			tasks[id] = lt
		}
		return rows.Err()
	})
	b.Queue(loadStepsSQL, args).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var id uuid.UUID
			var name string
			var errRaw []byte
			rec := &stepRecord{}
			var pos *int32
			if err := rows.Scan(&id, &name, &rec.kind, &rec.status, &rec.output, &errRaw, &rec.attempts, &pos); err != nil {
				return fmt.Errorf("steps: %w", err)
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
		return rows.Err()
	})
	if len(parents) == 0 {
		return tasks
	}
	b.Queue(loadChildrenSQL, pgIDs(parents)).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var parent uuid.UUID
			var key string
			var errRaw []byte
			c := &childRecord{}
			var pos *int32
			var kind *string
			if err := rows.Scan(&parent, &c.id, &key, &c.workflow, &c.status, &c.output, &errRaw, &pos, &kind); err != nil {
				return fmt.Errorf("children: %w", err)
			}
			if len(errRaw) > 0 {
				_ = json.Unmarshal(errRaw, &c.err)
			}
			if lt := tasks[parent]; lt != nil {
				lt.children[key] = c
				c.position = pos
				if kind != nil {
					c.call = *kind
				}
				if pos != nil && kind != nil {
					lt.history[int(*pos)] = childCall(*kind, key)
				}
			}
		}
		return rows.Err()
	})
	return tasks
}
