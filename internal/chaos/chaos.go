package chaos

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/leases"
	"github.com/braidflow/braid/workflow"
)

// drivers maps each scenario to the function that drives its fault phase.
var drivers = map[string]func(context.Context, *scene) error{
	ScenarioKill:    driveKill,
	ScenarioRestart: driveRestart,
	ScenarioFreeze:  driveFreeze,
	ScenarioLease:   driveLease,
	ScenarioStorm:   driveStorm,
	ScenarioTimeout: driveTimeout,
	ScenarioErrors:  driveErrors,
}

// Run drives the scenarios of cfg one after another on a private cluster
// and returns what they observed. An error means the suite itself could
// not run (no PostgreSQL, no workers); findings are in the Report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	began := time.Now()
	e := &env{cfg: cfg, size: cfg.size()}
	e.say("starting a private PostgreSQL cluster (fsync on)")
	if e.cl, err = startCluster(ctx); err != nil {
		return nil, err
	}
	defer e.cl.close()

	pc, err := pgxpool.ParseConfig(e.cl.url)
	if err != nil {
		return nil, err
	}
	pc.MaxConns = 2*stormers + 8
	if e.pool, err = pgxpool.NewWithConfig(ctx, pc); err != nil {
		return nil, err
	}
	defer e.pool.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if e.eng, err = workflow.NewEngine(e.pool, engineConfig(1, quiet)); err != nil {
		return nil, err
	}
	defer func() { _ = e.eng.Stop(context.WithoutCancel(ctx)) }()
	if e.leases, err = leases.New(e.pool, &leases.Config{Logger: quiet}); err != nil {
		return nil, err
	}

	slots := 20
	if cfg.Quick {
		slots = 10
	}
	e.fleet = newFleet(cfg.WorkerCommand, workerSettings{URL: e.cl.url, Slots: slots}, cfg.WorkerOutput, e.say)
	defer e.fleet.close()
	e.say("starting %d workers", cfg.Workers)
	if err := e.fleet.start(ctx, cfg.Workers); err != nil {
		return nil, err
	}

	rep := &Report{
		Machine: Machine{CPUs: runtime.NumCPU(), Go: runtime.Version(), Postgres: e.cl.version, Fsync: e.cl.fsync},
		Config: ReportConfig{
			Quick: cfg.Quick, Workers: cfg.Workers, DurationS: cfg.Duration.Seconds(),
			PhaseS: cfg.phase().Seconds(), SettleTimeoutS: cfg.SettleTimeout.Seconds(), Scenarios: cfg.Scenarios,
		},
		Total: Figures{Settled: true},
		OK:    true,
	}
	for _, name := range cfg.Scenarios {
		sr := e.scenario(ctx, name)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		rep.Scenarios = append(rep.Scenarios, sr)
		settled := rep.Total.Settled && sr.Settled
		rep.Total.add(&sr.Figures)
		rep.Total.Settled = settled
		if sr.Error != "" {
			rep.OK = false
			rep.Problems = append(rep.Problems, name+": "+sr.Error)
		}
		if !sr.clean() {
			rep.OK = false
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s: %d lost, %d steps recorded twice, %d side effects duplicated, %d deadlocks",
				name, sr.Lost, sr.StepsRecordedTwice, sr.SideEffectsDuplicated, sr.Deadlocks))
		}
	}
	rep.Seconds = round(time.Since(began).Seconds())
	return rep, nil
}

// scenario drives one scenario: its fault phase, then settling and the
// figures.
func (e *env) scenario(ctx context.Context, name string) ScenarioReport {
	s := &scene{env: e, name: name, phase: e.cfg.phase()}
	e.fleet.takeExits()
	s.deadlocks.rebase(ctx, e.pool)
	e.say("%s: fault phase of %s", name, s.phase.Round(100*time.Millisecond))
	began := time.Now()
	sr := ScenarioReport{Name: name}
	if err := drivers[name](ctx, s); err != nil {
		sr.Error = err.Error()
	}
	e.say("%s: %d runs started, %d faults in %s; settling (bound %s)", name, s.fig.Started, s.fig.Faults, time.Since(began).Round(time.Second), e.cfg.SettleTimeout)
	if err := s.finish(ctx); err != nil && sr.Error == "" {
		sr.Error = err.Error()
	}
	s.deadlocks.checkpoint(ctx, e.pool)
	s.fig.Deadlocks = s.deadlocks.acc
	s.fig.WorkerExits = e.fleet.takeExits()
	sr.Figures = s.fig
	sr.LostRuns = s.lost
	e.say("%s: %d completed, %d failed on purpose, %d lost, %d steps recorded twice, %d side effects duplicated, %d deadlocks; settled in %.1fs",
		name, sr.Completed, sr.Failed, sr.Lost, sr.StepsRecordedTwice, sr.SideEffectsDuplicated, sr.Deadlocks, sr.SettleSeconds)
	return sr
}
