package workflow

import (
	"encoding/json"
	"fmt"
)

// Future is the eventual output of a child task started with Go.
type Future[Out any] struct {
	t   *Task
	key string
	err error
}

// Key is the child's key within its parent.
func (f *Future[Out]) Key() string { return f.key }

// Go starts a child task running w with input in, as its own River job
// with its own retries, and returns a future for its output. The child is
// created when the current turn ends. Go itself never blocks.
func Go[In, Out any](t *Task, name string, w *Workflow[In, Out], in In) *Future[Out] {
	if t.suspended {
		return &Future[Out]{err: ErrSuspended}
	}
	if err := checkName("child", name); err != nil {
		return &Future[Out]{err: err}
	}
	key := t.uniqueName(name)
	if err := t.spawn(key, w.d, in); err != nil {
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
	waiting := false
	spawnedBefore, inputBytes := len(t.spawns), 0
	for i, item := range items {
		key := fmt.Sprintf("%s/%d", base, i)
		if err := t.spawn(key, w.d, item); err != nil {
			return nil, err
		}
		if len(t.spawns) > spawnedBefore {
			inputBytes += len(t.spawns[len(t.spawns)-1].input)
			spawnedBefore = len(t.spawns)
			if inputBytes > t.eng.cfg.MaxMapInputBytes {
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
func (t *Task) spawn(key string, d *definition, in any) error {
	if c, ok := t.children[key]; ok {
		if c.workflow != d.name {
			return fmt.Errorf("workflow: child %q is recorded as workflow %q, not %q: %w", key, c.workflow, d.name, errNotDeterministic)
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
	t.spawns = append(t.spawns, spawn{key: key, def: d, input: input})
	return nil
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
