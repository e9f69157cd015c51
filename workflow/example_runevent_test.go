package workflow_test

import (
	"context"
	"fmt"
	"time"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// A run publishes state that callers outside it read while it runs: here
// the parcel's tracking number, set before the run waits for the delivery.
// GetEvent waits until the run sets it.
func Example_setEvent() {
	ctx := context.Background()
	db, err := testutil.Open(ctx)
	if err != nil {
		panic(err)
	}
	defer db.Close()

	ship := workflow.Define("ship_order", func(t *workflow.Task, order string) (string, error) {
		tracking, err := workflow.Step(t, "label", func(ctx context.Context) (string, error) {
			return "TRK-" + order, nil // imagine a carrier's API
		})
		if err != nil {
			return "", err
		}
		// Recorded like a step: a later turn does not set it again.
		if err := workflow.SetEvent(t, "tracking", tracking); err != nil {
			return "", err
		}
		if err := t.Delay("in transit", 200*time.Millisecond); err != nil {
			return "", err
		}
		return "delivered order " + order, nil
	})

	eng, err := workflow.NewEngine(db.Pool, &workflow.Config{Workflows: []workflow.Definition{ship}})
	if err != nil {
		panic(err)
	}
	if err := eng.Start(ctx); err != nil {
		panic(err)
	}
	defer eng.Stop(ctx)

	run, err := ship.Start(ctx, eng, "42", nil)
	if err != nil {
		panic(err)
	}
	tracking, err := workflow.GetEvent[string](ctx, eng, run.ID, "tracking", 10*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Println("tracking:", tracking)
	out, err := run.Result(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(out)
	// Output:
	// tracking: TRK-42
	// delivered order 42
}
