package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/braidflow/braid/workflow"
)

// Pool sizes the pool scenario compares.
const (
	poolSmall = 4
	poolLarge = 16
)

// PoolResult is the time of the same work, runs of a few inline steps
// started at once, on a pool of 4 connections (pgxpool's default on a
// small machine) and on a pool of 16. Ratio is small over large: a small
// pool must not starve the engine. LeaseChanges counts the leases that
// changed hands during the small pool's run (expected 0: a starved pool
// loses its leases). The pool scenario has no River side: commits are per
// run on the pool of 16.
type PoolResult struct {
	Runs               int     `json:"runs"`
	StepsPerRun        int     `json:"steps_per_run"`
	Pool4S             float64 `json:"pool4_s"`
	Pool16S            float64 `json:"pool16_s"`
	Ratio              float64 `json:"ratio"`
	LeaseChanges       int     `json:"lease_changes"`
	BraidCommitsPerRun float64 `json:"braid_commits_per_run"`
}

// pool measures the same braid work on both pool sizes.
func (b *bench) pool(ctx context.Context) (*PoolResult, error) {
	n, per := b.sizes.PoolRuns, 4
	b.say("pool: %d runs of %d steps on a pool of %d, then of %d", n, per, poolLarge, poolSmall)
	res := &PoolResult{Runs: n, StepsPerRun: per}
	large, _, err := b.poolRuns(ctx, poolLarge, n, per)
	if err != nil {
		return nil, err
	}
	small, changes, err := b.poolRuns(ctx, poolSmall, n, per)
	if err != nil {
		return nil, err
	}
	res.Pool16S, res.Pool4S = round(large.elapsed.Seconds(), 3), round(small.elapsed.Seconds(), 3)
	res.Ratio = ratio(small.elapsed.Seconds(), large.elapsed.Seconds())
	res.LeaseChanges = changes
	res.BraidCommitsPerRun = perUnit(large.commits, n)
	b.say("pool: %.2fs on %d, %.2fs on %d, ratio %.2f, %d lease changes, %.2f commits per run on %d",
		res.Pool16S, poolLarge, res.Pool4S, poolSmall, res.Ratio, changes, res.BraidCommitsPerRun, poolLarge)
	return res, nil
}

// poolRuns starts n runs of per steps at once on a pool of maxConns and
// returns the time until all completed, and how many lease generations
// passed meanwhile.
func (b *bench) poolRuns(ctx context.Context, maxConns, n, per int) (phase, int, error) {
	s, err := b.newSideSized(ctx, ScenarioPool, fmt.Sprintf("pool%d", maxConns), maxConns)
	if err != nil {
		return phase{}, 0, err
	}
	defer s.close()
	wf := workflow.Define("bench_pool", func(t *workflow.Task, _ struct{}) (int, error) {
		total := 0
		for k := range per {
			v, err := workflow.Step(t, "step", func(context.Context) (int, error) { return k, nil })
			if err != nil {
				return 0, err
			}
			total += v
		}
		return total, nil
	})
	eng, err := s.startEngine(&workflow.Config{Workflows: []workflow.Definition{wf}})
	if err != nil {
		return phase{}, 0, err
	}
	// beginCommits's pause also lets the leases settle before their
	// changes are counted.
	if err := s.beginCommits(); err != nil {
		return phase{}, 0, err
	}
	generations := `SELECT coalesce(sum(generation), 0)::int FROM braid_leases`
	var before, after int
	s.reads.Add(1)
	if err := s.pool.QueryRow(s.ctx, generations).Scan(&before); err != nil {
		return phase{}, 0, err
	}
	start := time.Now()
	err = pgx.BeginFunc(s.ctx, s.pool, func(tx pgx.Tx) error {
		for range n {
			if _, err := wf.StartTx(s.ctx, tx, eng, struct{}{}, nil); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return phase{}, 0, err
	}
	if err := s.waitFor(runsDone, n); err != nil {
		return phase{}, 0, err
	}
	elapsed := time.Since(start)
	s.reads.Add(1)
	if err := s.pool.QueryRow(s.ctx, generations).Scan(&after); err != nil {
		return phase{}, 0, err
	}
	commits, err := s.endCommits()
	if err != nil {
		return phase{}, 0, err
	}
	return phase{elapsed: elapsed, commits: commits}, after - before, nil
}
