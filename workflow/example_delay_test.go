package workflow_test

import (
	"context"
	"fmt"
	"time"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// A durable timer. The task suspends; its turn ends and no goroutine waits.
// The delay processor gives it a new turn once the delay has passed, even
// if the process that started it is gone.
func Example_delay() {
	ctx := context.Background()
	db, err := testutil.Open(ctx)
	if err != nil {
		panic(err)
	}
	defer db.Close()

	reminder := workflow.Define("reminder", func(t *workflow.Task, msg string) (string, error) {
		if err := t.Delay("wait", 200*time.Millisecond); err != nil {
			return "", err // ErrSuspended: the task sleeps durably
		}
		return "reminder: " + msg, nil
	})

	eng, err := workflow.NewEngine(db.Pool, &workflow.Config{Workflows: []workflow.Definition{reminder}})
	if err != nil {
		panic(err)
	}
	if err := eng.Start(ctx); err != nil {
		panic(err)
	}
	defer eng.Stop(ctx)

	run, err := reminder.Start(ctx, eng, "water the plants", nil)
	if err != nil {
		panic(err)
	}
	out, err := run.Result(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(out)
	// Output: reminder: water the plants
}
