package queue

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"
)

// MaintenanceTask is periodic work run by the one process that holds MaintenanceLease.
type MaintenanceTask struct {
	Name     string                          // for logs and errors; required, unique
	Interval time.Duration                   // time between two runs; required, > 0
	Run      func(ctx context.Context) error // must be safe to run twice at once (a lease lost mid-run)
}

// validateTasks checks Config.Maintenance, naming the offending task.
func validateTasks(tasks []MaintenanceTask) error {
	seen := make(map[string]bool, len(tasks))
	for i, t := range tasks {
		switch {
		case t.Name == "":
			return fmt.Errorf("queue: Config.Maintenance[%d] has no Name", i)
		case seen[t.Name]:
			return fmt.Errorf("queue: Config.Maintenance[%d]: the name %q is used twice", i, t.Name)
		case t.Interval <= 0:
			return fmt.Errorf("queue: Config.Maintenance[%d] (%q): Interval is %s; it must be positive", i, t.Name, t.Interval)
		case t.Run == nil:
			return fmt.Errorf("queue: Config.Maintenance[%d] (%q): Run is nil", i, t.Name)
		}
		seen[t.Name] = true
	}
	return nil
}

// runTasks starts one goroutine per maintenance task, each running its
// task at once and then every Interval until ctx ends. It returns a
// function that waits for them all; call it after ctx has ended.
func (q *Queue) runTasks(ctx context.Context) (wait func()) {
	var wg sync.WaitGroup
	for _, t := range q.tasks {
		wg.Go(func() {
			ticker := time.NewTicker(t.Interval)
			defer ticker.Stop()
			for {
				q.runTask(ctx, t)
				select {
				case <-ctx.Done():
					return
				case <-ticker.C:
				}
			}
		})
	}
	return wg.Wait
}

// runTask runs t once, logging its error or panic with its name.
func (q *Queue) runTask(ctx context.Context, t MaintenanceTask) {
	if ctx.Err() != nil {
		return
	}
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
			}
		}()
		return t.Run(ctx)
	}()
	if err != nil && !(ctx.Err() != nil && errors.Is(err, ctx.Err())) {
		q.logger.ErrorContext(ctx, "queue: maintenance task failed", "task", t.Name, "error", err)
	}
}
