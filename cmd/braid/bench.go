package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"slices"
	"strings"

	"github.com/braidflow/braid/internal/bench"
	"github.com/braidflow/braid/queue"
)

func init() {
	register(&command{
		name:    "bench",
		summary: "measure braid beside raw River on the same database; prints JSON",
		run:     benchCmd,
	})
}

// benchCmd runs the benchmark: braid beside raw River doing the same work,
// in this process, on a private PostgreSQL or in scratch databases on the
// server of --database-url (or DATABASE_URL). Progress goes to stderr, one
// JSON object to stdout; --json changes nothing.
func benchCmd(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("bench")
	var cfg bench.Config
	fs.BoolVar(&cfg.Quick, "quick", false, "smaller sizes, for a run of well under two minutes")
	fs.BoolVar(&cfg.Long, "long", false, "run the sustained scenario for 10 minutes")
	scenarios := fs.String("scenarios", "", "comma-separated scenarios to run (default all: "+strings.Join(bench.Scenarios, ",")+")")
	fs.IntVar(&cfg.Workers, "workers", queue.MaxWorkersDefault, "workers of the queue, on both sides")
	fs.DurationVar(&cfg.FetchCooldown, "fetch-cooldown", queue.FetchCooldownDefault, "River FetchCooldown, on both sides")
	fs.DurationVar(&cfg.FetchPollInterval, "fetch-poll-interval", queue.FetchPollIntervalDefault, "River FetchPollInterval, on both sides")
	fs.IntVar(&cfg.PoolMaxConns, "conns", bench.PoolMaxConnsDefault, "connection pool size, on both sides")
	fs.IntVar(&cfg.Sizes.Runs, "runs", 0, "runs and River jobs of the runs scenario (default 5000, quick 500)")
	fs.IntVar(&cfg.Sizes.Chains, "chains", 0, "chains of the hop scenario (default 10, quick 3)")
	fs.IntVar(&cfg.Sizes.Fanout, "children", 0, "children of the fanout scenario (default 10000, quick 1000)")
	fs.IntVar(&cfg.Sizes.Delays, "delays", 0, "delays of the delay scenario (default 1000, quick 200)")
	fs.IntVar(&cfg.Sizes.StepTasks, "step-tasks", 0, "tasks of the steps scenario (default 200, quick 50)")
	fs.IntVar(&cfg.Sizes.BurstDelays, "burst", 0, "delays of the delay_burst scenario, all due at one instant (default 1000)")
	fs.DurationVar(&cfg.Sizes.Sustained, "sustained", 0, "length of the sustained scenario on each side (default 60s, quick 20s, long 10m)")
	fs.Float64Var(&cfg.Sizes.SustainedRate, "sustained-rate", 0, "runs per second the sustained scenario offers (default 70% of braid's runs throughput)")
	fs.DurationVar(&cfg.Sizes.DelayMin, "delay-min", 0, "shortest delay (default 500ms)")
	fs.DurationVar(&cfg.Sizes.DelayMax, "delay-max", 0, "longest delay (default 3s)")
	fs.IntVar(&cfg.Statements, "statements", 0, "after each side, print its N costliest SQL statements (pg_stat_statements)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole benchmark to this file")
	verbose := fs.Bool("v", false, "also print the engine's and River's warnings on stderr")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usagef("unexpected argument %q", rest[0])
	}
	if *scenarios != "" {
		for _, name := range strings.Split(*scenarios, ",") {
			if !slices.Contains(bench.Scenarios, name) {
				return usagef("unknown scenario %q; the scenarios are %s", name, strings.Join(bench.Scenarios, ", "))
			}
			cfg.Scenarios = append(cfg.Scenarios, name)
		}
	}
	cfg.DatabaseURL = c.databaseURL
	if cfg.DatabaseURL == "" {
		cfg.DatabaseURL = os.Getenv("DATABASE_URL")
	}
	cfg.Progress = c.stderr
	if *verbose {
		cfg.Logger = slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("creating the CPU profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("starting the CPU profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}

	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(rep)
}
