package bench

import (
	"context"
	"time"

	"github.com/braidflow/braid/workflow"
)

// fanout measures a Map over no-op children until the parent completes,
// against River burning down as many no-op jobs inserted at once: the
// median of Sizes.Trials trials on each side.
func (b *bench) fanout(ctx context.Context) (*FanoutResult, error) {
	n := b.sizes.Fanout
	b.say("fanout: Map over %d no-op children against %d no-op River jobs", n, n)
	res := &FanoutResult{Children: n}

	t, err := b.measureTrials(ScenarioFanout,
		func() (phase, error) { return b.riverBurn(ctx, ScenarioFanout, n, n) },
		func() (phase, error) { return b.braidFanout(ctx, n) })
	if err != nil {
		return nil, err
	}
	river, braid := median(t.river), median(t.braid)
	res.TrialTimes = t.times()
	res.RiverS = round(river.elapsed.Seconds(), 3)
	res.RiverCommitsPerRun = perUnit(river.commits, n)
	res.BraidS = round(braid.elapsed.Seconds(), 3)
	res.Ratio = ratio(res.BraidS, res.RiverS)
	res.BraidCommitsPerRun = perUnit(braid.commits, n)
	b.say("fanout: river %d jobs in %s, %.2f commits per job%s", n, river.elapsed.Round(time.Millisecond), res.RiverCommitsPerRun, medianOf(res.Trials))
	b.say("fanout: braid %d children in %s, ratio %.3f, %.2f commits per child%s", n, braid.elapsed.Round(time.Millisecond), res.Ratio, res.BraidCommitsPerRun, medianOf(res.Trials))
	return res, nil
}

// braidFanout starts one run whose task maps over n no-op children and
// returns the time until its result is in.
func (b *bench) braidFanout(ctx context.Context, n int) (phase, error) {
	s, err := b.newSide(ctx, ScenarioFanout, "braid")
	if err != nil {
		return phase{}, err
	}
	defer s.close()
	child := noopWorkflow()
	parent := workflow.Define("bench_fanout", func(t *workflow.Task, n int) (int, error) {
		outs, err := workflow.Map(t, "child", child, make([]struct{}, n))
		return len(outs), err
	})
	eng, err := s.startEngine(&workflow.Config{Workflows: []workflow.Definition{child, parent}})
	if err != nil {
		return phase{}, err
	}
	if err := s.beginCommits(); err != nil {
		return phase{}, err
	}
	start := time.Now()
	run, err := parent.Start(s.ctx, eng, n, nil)
	if err != nil {
		return phase{}, err
	}
	// Result polls the database too, through the engine: its reads are
	// counted as the engine's.
	if _, err := run.Result(s.ctx); err != nil {
		return phase{}, err
	}
	return s.endPhase(start)
}
