package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/braidflow/braid/scheduler"
)

func init() {
	register(&command{
		name:    "recurring",
		summary: "inspect and switch per-entity recurring jobs",
		subs: []sub{
			{"list", "", "list recurring jobs by kind and key", recurringList},
			{"enable", "KIND KEY", "enable a recurring job", recurringSet("enable", (*scheduler.Scheduler).Enable)},
			{"disable", "KIND KEY", "disable a recurring job", recurringSet("disable", (*scheduler.Scheduler).Disable)},
			{"revive", "KIND KEY", "bring a dead recurring job back from the dead letters, due now", recurringSet("revive", (*scheduler.Scheduler).Revive)},
		},
	})
}

// recurringState names a recurring job's state for tables: dead (parked as
// a dead letter), running, enabled or disabled.
func recurringState(r *scheduler.Recurring) string {
	switch {
	case r.DeadAt != nil:
		return "dead"
	case r.RunningSince != nil && r.Enabled:
		return "running"
	case r.RunningSince != nil:
		return "running, disabled"
	case r.Enabled:
		return "enabled"
	}
	return "disabled"
}

func recurringTable(w io.Writer, list []*scheduler.Recurring) {
	if len(list) == 0 {
		row(w, "no recurring jobs")
		return
	}
	row(w, "KIND", "KEY", "STATE", "NEXT RUN", "LAST RUN", "FAILURES", "LAST ERROR")
	for _, r := range list {
		row(w, r.Kind, r.Key, recurringState(r), at(r.NextRunAt), ts(r.LastRunAt), r.ConsecutiveFailures, orDash(clip(r.LastError, clipDefault)))
	}
}

func recurringList(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("recurring list")
	kind := fs.String("kind", "", "only recurring jobs of this kind")
	var enabled, dead optBool
	fs.Var(&enabled, "enabled", "only enabled jobs (--enabled) or disabled ones (--enabled=false)")
	fs.Var(&dead, "dead", "only dead letters (--dead) or live jobs (--dead=false)")
	limit := fs.Int("limit", 100, fmt.Sprintf("the most recurring jobs to list, by kind and key (1 to %d)", schedulesListMax))
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(rest); err != nil {
		return err
	}
	if err := limitFlag(*limit, schedulesListMax); err != nil {
		return err
	}
	pool, s, err := c.openScheduler(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	list, err := s.ListRecurring(ctx, &scheduler.RecurringListParams{Kind: *kind, Enabled: enabled.v, Dead: dead.v, Limit: *limit})
	if err != nil {
		return err
	}
	if list == nil {
		list = []*scheduler.Recurring{}
	}
	return c.emit(list, func(w *tabwriter.Writer) { recurringTable(w, list) })
}

// recurringSet builds the subcommands that change one recurring job.
func recurringSet(name string, op func(*scheduler.Scheduler, context.Context, string, string) (*scheduler.Recurring, error)) func(context.Context, *cli, []string) error {
	return func(ctx context.Context, c *cli, args []string) error {
		fs := c.flags("recurring " + name)
		rest, err := parse(fs, args)
		if err != nil {
			return err
		}
		if err := wantArgs(rest, "KIND", "KEY"); err != nil {
			return err
		}
		kind, key := rest[0], rest[1]
		pool, s, err := c.openScheduler(ctx)
		if err != nil {
			return err
		}
		defer pool.Close()
		r, err := op(s, ctx, kind, key)
		if errors.Is(err, scheduler.ErrRecurringNotFound) {
			return fmt.Errorf("recurring job %s %q not found", kind, key)
		}
		if err != nil {
			return err
		}
		return c.emit(r, func(w *tabwriter.Writer) { recurringTable(w, []*scheduler.Recurring{r}) })
	}
}
