package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/braidflow/braid/queue"
)

// Scenario names, in the order Run measures them.
const (
	ScenarioRuns   = "runs"
	ScenarioHop    = "hop"
	ScenarioFanout = "fanout"
	ScenarioDelay  = "delay"
	ScenarioSteps  = "steps"
	ScenarioPool   = "pool"
)

// Scenarios lists every scenario in the order Run measures them.
var Scenarios = []string{ScenarioRuns, ScenarioHop, ScenarioFanout, ScenarioDelay, ScenarioSteps, ScenarioPool}

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
)

// Sizes are the sizes of the scenarios. A zero field takes the full or
// quick default (FullSizes, QuickSizes).
type Sizes struct {
	// Runs is how many single-task runs, and River jobs, the runs scenario
	// starts and completes.
	Runs int
	// Hops is the length of one chain in the hop scenario, in hops: a
	// chain has Hops+1 tasks, or jobs.
	Hops int
	// Chains is how many chains the hop scenario runs, one after another.
	Chains int
	// Fanout is how many children the fanout scenario's Map spawns, and how
	// many River jobs its baseline burns down.
	Fanout int
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
}

// FullSizes are the sizes of a full benchmark.
var FullSizes = Sizes{
	Runs: 5000, Hops: 20, Chains: 10, Fanout: 10_000,
	Delays: 1000, DelayMin: 500 * time.Millisecond, DelayMax: 3 * time.Second, DelaySpread: riverSchedulerInterval,
	StepTasks: 200, StepsPerTask: 10, PoolRuns: 300,
}

// QuickSizes are the sizes of a quick benchmark (Config.Quick), which runs
// in well under a minute.
var QuickSizes = Sizes{
	Runs: 500, Hops: 20, Chains: 3, Fanout: 1000,
	Delays: 200, DelayMin: 500 * time.Millisecond, DelayMax: 3 * time.Second, DelaySpread: riverSchedulerInterval,
	StepTasks: 50, StepsPerTask: 10, PoolRuns: 300,
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

	// ScenarioTimeout bounds one side of one scenario. Default
	// ScenarioTimeoutDefault.
	ScenarioTimeout time.Duration

	// Seed seeds the random delay lengths. Default SeedDefault.
	Seed uint64

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
	Workers             int     `json:"workers"`
	FetchCooldownMs     float64 `json:"fetch_cooldown_ms"`
	FetchPollIntervalMs float64 `json:"fetch_poll_interval_ms"`
	PoolMaxConns        int     `json:"pool_max_conns"`
	Seed                uint64  `json:"seed"`
}

// ScenarioSet holds the result of each scenario that ran.
type ScenarioSet struct {
	Runs   *RunsResult   `json:"runs,omitempty"`
	Hop    *HopResult    `json:"hop,omitempty"`
	Fanout *FanoutResult `json:"fanout,omitempty"`
	Delay  *DelayResult  `json:"delay,omitempty"`
	Steps  *StepsResult  `json:"steps,omitempty"`
	Pool   *PoolResult   `json:"pool,omitempty"`
}

// RunsResult is the throughput of no-op single-task runs against no-op
// River jobs. Ratio is braid over River.
type RunsResult struct {
	N           int     `json:"n"`
	BraidPerSec float64 `json:"braid_per_sec"`
	RiverPerSec float64 `json:"river_per_sec"`
	Ratio       float64 `json:"ratio"`
	BraidS      float64 `json:"braid_s"`
	RiverS      float64 `json:"river_s"`
}

// HopResult is the latency of one hop in a chain of tasks, each continuing
// the next, against a River chain in which each job inserts its successor
// and completes in one transaction. A hop is measured from the start of
// one task's turn (one job's work) to the start of the next one's.
type HopResult struct {
	Hops       int     `json:"hops"`
	Chains     int     `json:"chains"`
	BraidP50Ms float64 `json:"braid_p50_ms"`
	BraidP99Ms float64 `json:"braid_p99_ms"`
	RiverP50Ms float64 `json:"river_p50_ms"`
	RiverP99Ms float64 `json:"river_p99_ms"`
}

// FanoutResult is the time of a Map over no-op children until the parent
// completes, against River burning down as many no-op jobs. Ratio is braid
// over River.
type FanoutResult struct {
	Children int     `json:"children"`
	BraidS   float64 `json:"braid_s"`
	RiverS   float64 `json:"river_s"`
	Ratio    float64 `json:"ratio"`
}

// DelayResult is the lateness of delays: the start of the turn after the
// delay (the time its job was fetched) minus resume_at, against River jobs
// with ScheduledAt, whose lateness is attempted_at minus scheduled_at. Both
// are read from the database clock. The waits start evenly over SpreadS
// seconds, by default one interval of River's scheduler.
type DelayResult struct {
	N              int     `json:"n"`
	MinMs          float64 `json:"min_ms"`
	MaxMs          float64 `json:"max_ms"`
	SpreadS        float64 `json:"spread_s"`
	BraidP50LateMs float64 `json:"braid_p50_late_ms"`
	BraidP99LateMs float64 `json:"braid_p99_late_ms"`
	RiverP50LateMs float64 `json:"river_p50_late_ms"`
	RiverP99LateMs float64 `json:"river_p99_late_ms"`
}

// StepsResult is the throughput of inline steps in tasks that run at once,
// against River jobs that each make as many plain INSERTs of the same
// shape. Ratio is braid over River.
type StepsResult struct {
	StepsPerTask     int     `json:"steps_per_task"`
	Tasks            int     `json:"tasks"`
	BraidStepsPerSec float64 `json:"braid_steps_per_sec"`
	RiverStepsPerSec float64 `json:"river_steps_per_sec"`
	Ratio            float64 `json:"ratio"`
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
		case ScenarioDelay:
			rep.Scenarios.Delay, err = b.delay(ctx)
		case ScenarioSteps:
			rep.Scenarios.Steps, err = b.steps(ctx)
		case ScenarioPool:
			rep.Scenarios.Pool, err = b.pool(ctx)
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
	fill(&s.Hops, base.Hops)
	fill(&s.Chains, base.Chains)
	fill(&s.Fanout, base.Fanout)
	fill(&s.Delays, base.Delays)
	fill(&s.StepTasks, base.StepTasks)
	fill(&s.StepsPerTask, base.StepsPerTask)
	fill(&s.PoolRuns, base.PoolRuns)
	if s.DelayMin == 0 && s.DelayMax == 0 {
		s.DelayMin, s.DelayMax = base.DelayMin, base.DelayMax
	}
	if s.DelaySpread == 0 {
		s.DelaySpread = base.DelaySpread
	}
	for _, f := range []struct {
		name string
		v    int
	}{
		{"Runs", s.Runs}, {"Hops", s.Hops}, {"Chains", s.Chains}, {"Fanout", s.Fanout},
		{"Delays", s.Delays}, {"StepTasks", s.StepTasks}, {"StepsPerTask", s.StepsPerTask}, {"PoolRuns", s.PoolRuns},
	} {
		if f.v < 1 {
			return nil, fmt.Errorf("bench: Sizes.%s is %d; it must be at least 1", f.name, f.v)
		}
	}
	if s.DelayMin < 0 || s.DelayMax < s.DelayMin {
		return nil, fmt.Errorf("bench: delay lengths %s to %s are not a range of non-negative durations", s.DelayMin, s.DelayMax)
	}
	if s.DelaySpread < 0 {
		return nil, fmt.Errorf("bench: Sizes.DelaySpread %s is negative", s.DelaySpread)
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
		out = append(out, TargetCheck{"runs.ratio", s.Runs.Ratio, ">= 0.5", s.Runs.Ratio >= 0.5})
	}
	if s.Hop != nil {
		out = append(out, TargetCheck{"hop.braid_p50_ms", s.Hop.BraidP50Ms, fmt.Sprintf("<= river_p50_ms (%g)", s.Hop.RiverP50Ms), s.Hop.BraidP50Ms <= s.Hop.RiverP50Ms})
	}
	if s.Fanout != nil {
		out = append(out, TargetCheck{"fanout.ratio", s.Fanout.Ratio, "<= 1.5", s.Fanout.Ratio <= 1.5})
	}
	if s.Delay != nil {
		out = append(out, TargetCheck{"delay.braid_p99_late_ms", s.Delay.BraidP99LateMs, "<= 100", s.Delay.BraidP99LateMs <= 100})
	}
	if s.Pool != nil {
		out = append(out, TargetCheck{"pool.ratio", s.Pool.Ratio, "<= 2", s.Pool.Ratio <= 2})
		out = append(out, TargetCheck{"pool.lease_changes", float64(s.Pool.LeaseChanges), "== 0", s.Pool.LeaseChanges == 0})
	}
	return out
}

// errFailed reports work that failed during a measurement.
var errFailed = errors.New("bench: work failed during the measurement")
