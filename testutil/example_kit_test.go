package testutil_test

import (
	"context"
	"fmt"
	"time"

	"github.com/braidflow/braid/scheduler"
	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// Three days pass in a test, on the database's clock: a trial that ends
// after 72 hours ends, and nobody waits for it. In a test, use
// testutil.NewKit(t, defs...) instead of OpenKit.
func ExampleKit_Advance() {
	ctx := context.Background()
	trial := workflow.Define("trial", func(t *workflow.Task, user string) (string, error) {
		if err := t.Delay("trial", 72*time.Hour); err != nil {
			return "", err
		}
		return "trial of " + user + " ended", nil
	})
	kit, err := testutil.OpenKit(ctx, nil, trial)
	if err != nil {
		panic(err)
	}
	defer kit.Close()

	run, err := trial.Start(ctx, kit.Engine, "ada", nil)
	if err != nil {
		panic(err)
	}
	start := kit.Now()
	kit.Advance(72 * time.Hour)
	out, err := run.Result(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(out, "after", kit.Now().Sub(start))
	// Output: trial of ada ended after 72h0m0s
}

// A week of a @daily schedule, in a moment: each slot fires at its own
// midnight by the database's clock.
func ExampleKit_Advance_schedule() {
	ctx := context.Background()
	report := workflow.Define("report", func(t *workflow.Task, _ struct{}) (string, error) {
		return "done", nil
	})
	kit, err := testutil.OpenKit(ctx, &testutil.KitConfig{Scheduler: &scheduler.Config{}}, report)
	if err != nil {
		panic(err)
	}
	defer kit.Close()

	if _, err := kit.Scheduler.Create(ctx, &scheduler.ScheduleParams{Name: "nightly report", Expression: "@daily",
		TimeZone: "UTC", TargetType: scheduler.TargetWorkflow, Target: "report", Args: struct{}{}}); err != nil {
		panic(err)
	}
	kit.Advance(7 * 24 * time.Hour)

	rows, err := kit.Pool.Query(ctx, `SELECT created_at FROM braid_runs WHERE workflow = 'report' ORDER BY created_at`)
	if err != nil {
		panic(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var at time.Time
		if err := rows.Scan(&at); err != nil {
			panic(err)
		}
		n++
		fmt.Printf("run %d at %s\n", n, at.UTC().Format("15:04:05"))
	}
	fmt.Println(n, "runs in 7 days")
	// Output:
	// run 1 at 00:00:00
	// run 2 at 00:00:00
	// run 3 at 00:00:00
	// run 4 at 00:00:00
	// run 5 at 00:00:00
	// run 6 at 00:00:00
	// run 7 at 00:00:00
	// 7 runs in 7 days
}
