package workflow_test

import (
	"context"
	"fmt"
	"time"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// A workflow that waits for a person. An approval waits for the signal
// "decision", with a timeout: a run that hears nothing within it is
// rejected. The waiting task costs nothing while it waits; the send wakes
// it in the transaction that records the signal.
func Example_signal() {
	ctx := context.Background()
	db, err := testutil.Open(ctx)
	if err != nil {
		panic(err)
	}
	defer db.Close()

	type Decision struct {
		Approved bool   `json:"approved"`
		By       string `json:"by"`
	}
	approval := workflow.Define("approval", func(t *workflow.Task, doc string) (string, error) {
		d, ok, err := workflow.WaitSignal[Decision](t, "decision", 2*time.Second)
		switch {
		case err != nil:
			return "", err // ErrSuspended until the signal or the timeout
		case !ok:
			return doc + ": rejected, nobody decided in time", nil
		case d.Approved:
			return doc + ": approved by " + d.By, nil
		}
		return doc + ": rejected by " + d.By, nil
	})

	eng, err := workflow.NewEngine(db.Pool, &workflow.Config{Workflows: []workflow.Definition{approval}})
	if err != nil {
		panic(err)
	}
	if err := eng.Start(ctx); err != nil {
		panic(err)
	}
	defer eng.Stop(ctx)

	answered, err := approval.Start(ctx, eng, "budget.pdf", &workflow.StartOpts{IdempotencyKey: "approval/budget.pdf"})
	if err != nil {
		panic(err)
	}
	ignored, err := approval.Start(ctx, eng, "memo.pdf", nil)
	if err != nil {
		panic(err)
	}
	// Elsewhere, later: the run is found by its business identifier.
	run, err := approval.GetByKey(ctx, eng, "approval/budget.pdf")
	if err != nil {
		panic(err)
	}
	if err := run.Signal(ctx, "decision", Decision{Approved: true, By: "ana"}, nil); err != nil {
		panic(err)
	}
	for _, r := range []*workflow.Run[string]{answered, ignored} {
		out, err := r.Result(ctx)
		if err != nil {
			panic(err)
		}
		fmt.Println(out)
	}
	// Output:
	// budget.pdf: approved by ana
	// memo.pdf: rejected, nobody decided in time
}

// Waiting for an event. Each shipment waits for the event on the topic
// "deliveries" that names its own parcel: the filter compares the event's
// payload with the task's input. One publish wakes the waits it matches,
// and no other.
func Example_event() {
	ctx := context.Background()
	db, err := testutil.Open(ctx)
	if err != nil {
		panic(err)
	}
	defer db.Close()

	type Delivered struct {
		Parcel string `json:"parcel"`
		At     string `json:"at"`
	}
	shipment := workflow.Define("shipment", func(t *workflow.Task, parcel string) (string, error) {
		d, ok, err := workflow.WaitEvent[Delivered](t, "deliveries", `payload.parcel == input`, time.Hour)
		if err != nil {
			return "", err
		}
		if !ok {
			return parcel + " lost", nil
		}
		return parcel + " delivered at " + d.At, nil
	})

	eng, err := workflow.NewEngine(db.Pool, &workflow.Config{Workflows: []workflow.Definition{shipment}})
	if err != nil {
		panic(err)
	}
	if err := eng.Start(ctx); err != nil {
		panic(err)
	}
	defer eng.Stop(ctx)

	a, err := shipment.Start(ctx, eng, "P-1", nil)
	if err != nil {
		panic(err)
	}
	b, err := shipment.Start(ctx, eng, "P-2", nil)
	if err != nil {
		panic(err)
	}
	// Wait until both shipments wait, as an inspection shows.
	for waiting := 0; waiting < 2; {
		waiting = 0
		for _, r := range []*workflow.Run[string]{a, b} {
			info, err := eng.Run(ctx, r.ID)
			if err != nil {
				panic(err)
			}
			if info.Status == "waiting" {
				waiting++
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, d := range []Delivered{{Parcel: "P-2", At: "door"}, {Parcel: "P-1", At: "locker"}} {
		woken, err := eng.Publish(ctx, "deliveries", d)
		if err != nil {
			panic(err)
		}
		fmt.Println("woke", woken)
	}
	for _, r := range []*workflow.Run[string]{a, b} {
		out, err := r.Result(ctx)
		if err != nil {
			panic(err)
		}
		fmt.Println(out)
	}
	// Output:
	// woke 1
	// woke 1
	// P-1 delivered at locker
	// P-2 delivered at door
}
