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
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/braidflow/braid/internal/bench"
	"github.com/braidflow/braid/queue"
)

func init() {
	register(&command{
		name:    "bench",
		summary: "measure braid beside raw River on the same database, with --run; prints JSON",
		run:     benchCmd,
	})
}

// benchCmd runs the benchmark: braid beside raw River doing the same work,
// in this process, on a private PostgreSQL or in scratch databases on the
// server of --database-url (or DATABASE_URL). Progress goes to stderr, one
// JSON object to stdout; --json changes nothing. It takes minutes, so
// without --run it only says what it would do.
func benchCmd(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("bench")
	start := fs.Bool("run", false, "run the benchmark; without it, braid bench says what it would do and runs nothing")
	var cfg bench.Config
	fs.BoolVar(&cfg.Quick, "quick", false, "smaller sizes, for a run of well under two minutes")
	fs.BoolVar(&cfg.Long, "long", false, "run the sustained scenario for 10 minutes")
	scenarios := fs.String("scenarios", "", "comma-separated scenarios to run (default all: "+strings.Join(bench.Scenarios, ",")+")")
	fs.IntVar(&cfg.Workers, "workers", queue.MaxWorkersDefault, "workers of the queue, on both sides")
	fs.DurationVar(&cfg.FetchCooldown, "fetch-cooldown", queue.FetchCooldownDefault, "River FetchCooldown, on both sides")
	fs.DurationVar(&cfg.FetchPollInterval, "fetch-poll-interval", queue.FetchPollIntervalDefault, "River FetchPollInterval, on both sides")
	fs.IntVar(&cfg.PoolMaxConns, "conns", bench.PoolMaxConnsDefault, "connection pool size, on both sides")
	fs.IntVar(&cfg.Sizes.Runs, "runs", 0, "runs and River jobs of the runs scenario (default 5000, quick 500)")
	fs.IntVar(&cfg.Sizes.Trials, "trials", 0, "trials of each side in the runs and fanout scenarios, alternately; each figure is their median (default 3, quick 1)")
	fs.IntVar(&cfg.Sizes.Chains, "chains", 0, "chains of the hop scenario (default 10, quick 3)")
	fs.IntVar(&cfg.Sizes.Fanout, "children", 0, "children of the fanout scenario (default 10000, quick 1000)")
	fs.IntVar(&cfg.Sizes.DAGChains, "dag-chains", 0, "chain DAGs of the dag scenario (default 10, quick 3)")
	fs.IntVar(&cfg.Sizes.DAGWidth, "dag-width", 0, "middle nodes of the dag scenario's diamond (default 1000)")
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
	if !*start {
		plan, err := benchPlan(cfg)
		if err != nil {
			return err
		}
		fmt.Fprint(c.stderr, plan)
		return usagef("nothing was run: add --run to start the benchmark, or run `make bench` (QUICK=1 for the quick sizes)")
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

// trialsOf says, in a scenario's line of the plan, how many trials each
// side has, when it has more than one.
func trialsOf(n int) string {
	if n < 2 {
		return ""
	}
	return fmt.Sprintf(": %d trials a side, alternately, each figure their median", n)
}

// benchPlan says what a benchmark with cfg would do: its scenarios with
// their sizes, where it would run, and what it prints.
func benchPlan(cfg bench.Config) (string, error) {
	sz, size := bench.FullSizes, "full"
	if cfg.Quick {
		sz, size = bench.QuickSizes, "quick"
	}
	over := func(v *int, o int) {
		if o != 0 {
			*v = o
		}
	}
	overD := func(v *time.Duration, o time.Duration) {
		if o != 0 {
			*v = o
		}
	}
	o := cfg.Sizes
	over(&sz.Runs, o.Runs)
	over(&sz.Trials, o.Trials)
	over(&sz.Chains, o.Chains)
	over(&sz.Fanout, o.Fanout)
	over(&sz.DAGChains, o.DAGChains)
	over(&sz.DAGWidth, o.DAGWidth)
	over(&sz.Delays, o.Delays)
	over(&sz.StepTasks, o.StepTasks)
	over(&sz.BurstDelays, o.BurstDelays)
	overD(&sz.DelayMin, o.DelayMin)
	overD(&sz.DelayMax, o.DelayMax)
	if cfg.Long {
		sz.Sustained = bench.SustainedLong
	}
	overD(&sz.Sustained, o.Sustained)
	rate := fmt.Sprintf("%.0f%% of braid's runs throughput", bench.SustainedLoad*100)
	if o.SustainedRate > 0 {
		rate = fmt.Sprintf("%g runs a second", o.SustainedRate)
	}
	what := map[string]string{
		bench.ScenarioRuns:       fmt.Sprintf("%d single-task runs, and as many River jobs%s", sz.Runs, trialsOf(sz.Trials)),
		bench.ScenarioHop:        fmt.Sprintf("%d chains of %d hops", sz.Chains, sz.Hops),
		bench.ScenarioFanout:     fmt.Sprintf("a Map over %d children, and as many River jobs%s", sz.Fanout, trialsOf(sz.Trials)),
		bench.ScenarioDAG:        fmt.Sprintf("%d chain DAGs of %d nodes and a diamond DAG %d wide, and River chains and a River diamond", sz.DAGChains, bench.DAGChainNodes, sz.DAGWidth),
		bench.ScenarioDelay:      fmt.Sprintf("%d delays of %s to %s, and as many scheduled River jobs", sz.Delays, sz.DelayMin, sz.DelayMax),
		bench.ScenarioDelayBurst: fmt.Sprintf("%d delays due at one instant, and as many River jobs", sz.BurstDelays),
		bench.ScenarioSteps:      fmt.Sprintf("%d tasks of %d steps, and as many River jobs", sz.StepTasks, sz.StepsPerTask),
		bench.ScenarioPool:       fmt.Sprintf("%d runs of four steps on pools of 4 and 16 connections", sz.PoolRuns),
		bench.ScenarioSustained:  fmt.Sprintf("runs offered at %s for %s on each side", rate, sz.Sustained),
	}
	scenarios := cfg.Scenarios
	if len(scenarios) == 0 {
		scenarios = bench.Scenarios
	}
	var b strings.Builder
	fmt.Fprintf(&b, "braid bench measures braid beside raw River doing the same work, in this process, at the %s sizes:\n", size)
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, name := range bench.Scenarios {
		if slices.Contains(scenarios, name) {
			fmt.Fprintf(w, "  %s\t%s\n", name, what[name])
		}
	}
	_ = w.Flush()
	if cfg.DatabaseURL == "" {
		b.WriteString("It starts a private PostgreSQL from the local server binaries, with fsync on, in a temporary directory it removes at the end.\n")
	} else {
		pc, err := pgx.ParseConfig(cfg.DatabaseURL)
		if err != nil {
			return "", usagef("invalid database URL: %v", err)
		}
		fmt.Fprintf(&b, "It works on the server at %s:%d in scratch databases it creates and drops (the role needs CREATEDB); database %s is never written to.\n",
			pc.Host, pc.Port, pc.Database)
	}
	switch {
	case cfg.Quick && !cfg.Long:
		b.WriteString("A quick run takes well under two minutes.\n")
	case cfg.Long:
		b.WriteString("A long run takes over twenty minutes.\n")
	default:
		b.WriteString("A full run takes about five minutes.\n")
	}
	b.WriteString("It prints its progress on stderr and one JSON object on stdout.\n\n")
	return b.String(), nil
}
