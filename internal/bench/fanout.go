package bench

import (
	"context"
	"time"

	"github.com/braidflow/braid/workflow"
)

// fanout measures a Map over no-op children until the parent completes,
// against River burning down as many no-op jobs inserted at once.
func (b *bench) fanout(ctx context.Context) (*FanoutResult, error) {
	n := b.sizes.Fanout
	b.say("fanout: Map over %d no-op children against %d no-op River jobs", n, n)
	res := &FanoutResult{Children: n}

	riverS, err := b.riverBurn(ctx, ScenarioFanout, n, n)
	if err != nil {
		return nil, err
	}
	res.RiverS = round(riverS.Seconds(), 3)
	b.say("fanout: river %d jobs in %s", n, riverS.Round(time.Millisecond))

	braidS, err := b.braidFanout(ctx, n)
	if err != nil {
		return nil, err
	}
	res.BraidS = round(braidS.Seconds(), 3)
	res.Ratio = ratio(res.BraidS, res.RiverS)
	b.say("fanout: braid %d children in %s, ratio %.3f", n, braidS.Round(time.Millisecond), res.Ratio)
	return res, nil
}

// braidFanout starts one run whose task maps over n no-op children and
// returns the time until its result is in.
func (b *bench) braidFanout(ctx context.Context, n int) (time.Duration, error) {
	s, err := b.newSide(ctx, ScenarioFanout, "braid")
	if err != nil {
		return 0, err
	}
	defer s.close()
	child := noopWorkflow()
	parent := workflow.Define("bench_fanout", func(t *workflow.Task, n int) (int, error) {
		outs, err := workflow.Map(t, "child", child, make([]struct{}, n))
		return len(outs), err
	})
	eng, err := s.startEngine(&workflow.Config{Workflows: []workflow.Definition{child, parent}})
	if err != nil {
		return 0, err
	}
	start := time.Now()
	run, err := parent.Start(s.ctx, eng, n, nil)
	if err != nil {
		return 0, err
	}
	if _, err := run.Result(s.ctx); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}
