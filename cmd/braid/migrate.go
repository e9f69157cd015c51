package main

import (
	"context"
	"text/tabwriter"
	"time"

	"github.com/braidflow/braid/migrations"
)

func init() {
	register(&command{
		name:    "migrate",
		summary: "apply or revert the schema",
		subs: []sub{
			{"up", "", "apply every pending version", migrateRun("up")},
			{"down", "", "revert the most recently applied version", migrateRun("down")},
			{"redo", "", "revert the most recently applied version and apply it again", migrateRun("redo")},
			{"status", "", "list every version and whether it is applied", migrateStatus},
		},
	})
}

type migrationRow struct {
	Version   int64      `json:"version"`
	Name      string     `json:"name"`
	Direction string     `json:"direction,omitempty"`
	Applied   *bool      `json:"applied,omitempty"`
	AppliedAt *time.Time `json:"applied_at,omitempty"`
	Duration  string     `json:"duration,omitempty"`
}

func migrateRun(direction string) func(context.Context, *cli, []string) error {
	return func(ctx context.Context, c *cli, args []string) error {
		fs := c.flags("migrate " + direction)
		rest, err := parse(fs, args)
		if err != nil {
			return err
		}
		if len(rest) > 0 {
			return usagef("unexpected argument %q", rest[0])
		}
		pool, err := c.connect(ctx)
		if err != nil {
			return err
		}
		defer pool.Close()
		m, err := migrations.New(pool, nil)
		if err != nil {
			return err
		}
		defer m.Close()
		var res []migrations.Result
		switch direction {
		case "up":
			// A schema past this braid's has nothing to apply, which is
			// not "up to date": say so, as down and redo do.
			if err := m.CheckNotNewer(ctx); err != nil {
				return err
			}
			res, err = m.Up(ctx)
		case "down":
			res, err = m.Down(ctx)
		case "redo":
			res, err = m.Redo(ctx)
		}
		if err != nil {
			return err
		}
		rows := make([]migrationRow, 0, len(res))
		for _, r := range res {
			rows = append(rows, migrationRow{Version: r.Version, Name: r.Name, Direction: r.Direction, Duration: r.Duration.Round(time.Millisecond).String()})
		}
		return c.emit(rows, func(w *tabwriter.Writer) {
			if len(rows) == 0 {
				row(w, "nothing to do: the schema is up to date")
				return
			}
			row(w, "VERSION", "DIRECTION", "NAME")
			for _, r := range rows {
				row(w, r.Version, r.Direction, r.Name)
			}
		})
	}
}

func migrateStatus(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("migrate status")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usagef("unexpected argument %q", rest[0])
	}
	pool, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	st, err := migrations.Status(ctx, pool)
	if err != nil {
		return err
	}
	rows := make([]migrationRow, 0, len(st))
	for _, s := range st {
		applied := s.Applied
		r := migrationRow{Version: s.Version, Name: s.Name, Applied: &applied}
		if s.Applied {
			at := s.AppliedAt
			r.AppliedAt = &at
		}
		rows = append(rows, r)
	}
	return c.emit(rows, func(w *tabwriter.Writer) {
		row(w, "VERSION", "STATE", "APPLIED AT", "NAME")
		for _, r := range rows {
			state := "pending"
			if *r.Applied {
				state = "applied"
			}
			row(w, r.Version, state, ts(r.AppliedAt), r.Name)
		}
	})
}
