package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/braidflow/braid/internal/chaos"
)

func init() {
	register(&command{
		name:    "chaos",
		summary: "kill workers and PostgreSQL under load and report what was lost, with --run; prints JSON",
		run:     chaosCmd,
	})
}

// chaosCmd runs the fault suite on a private PostgreSQL, with worker
// processes that are this same executable started with chaos.EnvWorker
// set. Progress goes to stderr, one JSON object to stdout. It fails when
// a run was lost, a step recorded twice, a side effect duplicated or a
// deadlock seen. Without --run it only says what it would do.
func chaosCmd(ctx context.Context, c *cli, args []string) error {
	if chaos.IsWorker() {
		if code := chaos.WorkerMain(); code != 0 {
			return fmt.Errorf("worker exited with status %d", code)
		}
		return nil
	}
	fs := c.flags("chaos")
	start := fs.Bool("run", false, "run the fault suite; without it, braid chaos says what it would do and runs nothing")
	var cfg chaos.Config
	fs.DurationVar(&cfg.Duration, "duration", 0, "total time of the fault phases, shared by the scenarios (default 5m, quick 28s)")
	fs.IntVar(&cfg.Workers, "workers", chaos.WorkersDefault, "worker processes")
	fs.BoolVar(&cfg.Quick, "quick", false, "the smoke size: fewer, smaller runs and a shorter settle bound")
	fs.DurationVar(&cfg.SettleTimeout, "settle", 0, "how long runs may take to settle after the last fault (default 90s, quick 25s)")
	scenarios := fs.String("scenario", "", "comma-separated scenarios to run (default all: "+strings.Join(chaos.Scenarios, ",")+")")
	verbose := fs.Bool("v", false, "also print the workers' warnings on stderr")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usagef("unexpected argument %q", rest[0])
	}
	if c.databaseURL != "" {
		return usagef("chaos restarts PostgreSQL, so it always runs on a private cluster of its own; drop --database-url")
	}
	if *scenarios != "" {
		cfg.Scenarios = strings.Split(*scenarios, ",")
	}
	if !*start {
		fmt.Fprint(c.stderr, chaosPlan(cfg))
		return usagef("nothing was run: add --run to start the fault suite, or run `make chaos` (QUICK=1 for the smoke size)")
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this executable to start workers: %w", err)
	}
	cfg.WorkerCommand = []string{exe, "chaos"}
	cfg.Progress = c.stderr
	if *verbose {
		cfg.WorkerOutput = c.stderr
	}
	rep, err := chaos.Run(ctx, cfg)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(rep); err != nil {
		return err
	}
	if !rep.OK {
		return fmt.Errorf("%s", strings.Join(rep.Problems, "; "))
	}
	return nil
}

// chaosPlan says what braid chaos would do with cfg: its scenarios, how
// long, and what it prints.
func chaosPlan(cfg chaos.Config) string {
	scenarios := cfg.Scenarios
	if len(scenarios) == 0 {
		scenarios = chaos.Scenarios
	}
	d := cfg.Duration
	if d == 0 {
		d = chaos.DurationDefault
		if cfg.Quick {
			d = chaos.QuickDurationDefault
		}
	}
	var b strings.Builder
	size := "full"
	if cfg.Quick {
		size = "smoke"
	}
	fmt.Fprintf(&b, "braid chaos runs braid's fault suite at the %s size: %d worker processes under load while it injects faults, scenario by scenario:\n", size, cfg.Workers)
	fmt.Fprintf(&b, "  %s\n", strings.Join(scenarios, ", "))
	fmt.Fprintf(&b, "The fault phases share %s; settling comes on top.\n", d)
	b.WriteString("It starts a private PostgreSQL from the local server binaries, in a temporary directory it removes at the end, and restarts it as a fault.\n")
	b.WriteString("It prints its progress on stderr and one JSON object on stdout, and exits non-zero when a run was lost, a step recorded twice, a side effect duplicated or a deadlock seen.\n\n")
	return b.String()
}
