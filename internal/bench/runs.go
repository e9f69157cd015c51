package bench

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
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

// runs measures the throughput of no-op single-task runs against no-op
// River jobs: the time from the first start (insert) to the last
// completion.
func (b *bench) runs(ctx context.Context) (*RunsResult, error) {
	n := b.sizes.Runs
	b.say("runs: %d no-op runs against %d no-op River jobs", n, n)
	res := &RunsResult{N: n}

	riverS, err := b.riverBurn(ctx, ScenarioRuns, n, startBatch)
	if err != nil {
		return nil, err
	}
	res.RiverS = round(riverS.Seconds(), 3)
	res.RiverPerSec = round(float64(n)/riverS.Seconds(), 1)
	b.say("runs: river %d jobs in %s (%.0f/s)", n, riverS.Round(time.Millisecond), res.RiverPerSec)

	braidS, err := b.braidRuns(ctx, n)
	if err != nil {
		return nil, err
	}
	res.BraidS = round(braidS.Seconds(), 3)
	res.BraidPerSec = round(float64(n)/braidS.Seconds(), 1)
	res.Ratio = ratio(res.BraidPerSec, res.RiverPerSec)
	b.say("runs: braid %d runs in %s (%.0f/s), ratio %.3f", n, braidS.Round(time.Millisecond), res.BraidPerSec, res.Ratio)
	return res, nil
}

// braidRuns starts n no-op runs, startBatch per transaction from starters
// goroutines, and returns the time until the last one completed.
func (b *bench) braidRuns(ctx context.Context, n int) (time.Duration, error) {
	s, err := b.newSide(ctx, ScenarioRuns, "braid")
	if err != nil {
		return 0, err
	}
	defer s.close()
	noop := noopWorkflow()
	eng, err := s.startEngine(&workflow.Config{Workflows: []workflow.Definition{noop}})
	if err != nil {
		return 0, err
	}
	start := time.Now()
	batches := (n + startBatch - 1) / startBatch
	err = parallel(batches, starters, func(i int) error {
		return pgx.BeginFunc(s.ctx, s.pool, func(tx pgx.Tx) error {
			for j := i * startBatch; j < min(n, (i+1)*startBatch); j++ {
				if _, err := noop.StartTx(s.ctx, tx, eng, struct{}{}, nil); err != nil {
					return err
				}
			}
			return nil
		})
	})
	if err != nil {
		return 0, err
	}
	if err := s.waitFor(runsDone, n); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// riverBurn inserts n no-op River jobs, batch per InsertMany from starters
// goroutines, and returns the time until the last one completed.
func (b *bench) riverBurn(ctx context.Context, scenario string, n, batch int) (time.Duration, error) {
	s, err := b.newSide(ctx, scenario, "river")
	if err != nil {
		return 0, err
	}
	defer s.close()
	workers := river.NewWorkers()
	river.AddWorker(workers, noopWorker{})
	client, err := s.startRiver(workers)
	if err != nil {
		return 0, err
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
		return 0, err
	}
	if err := s.waitFor(jobsDone, n); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}
