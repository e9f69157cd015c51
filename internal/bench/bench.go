package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/braidflow/braid/queue"
)

// Scenario names, in the order Run measures them.
const (
	ScenarioRuns       = "runs"
	ScenarioHop        = "hop"
	ScenarioFanout     = "fanout"
	ScenarioDAG        = "dag"
	ScenarioDelay      = "delay"
	ScenarioDelayBurst = "delay_burst"
	ScenarioSteps      = "steps"
	ScenarioPool       = "pool"
	ScenarioSustained  = "sustained"
)

// Scenarios lists every scenario in the order Run measures them. The
// sustained scenario comes after runs, whose throughput sets its load.
var Scenarios = []string{
	ScenarioRuns, ScenarioHop, ScenarioFanout, ScenarioDAG, ScenarioDelay, ScenarioDelayBurst,
	ScenarioSteps, ScenarioPool, ScenarioSustained,
}

// Defaults of Config.
const (
	// PoolMaxConnsDefault is the size of the connection pool each side
	// works through.
	PoolMaxConnsDefault = 20
	// ScenarioTimeoutDefault bounds one side of one scenario.
	ScenarioTimeoutDefault = 10 * time.Minute
	// SeedDefault seeds the random delay lengths, so that every run of the
	// benchmark draws the same ones.
	SeedDefault = 7
	// StatsSettleDefault is the pause before a side's first reading of its
	// commits: a busy PostgreSQL 15 backend publishes its counters at most
	// once a second (PGSTAT_MIN_INTERVAL).
	StatsSettleDefault = 1100 * time.Millisecond
	// SustainedLong is the length of the sustained scenario with
	// Config.Long.
	SustainedLong = 10 * time.Minute
	// SustainedLoad is the share of braid's measured throughput of no-op
	// runs (the runs scenario's braid_per_sec) that the sustained scenario
	// offers, unless Sizes.SustainedRate sets the rate.
	SustainedLoad = 0.7
)

// Sizes are the sizes of the scenarios. A zero field takes the full or
// quick default (FullSizes, QuickSizes).
type Sizes struct {
	// Runs is how many single-task runs, and River jobs, the runs scenario
	// starts and completes.
	Runs int
	// Trials is how many times the runs and fanout scenarios measure each
	// side, alternately: River, braid, River, braid, and so on. Each of
	// their figures is the median of its side's trials, so that a moment
	// when a shared machine is busy moves one trial and not the figure; the
	// trials' times are reported beside it. Default 3 (quick 1).
	Trials int
	// Hops is the length of one chain in the hop scenario, in hops: a
	// chain has Hops+1 tasks, or jobs.
	Hops int
	// Chains is how many chains the hop scenario runs, one after another.
	Chains int
	// Fanout is how many children the fanout scenario's Map spawns, and how
	// many River jobs its baseline burns down.
	Fanout int
	// DAGChains is how many chain DAGs (of dagChainNodes nodes) the dag
	// scenario runs one after another, and how many River chains of as
	// many jobs.
	DAGChains int
	// DAGWidth is how many middle nodes the dag scenario's diamond has
	// between its root and its sink, and how many middle jobs River's.
	DAGWidth int
	// Delays is how many delays, and scheduled River jobs, the delay
	// scenario sets.
	Delays int
	// DelayMin and DelayMax bound the random length of each delay.
	DelayMin, DelayMax time.Duration
	// DelaySpread is the time over which the delays are set, evenly.
	// Default: one interval of River's scheduler (5s), so that River's
	// scheduled jobs meet its scheduler in every phase.
	DelaySpread time.Duration
	// StepTasks is how many tasks, and River jobs, the steps scenario runs
	// at once.
	StepTasks int
	// StepsPerTask is how many inline steps each of those tasks runs.
	StepsPerTask int
	// PoolRuns is how many runs of four steps the pool scenario starts at
	// once, on each pool size.
	PoolRuns int
	// BurstDelays is how many delays, and scheduled River jobs, the
	// delay_burst scenario sets, all due at one instant.
	BurstDelays int
	// BurstLead is how long after the delay_burst scenario's set-up is
	// expected to end its delays are due. Default 2s.
	BurstLead time.Duration
	// Sustained is how long the sustained scenario offers its load on each
	// side. Default 60s (quick 20s; Config.Long: SustainedLong).
	Sustained time.Duration
	// SustainedWindow is the window over which the sustained scenario
	// counts completed runs. Default 10s. Sustained must hold at least two.
	SustainedWindow time.Duration
	// SustainedRetention is how long the sustained scenario keeps finished
	// runs (workflow.Config.Retention) and completed River jobs (River's
	// CompletedJobRetentionPeriod), on both sides. Default 10s.
	SustainedRetention time.Duration
	// SustainedRate is the load the sustained scenario offers, in runs (and
	// River jobs) per second. Default: SustainedLoad times braid's
	// throughput of no-op runs, from the runs scenario when it ran, or
	// else from a probe of up to probeRuns runs.
	SustainedRate float64
}

// FullSizes are the sizes of a full benchmark.
var FullSizes = Sizes{
	Runs: 5000, Trials: 3, Hops: 20, Chains: 10, Fanout: 10_000, DAGChains: 10, DAGWidth: 1000,
	Delays: 1000, DelayMin: 500 * time.Millisecond, DelayMax: 3 * time.Second, DelaySpread: riverSchedulerInterval,
	StepTasks: 200, StepsPerTask: 10, PoolRuns: 300,
	BurstDelays: 1000, BurstLead: 2 * time.Second,
	Sustained: time.Minute, SustainedWindow: 10 * time.Second, SustainedRetention: 10 * time.Second,
}

// QuickSizes are the sizes of a quick benchmark (Config.Quick), which runs
// in well under two minutes. The sustained scenario's 20 seconds are
// shorter than the 30-second interval of River's job cleaner, so the
// retention of the River side's river_job does not show in a quick run.
var QuickSizes = Sizes{
	Runs: 500, Trials: 1, Hops: 20, Chains: 3, Fanout: 1000, DAGChains: 3, DAGWidth: 1000,
	Delays: 200, DelayMin: 500 * time.Millisecond, DelayMax: 3 * time.Second, DelaySpread: riverSchedulerInterval,
	StepTasks: 50, StepsPerTask: 10, PoolRuns: 300,
	BurstDelays: 1000, BurstLead: 2 * time.Second,
	Sustained: 20 * time.Second, SustainedWindow: 10 * time.Second, SustainedRetention: 10 * time.Second,
}

// Config configures a benchmark. The zero value runs the full benchmark on
// a private PostgreSQL cluster.
type Config struct {
	// DatabaseURL points at the server to measure on. Every side of every
	// scenario works in its own scratch database, cloned on that server
	// from a freshly migrated template and dropped afterwards, so the
	// database named in the URL is never written to; its role needs
	// CREATEDB. Default: a private cluster from the local PostgreSQL
	// binaries, with fsync on, in a temporary directory removed at the end.
	DatabaseURL string

	// Quick selects QuickSizes instead of FullSizes.
	Quick bool

	// Long runs the sustained scenario for SustainedLong instead of its
	// full or quick length. Sizes.Sustained overrides it.
	Long bool

	// Sizes overrides the sizes field by field.
	Sizes Sizes

	// Scenarios selects the scenarios to run. Default: all of Scenarios.
	Scenarios []string

	// Workers is the worker count of the one queue both sides work.
	// Default queue.MaxWorkersDefault.
	Workers int

	// FetchCooldown and FetchPollInterval are given to both sides. Default
	// queue.FetchCooldownDefault and queue.FetchPollIntervalDefault,
	// braid's defaults.
	FetchCooldown     time.Duration
	FetchPollInterval time.Duration

	// PoolMaxConns is the size of each side's connection pool. Default
	// PoolMaxConnsDefault.
	PoolMaxConns int

	// ScenarioTimeout bounds one side of one scenario; a side of the
	// sustained scenario gets Sizes.Sustained on top. Default
	// ScenarioTimeoutDefault.
	ScenarioTimeout time.Duration

	// Seed seeds the random delay lengths. Default SeedDefault.
	Seed uint64

	// StatsSettle is the pause before each side's first reading of the
	// transactions its database committed, so that the backends of its
	// pool have published their counters. Shorter saves time but may count
	// some of the set-up's transactions in the measured phase. Default
	// StatsSettleDefault.
	StatsSettle time.Duration

	// Statements, when positive, prints to Progress after each side the
	// Statements statements of that side's database with the most total
	// execution time, from pg_stat_statements: a profile of the database's
	// work. A private cluster preloads the extension; a server named by
	// DatabaseURL must preload it already. Default 0: off.
	Statements int

	// Progress receives a line per measurement as the benchmark goes.
	// Default: discarded.
	Progress io.Writer

	// Logger receives the engine's and River's logs. Default: discarded.
	Logger *slog.Logger
}

// Report is what a benchmark measured. It encodes to the JSON that
// `braid bench` prints.
type Report struct {
	Machine   Machine       `json:"machine"`
	Config    ReportConfig  `json:"config"`
	Scenarios ScenarioSet   `json:"scenarios"`
	Targets   []TargetCheck `json:"targets"`
}

// Machine describes where the figures were taken.
type Machine struct {
	CPUs     int    `json:"cpus"`
	Go       string `json:"go"`
	OS       string `json:"os"`
	Postgres string `json:"postgres"`
	// Database is "private" for a private cluster, or "url" for
	// Config.DatabaseURL.
	Database string `json:"database"`
	// Fsync is the server's fsync setting.
	Fsync string `json:"fsync"`
}

// ReportConfig is the configuration both sides ran with.
type ReportConfig struct {
	Quick               bool    `json:"quick"`
	Long                bool    `json:"long"`
	Workers             int     `json:"workers"`
	FetchCooldownMs     float64 `json:"fetch_cooldown_ms"`
	FetchPollIntervalMs float64 `json:"fetch_poll_interval_ms"`
	PoolMaxConns        int     `json:"pool_max_conns"`
	Seed                uint64  `json:"seed"`
}

// ScenarioSet holds the result of each scenario that ran. Every result
// has braid_commits_per_run and river_commits_per_run, the transactions
// the side's database committed per unit of work (the package doc's
// Commits section says what is counted); each result's doc names its
// unit.
type ScenarioSet struct {
	Runs       *RunsResult       `json:"runs,omitempty"`
	Hop        *HopResult        `json:"hop,omitempty"`
	Fanout     *FanoutResult     `json:"fanout,omitempty"`
	DAG        *DAGResult        `json:"dag,omitempty"`
	Delay      *DelayResult      `json:"delay,omitempty"`
	DelayBurst *DelayBurstResult `json:"delay_burst,omitempty"`
	Steps      *StepsResult      `json:"steps,omitempty"`
	Pool       *PoolResult       `json:"pool,omitempty"`
	Sustained  *SustainedResult  `json:"sustained,omitempty"`
}

// RunsResult is the throughput of no-op single-task runs against no-op
// River jobs. Ratio is braid over River. Commits are per run, and per
// River job. Each side ran Trials times (Sizes.Trials); its time and
// commits are the medians of its trials, and its per-second figure is N
// over that median time.
type RunsResult struct {
	N                  int     `json:"n"`
	BraidPerSec        float64 `json:"braid_per_sec"`
	RiverPerSec        float64 `json:"river_per_sec"`
	Ratio              float64 `json:"ratio"`
	BraidS             float64 `json:"braid_s"`
	RiverS             float64 `json:"river_s"`
	BraidCommitsPerRun float64 `json:"braid_commits_per_run"`
	RiverCommitsPerRun float64 `json:"river_commits_per_run"`
	TrialTimes
}

// TrialTimes are the trials of a scenario that measures each side
// Sizes.Trials times: how many, and each side's trials' times in seconds,
// in the order they ran.
type TrialTimes struct {
	Trials       int       `json:"trials"`
	BraidTrialsS []float64 `json:"braid_trials_s"`
	RiverTrialsS []float64 `json:"river_trials_s"`
}

// HopResult is the latency of one hop in a chain of tasks, each continuing
// the next, against a River chain in which each job inserts its successor
// and completes in one transaction. A hop is measured from the start of
// one task's turn (one job's work) to the start of the next one's.
// Commits are per link of the counted chains (a task, or a River job): a
// chain of Hops hops has Hops+1 links.
type HopResult struct {
	Hops               int     `json:"hops"`
	Chains             int     `json:"chains"`
	BraidP50Ms         float64 `json:"braid_p50_ms"`
	BraidP99Ms         float64 `json:"braid_p99_ms"`
	RiverP50Ms         float64 `json:"river_p50_ms"`
	RiverP99Ms         float64 `json:"river_p99_ms"`
	BraidCommitsPerRun float64 `json:"braid_commits_per_run"`
	RiverCommitsPerRun float64 `json:"river_commits_per_run"`
}

// FanoutResult is the time of a Map over no-op children until the parent
// completes, against River burning down as many no-op jobs. Ratio is braid
// over River. Commits are per child, and per River job. As in RunsResult,
// each side's time and commits are the medians of its Trials trials.
type FanoutResult struct {
	Children           int     `json:"children"`
	BraidS             float64 `json:"braid_s"`
	RiverS             float64 `json:"river_s"`
	Ratio              float64 `json:"ratio"`
	BraidCommitsPerRun float64 `json:"braid_commits_per_run"`
	RiverCommitsPerRun float64 `json:"river_commits_per_run"`
	TrialTimes
}

// DelayResult is the lateness of delays: the start of the turn after the
// delay (the time its job was fetched) minus resume_at, against River jobs
// with ScheduledAt, whose lateness is attempted_at minus scheduled_at. Both
// are read from the database clock. The waits start evenly over SpreadS
// seconds, by default one interval of River's scheduler. Commits are per
// delay (a run of one delay), and per scheduled River job.
type DelayResult struct {
	N                  int     `json:"n"`
	MinMs              float64 `json:"min_ms"`
	MaxMs              float64 `json:"max_ms"`
	SpreadS            float64 `json:"spread_s"`
	BraidP50LateMs     float64 `json:"braid_p50_late_ms"`
	BraidP99LateMs     float64 `json:"braid_p99_late_ms"`
	RiverP50LateMs     float64 `json:"river_p50_late_ms"`
	RiverP99LateMs     float64 `json:"river_p99_late_ms"`
	BraidCommitsPerRun float64 `json:"braid_commits_per_run"`
	RiverCommitsPerRun float64 `json:"river_commits_per_run"`
}

// DelayBurstResult is the lateness of N delays all due at one instant,
// measured as in DelayResult, against N River jobs with the same
// ScheduledAt. Commits are per delay (a run of one delay, set-up
// included), and per scheduled River job.
type DelayBurstResult struct {
	N                  int     `json:"n"`
	BraidP50LateMs     float64 `json:"braid_p50_late_ms"`
	BraidP99LateMs     float64 `json:"braid_p99_late_ms"`
	RiverP50LateMs     float64 `json:"river_p50_late_ms"`
	RiverP99LateMs     float64 `json:"river_p99_late_ms"`
	BraidCommitsPerRun float64 `json:"braid_commits_per_run"`
	RiverCommitsPerRun float64 `json:"river_commits_per_run"`
}

// StepsResult is the throughput of inline steps in tasks that run at once,
// against River jobs that each make as many plain INSERTs of the same
// shape. Ratio is braid over River. Commits are per step, and per INSERT.
type StepsResult struct {
	StepsPerTask       int     `json:"steps_per_task"`
	Tasks              int     `json:"tasks"`
	BraidStepsPerSec   float64 `json:"braid_steps_per_sec"`
	RiverStepsPerSec   float64 `json:"river_steps_per_sec"`
	Ratio              float64 `json:"ratio"`
	BraidCommitsPerRun float64 `json:"braid_commits_per_run"`
	RiverCommitsPerRun float64 `json:"river_commits_per_run"`
}

// TargetCheck says whether one figure meets its target.
type TargetCheck struct {
	Figure string  `json:"figure"`
	Value  float64 `json:"value"`
	Target string  `json:"target"`
	Met    bool    `json:"met"`
}

// bench is one benchmark in progress.
type bench struct {
	cfg      Config
	sizes    Sizes
	srv      *server
	progress io.Writer
	logger   *slog.Logger
	rng      *rand.Rand
	// runsPerSec is braid's measured throughput of no-op runs, once the
	// runs scenario or a probe measured it.
	runsPerSec float64
}

// Run measures the selected scenarios, each side beside the other on the
// same server with the same River configuration, and returns the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	b, err := newBench(cfg)
	if err != nil {
		return nil, err
	}
	b.say("starting the database server")
	b.srv, err = openServer(ctx, b.cfg.DatabaseURL, b.cfg.PoolMaxConns, b.cfg.Statements > 0)
	if err != nil {
		return nil, err
	}
	defer b.srv.close()

	rep := &Report{
		Machine: Machine{
			CPUs:     runtime.NumCPU(),
			Go:       runtime.Version(),
			OS:       runtime.GOOS + "/" + runtime.GOARCH,
			Postgres: b.srv.version,
			Database: b.srv.kind,
			Fsync:    b.srv.fsync,
		},
		Config: ReportConfig{
			Quick:               b.cfg.Quick,
			Long:                b.cfg.Long,
			Workers:             b.cfg.Workers,
			FetchCooldownMs:     ms(b.cfg.FetchCooldown),
			FetchPollIntervalMs: ms(b.cfg.FetchPollInterval),
			PoolMaxConns:        b.cfg.PoolMaxConns,
			Seed:                b.cfg.Seed,
		},
		Targets: []TargetCheck{},
	}
	b.say("PostgreSQL %s (%s, fsync %s), %d CPUs, %s", rep.Machine.Postgres, rep.Machine.Database, rep.Machine.Fsync, rep.Machine.CPUs, rep.Machine.Go)
	for _, name := range b.cfg.Scenarios {
		var err error
		switch name {
		case ScenarioRuns:
			rep.Scenarios.Runs, err = b.runs(ctx)
		case ScenarioHop:
			rep.Scenarios.Hop, err = b.hop(ctx)
		case ScenarioFanout:
			rep.Scenarios.Fanout, err = b.fanout(ctx)
		case ScenarioDAG:
			rep.Scenarios.DAG, err = b.dag(ctx)
		case ScenarioDelay:
			rep.Scenarios.Delay, err = b.delay(ctx)
		case ScenarioDelayBurst:
			rep.Scenarios.DelayBurst, err = b.delayBurst(ctx)
		case ScenarioSteps:
			rep.Scenarios.Steps, err = b.steps(ctx)
		case ScenarioPool:
			rep.Scenarios.Pool, err = b.pool(ctx)
		case ScenarioSustained:
			rep.Scenarios.Sustained, err = b.sustained(ctx)
		}
		if err != nil {
			return nil, fmt.Errorf("bench: scenario %s: %w", name, err)
		}
	}
	rep.Targets = targets(&rep.Scenarios)
	return rep, nil
}

// newBench validates cfg and fills in its defaults.
func newBench(cfg Config) (*bench, error) {
	base := FullSizes
	if cfg.Quick {
		base = QuickSizes
	}
	s := cfg.Sizes
	fill := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	fill(&s.Runs, base.Runs)
	fill(&s.Trials, base.Trials)
	fill(&s.Hops, base.Hops)
	fill(&s.Chains, base.Chains)
	fill(&s.Fanout, base.Fanout)
	fill(&s.DAGChains, base.DAGChains)
	fill(&s.DAGWidth, base.DAGWidth)
	fill(&s.Delays, base.Delays)
	fill(&s.StepTasks, base.StepTasks)
	fill(&s.StepsPerTask, base.StepsPerTask)
	fill(&s.PoolRuns, base.PoolRuns)
	fill(&s.BurstDelays, base.BurstDelays)
	if s.DelayMin == 0 && s.DelayMax == 0 {
		s.DelayMin, s.DelayMax = base.DelayMin, base.DelayMax
	}
	fillD := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	fillD(&s.DelaySpread, base.DelaySpread)
	fillD(&s.BurstLead, base.BurstLead)
	if cfg.Long {
		fillD(&s.Sustained, SustainedLong)
	}
	fillD(&s.Sustained, base.Sustained)
	fillD(&s.SustainedWindow, base.SustainedWindow)
	fillD(&s.SustainedRetention, base.SustainedRetention)
	for _, f := range []struct {
		name string
		v    int
	}{
		{"Runs", s.Runs}, {"Trials", s.Trials}, {"Hops", s.Hops}, {"Chains", s.Chains}, {"Fanout", s.Fanout},
		{"DAGChains", s.DAGChains}, {"DAGWidth", s.DAGWidth},
		{"Delays", s.Delays}, {"StepTasks", s.StepTasks}, {"StepsPerTask", s.StepsPerTask}, {"PoolRuns", s.PoolRuns},
		{"BurstDelays", s.BurstDelays},
	} {
		if f.v < 1 {
			return nil, fmt.Errorf("bench: Sizes.%s is %d; it must be at least 1", f.name, f.v)
		}
	}
	if s.DelayMin < 0 || s.DelayMax < s.DelayMin {
		return nil, fmt.Errorf("bench: delay lengths %s to %s are not a range of non-negative durations", s.DelayMin, s.DelayMax)
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{
		{"DelaySpread", s.DelaySpread}, {"BurstLead", s.BurstLead}, {"Sustained", s.Sustained},
		{"SustainedWindow", s.SustainedWindow}, {"SustainedRetention", s.SustainedRetention},
	} {
		if f.v < 0 {
			return nil, fmt.Errorf("bench: Sizes.%s %s is negative", f.name, f.v)
		}
	}
	if s.Sustained < 2*s.SustainedWindow {
		return nil, fmt.Errorf("bench: Sizes.Sustained %s holds fewer than two windows of %s", s.Sustained, s.SustainedWindow)
	}
	if s.SustainedRate < 0 || math.IsNaN(s.SustainedRate) || math.IsInf(s.SustainedRate, 0) {
		return nil, fmt.Errorf("bench: Sizes.SustainedRate %v is not a non-negative rate", s.SustainedRate)
	}

	c := cfg
	if c.Workers == 0 {
		c.Workers = queue.MaxWorkersDefault
	}
	if c.FetchCooldown == 0 {
		c.FetchCooldown = queue.FetchCooldownDefault
	}
	if c.FetchPollInterval == 0 {
		c.FetchPollInterval = queue.FetchPollIntervalDefault
	}
	if c.PoolMaxConns == 0 {
		c.PoolMaxConns = PoolMaxConnsDefault
	}
	if c.ScenarioTimeout == 0 {
		c.ScenarioTimeout = ScenarioTimeoutDefault
	}
	if c.Seed == 0 {
		c.Seed = SeedDefault
	}
	if c.StatsSettle == 0 {
		c.StatsSettle = StatsSettleDefault
	}
	switch {
	case c.Workers < 1:
		return nil, fmt.Errorf("bench: Workers is %d; it must be at least 1", c.Workers)
	case c.FetchCooldown < time.Millisecond:
		return nil, fmt.Errorf("bench: FetchCooldown is %s; River's minimum is 1ms", c.FetchCooldown)
	case c.FetchPollInterval < c.FetchCooldown:
		return nil, fmt.Errorf("bench: FetchPollInterval %s is shorter than FetchCooldown %s", c.FetchPollInterval, c.FetchCooldown)
	case c.PoolMaxConns < 4:
		return nil, fmt.Errorf("bench: PoolMaxConns is %d; it must be at least 4", c.PoolMaxConns)
	case c.Statements < 0:
		return nil, fmt.Errorf("bench: Statements is %d; it must not be negative", c.Statements)
	case c.ScenarioTimeout < 0:
		return nil, fmt.Errorf("bench: ScenarioTimeout %s is negative", c.ScenarioTimeout)
	case c.StatsSettle < 0:
		return nil, fmt.Errorf("bench: StatsSettle %s is negative", c.StatsSettle)
	}
	if len(c.Scenarios) == 0 {
		c.Scenarios = Scenarios
	}
	var picked []string
	for _, name := range c.Scenarios {
		if !slices.Contains(Scenarios, name) {
			return nil, fmt.Errorf("bench: unknown scenario %q; the scenarios are %s", name, strings.Join(Scenarios, ", "))
		}
		if !slices.Contains(picked, name) {
			picked = append(picked, name)
		}
	}
	// Measure in the documented order, whatever order they were named in.
	slices.SortFunc(picked, func(a, b string) int { return slices.Index(Scenarios, a) - slices.Index(Scenarios, b) })
	c.Scenarios = picked

	b := &bench{cfg: c, sizes: s, progress: c.Progress, logger: c.Logger}
	if b.progress == nil {
		b.progress = io.Discard
	}
	if b.logger == nil {
		b.logger = slog.New(slog.DiscardHandler)
	}
	b.rng = rand.New(rand.NewPCG(c.Seed, c.Seed))
	return b, nil
}

// say writes a progress line.
func (b *bench) say(format string, args ...any) {
	fmt.Fprintf(b.progress, "bench: "+format+"\n", args...)
}

// targets checks the figures that have a target.
func targets(s *ScenarioSet) []TargetCheck {
	out := []TargetCheck{}
	if s.Runs != nil {
		out = append(out,
			TargetCheck{"runs.ratio", s.Runs.Ratio, ">= 0.5", s.Runs.Ratio >= 0.5},
			TargetCheck{"runs.braid_commits_per_run", s.Runs.BraidCommitsPerRun, "<= 1.5", s.Runs.BraidCommitsPerRun <= 1.5})
	}
	if s.Hop != nil {
		limit := 0.5 * s.Hop.RiverP50Ms
		out = append(out, TargetCheck{"hop.braid_p50_ms", s.Hop.BraidP50Ms, fmt.Sprintf("<= 0.5 x river_p50_ms (%g)", round(limit, 3)), s.Hop.BraidP50Ms <= limit})
	}
	if s.Fanout != nil {
		out = append(out, TargetCheck{"fanout.ratio", s.Fanout.Ratio, "<= 1.5", s.Fanout.Ratio <= 1.5})
	}
	if s.DAG != nil {
		out = append(out,
			TargetCheck{"dag.chain_ratio", s.DAG.ChainRatio, "<= 1.5", s.DAG.ChainRatio <= 1.5},
			TargetCheck{"dag.diamond_ratio", s.DAG.DiamondRatio, "<= 1.5", s.DAG.DiamondRatio <= 1.5})
	}
	if s.Delay != nil {
		out = append(out, TargetCheck{"delay.braid_p99_late_ms", s.Delay.BraidP99LateMs, "<= 100", s.Delay.BraidP99LateMs <= 100})
	}
	if s.DelayBurst != nil {
		out = append(out, TargetCheck{"delay_burst.braid_p99_late_ms", s.DelayBurst.BraidP99LateMs, "<= 100", s.DelayBurst.BraidP99LateMs <= 100})
	}
	if s.Steps != nil {
		out = append(out, TargetCheck{"steps.ratio", s.Steps.Ratio, ">= 0.8", s.Steps.Ratio >= 0.8})
	}
	if s.Pool != nil {
		out = append(out, TargetCheck{"pool.ratio", s.Pool.Ratio, "<= 2", s.Pool.Ratio <= 2})
		out = append(out, TargetCheck{"pool.lease_changes", float64(s.Pool.LeaseChanges), "== 0", s.Pool.LeaseChanges == 0})
	}
	if s.Sustained != nil {
		u := s.Sustained
		growth := fmt.Sprintf("<= %g once retention applied", maxGrowth)
		if u.BraidRetentionAppliedS == nil {
			growth += fmt.Sprintf(" (it did not within %gs)", u.DurationS)
		}
		out = append(out,
			TargetCheck{"sustained.braid_drift", u.BraidDrift, "abs <= 0.1", math.Abs(u.BraidDrift) <= 0.1},
			TargetCheck{"sustained.braid_growth", u.BraidGrowth, growth, u.BraidSettled})
	}
	return out
}

// errFailed reports work that failed during a measurement.
var errFailed = errors.New("bench: work failed during the measurement")
