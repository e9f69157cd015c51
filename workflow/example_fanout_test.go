package workflow_test

import (
	"context"
	"fmt"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// Fan-out and continuation. Map spawns one child task per item, each its
// own River job with its own retries; the parent suspends and gets one
// continuation turn once every child has finished.
func Example_fanOut() {
	ctx := context.Background()
	db, err := testutil.Open(ctx)
	if err != nil {
		panic(err)
	}
	defer db.Close()

	wordLength := workflow.Define("word_length", func(t *workflow.Task, word string) (int, error) {
		return len(word), nil
	})
	total := workflow.Define("total_length", func(t *workflow.Task, words []string) (int, error) {
		lengths, err := workflow.Map(t, "length", wordLength, words)
		if err != nil {
			return 0, err
		}
		sum := 0
		for _, n := range lengths {
			sum += n
		}
		return sum, nil
	})

	eng, err := workflow.NewEngine(db.Pool, &workflow.Config{Workflows: []workflow.Definition{wordLength, total}})
	if err != nil {
		panic(err)
	}
	if err := eng.Start(ctx); err != nil {
		panic(err)
	}
	defer eng.Stop(ctx)

	run, err := total.Start(ctx, eng, []string{"durable", "workflows", "on", "postgres"}, nil)
	if err != nil {
		panic(err)
	}
	out, err := run.Result(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(out)
	// Output: 26
}
