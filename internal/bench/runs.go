package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/riverqueue/river"

	"github.com/braidflow/braid/workflow"
)

// noopArgs is the River side's no-op job.
type noopArgs struct{}

func (noopArgs) Kind() string { return "bench_noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

// noopWorkflow is the braid side's no-op, single-task workflow.
func noopWorkflow() *workflow.Workflow[struct{}, struct{}] {
	return workflow.Define("bench_noop", func(*workflow.Task, struct{}) (struct{}, error) {
		return struct{}{}, nil
	})
}

// phase is what one side measured: how long its measured work took, and
// how many transactions its database committed meanwhile.
type phase struct {
	elapsed time.Duration
	commits int64
}

// runs measures the throughput of no-op single-task runs against no-op
// River jobs: the time from the first start (insert) to the last
// completion, the median of Sizes.Trials trials on each side.
func (b *bench) runs(ctx context.Context) (*RunsResult, error) {
	n := b.sizes.Runs
	b.say("runs: %d no-op runs against %d no-op River jobs", n, n)
	res := &RunsResult{N: n}

	t, err := b.measureTrials(ScenarioRuns,
		func() (phase, error) { return b.riverBurn(ctx, ScenarioRuns, n, startBatch) },
		func() (phase, error) { return b.braidRuns(ctx, ScenarioRuns, n) })
	if err != nil {
		return nil, err
	}
	river, braid := median(t.river), median(t.braid)
	res.TrialTimes = t.times()
	res.RiverS = round(river.elapsed.Seconds(), 3)
	res.RiverPerSec = round(float64(n)/river.elapsed.Seconds(), 1)
	res.RiverCommitsPerRun = perUnit(river.commits, n)
	res.BraidS = round(braid.elapsed.Seconds(), 3)
	res.BraidPerSec = round(float64(n)/braid.elapsed.Seconds(), 1)
	res.Ratio = ratio(res.BraidPerSec, res.RiverPerSec)
	res.BraidCommitsPerRun = perUnit(braid.commits, n)
	b.say("runs: river %d jobs in %s (%.0f/s), %.2f commits per job%s", n, river.elapsed.Round(time.Millisecond), res.RiverPerSec, res.RiverCommitsPerRun, medianOf(res.Trials))
	b.runsPerSec = res.BraidPerSec
	b.say("runs: braid %d runs in %s (%.0f/s), ratio %.3f, %.2f commits per run%s", n, braid.elapsed.Round(time.Millisecond), res.BraidPerSec, res.Ratio, res.BraidCommitsPerRun, medianOf(res.Trials))
	return res, nil
}

// probeRuns caps the no-op runs of the probe that measures braid's
// throughput when the runs scenario did not run.
const probeRuns = 500

// capacity returns braid's throughput of no-op runs, in runs per second:
// the runs scenario's figure when it ran in this benchmark, or else that of
// a probe of up to probeRuns runs, measured once.
func (b *bench) capacity(ctx context.Context, scenario string) (float64, error) {
	if b.runsPerSec > 0 {
		return b.runsPerSec, nil
	}
	n := min(b.sizes.Runs, probeRuns)
	b.say("%s: measuring braid's throughput with %d no-op runs", scenario, n)
	p, err := b.braidRuns(ctx, scenario+"_probe", n)
	if err != nil {
		return 0, fmt.Errorf("probing braid's throughput: %w", err)
	}
	b.runsPerSec = round(float64(n)/p.elapsed.Seconds(), 1)
	b.say("%s: braid %d runs in %s (%.0f/s)", scenario, n, p.elapsed.Round(time.Millisecond), b.runsPerSec)
	return b.runsPerSec, nil
}

// braidRuns starts n no-op runs, startBatch per transaction from starters
// goroutines, and returns the time until the last one completed.
func (b *bench) braidRuns(ctx context.Context, scenario string, n int) (phase, error) {
	s, err := b.newSide(ctx, scenario, "braid")
	if err != nil {
		return phase{}, err
	}
	defer s.close()
	noop := noopWorkflow()
	eng, err := s.startEngine(&workflow.Config{Workflows: []workflow.Definition{noop}})
	if err != nil {
		return phase{}, err
	}
	if err := s.beginCommits(); err != nil {
		return phase{}, err
	}
	start := time.Now()
	batches := (n + startBatch - 1) / startBatch
	err = parallel(batches, starters, func(i int) error {
		params := make([]workflow.StartManyParams[struct{}], min(n, (i+1)*startBatch)-i*startBatch)
		_, err := noop.StartMany(s.ctx, eng, params)
		return err
	})
	if err != nil {
		return phase{}, err
	}
	if err := s.waitFor(runsDone, n); err != nil {
		return phase{}, err
	}
	return s.endPhase(start)
}

// endPhase ends a side's measured phase, which began at start: its
// elapsed time, then its commits (endCommits stops the side).
func (s *side) endPhase(start time.Time) (phase, error) {
	p := phase{elapsed: time.Since(start)}
	var err error
	p.commits, err = s.endCommits()
	return p, err
}

// riverBurn inserts n no-op River jobs, batch per InsertMany from starters
// goroutines, and returns the time until the last one completed.
func (b *bench) riverBurn(ctx context.Context, scenario string, n, batch int) (phase, error) {
	s, err := b.newSide(ctx, scenario, "river")
	if err != nil {
		return phase{}, err
	}
	defer s.close()
	workers := river.NewWorkers()
	river.AddWorker(workers, noopWorker{})
	client, err := s.startRiver(workers)
	if err != nil {
		return phase{}, err
	}
	if err := s.beginCommits(); err != nil {
		return phase{}, err
	}
	start := time.Now()
	batches := (n + batch - 1) / batch
	err = parallel(batches, starters, func(i int) error {
		params := make([]river.InsertManyParams, 0, batch)
		for j := i * batch; j < min(n, (i+1)*batch); j++ {
			params = append(params, river.InsertManyParams{Args: noopArgs{}})
		}
		_, err := client.InsertMany(s.ctx, params)
		return err
	})
	if err != nil {
		return phase{}, err
	}
	if err := s.waitFor(jobsDone, n); err != nil {
		return phase{}, err
	}
	return s.endPhase(start)
}
