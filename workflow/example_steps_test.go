package workflow_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// A workflow made of memoized steps. Each step's result is recorded; if the
// process crashed after "fetch", a later turn would replay its result and
// go on with "shout".
func Example_steps() {
	ctx := context.Background()
	db, err := testutil.Open(ctx) // any migrated database; see package migrations
	if err != nil {
		panic(err)
	}
	defer db.Close()

	greet := workflow.Define("greet", func(t *workflow.Task, name string) (string, error) {
		greeting, err := workflow.Step(t, "fetch", func(ctx context.Context) (string, error) {
			return "hello, " + name, nil // imagine an HTTP call here
		})
		if err != nil {
			return "", err
		}
		return workflow.Step(t, "shout", func(ctx context.Context) (string, error) {
			return strings.ToUpper(greeting) + "!", nil
		})
	})

	eng, err := workflow.NewEngine(db.Pool, &workflow.Config{Workflows: []workflow.Definition{greet}})
	if err != nil {
		panic(err)
	}
	if err := eng.Start(ctx); err != nil {
		panic(err)
	}
	defer eng.Stop(ctx)

	run, err := greet.Start(ctx, eng, "braid", &workflow.StartOpts{IdempotencyKey: "greet:braid"})
	if err != nil {
		panic(err)
	}
	out, err := run.Result(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(out)
	// Output: HELLO, BRAID!
}
