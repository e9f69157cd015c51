package workflow_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// A DAG: nodes declared with their dependencies and conditions, each node
// a task of the run, released one queue hop after its last dependency
// finishes. Here "shout" runs only when the text is short, so for a long
// text it is skipped, and "report" still runs on what "count" found.
func Example_dag() {
	ctx := context.Background()
	db, err := testutil.Open(ctx)
	if err != nil {
		panic(err)
	}
	defer db.Close()

	type doc struct {
		Text string `json:"text"`
	}
	splitW := workflow.Define("split", func(t *workflow.Task, in doc) ([]string, error) {
		return strings.Fields(in.Text), nil
	})
	split := workflow.Node("split", splitW)
	countW := workflow.Define("count", func(t *workflow.Task, in doc) (int, error) {
		words, err := split.Output(t)
		return len(words), err
	})
	count := workflow.Node("count", countW, workflow.After("split"))
	shoutW := workflow.Define("shout", func(t *workflow.Task, in doc) (string, error) {
		return strings.ToUpper(in.Text), nil
	})
	shout := workflow.Node("shout", shoutW, workflow.After("split"), workflow.When(`len(split) <= 3`))
	reportW := workflow.Define("report", func(t *workflow.Task, in doc) (string, error) {
		n, err := count.Output(t)
		return fmt.Sprintf("%d words", n), err
	})
	report := workflow.Node("report", reportW, workflow.After("count"))
	dag := workflow.DAG[doc]("text_dag", split, count, shout, report)

	defs := []workflow.Definition{dag, splitW, countW, shoutW, reportW}
	eng, err := workflow.NewEngine(db.Pool, &workflow.Config{Workflows: defs})
	if err != nil {
		panic(err)
	}
	if err := eng.Start(ctx); err != nil {
		panic(err)
	}
	defer eng.Stop(ctx)

	for _, text := range []string{"durable DAGs", "one queue hop per edge"} {
		run, err := dag.Start(ctx, eng, doc{Text: text}, nil)
		if err != nil {
			panic(err)
		}
		res, err := run.Result(ctx)
		if err != nil {
			panic(err)
		}
		r, _ := report.From(res)
		s, err := shout.From(res)
		if err != nil {
			s = "skipped"
		}
		fmt.Printf("%s; shout: %s\n", r, s)
	}
	// Output:
	// 2 words; shout: DURABLE DAGS
	// 5 words; shout: skipped
}
