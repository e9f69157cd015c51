package main

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/braidflow/braid/workflow"
)

func init() {
	register(&command{
		name:    "events",
		summary: "publish events to the tasks that wait on their topics",
		subs: []sub{
			{"publish", "TOPIC", "publish an event on a topic, waking every task whose wait on it matches", eventsPublish},
		},
	})
}

// publishView is a published event as `braid events publish --json`
// prints it.
type publishView struct {
	Topic string `json:"topic"`
	Woken int    `json:"woken"`
}

// eventsPublish publishes an event. Every task waiting on the topic whose
// filter matches the payload gets its next turn; the event is kept, so a
// wait recorded a moment later still sees it (see workflow.WaitEvent).
func eventsPublish(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("events publish")
	payload := fs.String("payload", "null", "the event's payload, as JSON; wait filters read it as payload")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(rest, "TOPIC"); err != nil {
		return err
	}
	topic := rest[0]
	if err := messageName("topic", topic); err != nil {
		return err
	}
	raw, err := jsonFlag("payload", *payload)
	if err != nil {
		return err
	}
	pool, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	eng, err := runEngine(pool)
	if err != nil {
		return err
	}
	woken, err := eng.Publish(ctx, topic, raw)
	_ = eng.Stop(context.WithoutCancel(ctx))
	var tooLarge *workflow.PayloadTooLargeError
	if errors.As(err, &tooLarge) {
		return fmt.Errorf("--payload is %d bytes, over the limit of %d bytes", tooLarge.Size, tooLarge.Limit)
	}
	if err != nil {
		return err
	}
	return c.emit(publishView{Topic: topic, Woken: woken}, func(w *tabwriter.Writer) {
		row(w, fmt.Sprintf("published an event on topic %q; it woke %s", topic, counted(woken, "waiting task")))
	})
}
