package bench

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/braidflow/braid/workflow"
)

// hopIn is the input of one link of a chain: the chain, the link's index,
// and the index of the last link.
type hopIn struct {
	Chain int `json:"chain"`
	I     int `json:"i"`
	Last  int `json:"last"`
}

// hopArgs is the River side's link.
type hopArgs hopIn

func (hopArgs) Kind() string { return "bench_hop" }

// hopWorker works one River link: it inserts the next link and completes
// its own job in one transaction.
type hopWorker struct {
	river.WorkerDefaults[hopArgs]
	b     *bench
	marks *stamps
	pool  *pgxpool.Pool
}

func (w *hopWorker) Work(ctx context.Context, job *river.Job[hopArgs]) error {
	w.marks.mark(w.b.hopKey(job.Args.Chain, job.Args.I))
	return pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		if job.Args.I < job.Args.Last {
			next := hopArgs{Chain: job.Args.Chain, I: job.Args.I + 1, Last: job.Args.Last}
			if _, err := river.ClientFromContext[pgx.Tx](ctx).InsertTx(ctx, tx, next, nil); err != nil {
				return err
			}
		}
		_, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
		return err
	})
}

// hopKey is the stamp index of link i of chain c. The warm-up chain is -1.
func (b *bench) hopKey(c, i int) int { return (c+1)*(b.sizes.Hops+1) + i }

// hop measures the latency of one hop in chains of tasks, each task
// continuing the next, against River chains in which each job inserts its
// successor and completes in one transaction. One warm-up chain on each
// side is not counted.
func (b *bench) hop(ctx context.Context) (*HopResult, error) {
	hops, chains := b.sizes.Hops, b.sizes.Chains
	b.say("hop: %d chains of %d hops, one at a time", chains, hops)
	res := &HopResult{Hops: hops, Chains: chains}

	links := chains * (hops + 1)
	riverLat, riverCommits, err := b.riverHops(ctx)
	if err != nil {
		return nil, err
	}
	res.RiverP50Ms = round(percentile(riverLat, 50), 2)
	res.RiverP99Ms = round(percentile(riverLat, 99), 2)
	res.RiverCommitsPerRun = perUnit(riverCommits, links)
	b.say("hop: river p50 %.2f ms, p99 %.2f ms, %.2f commits per link", res.RiverP50Ms, res.RiverP99Ms, res.RiverCommitsPerRun)

	braidLat, braidCommits, err := b.braidHops(ctx)
	if err != nil {
		return nil, err
	}
	res.BraidP50Ms = round(percentile(braidLat, 50), 2)
	res.BraidP99Ms = round(percentile(braidLat, 99), 2)
	res.BraidCommitsPerRun = perUnit(braidCommits, links)
	b.say("hop: braid p50 %.2f ms, p99 %.2f ms, %.2f commits per link", res.BraidP50Ms, res.BraidP99Ms, res.BraidCommitsPerRun)
	return res, nil
}

// latencies turns the stamps of the counted chains into hop latencies in
// milliseconds.
func (b *bench) latencies(marks *stamps) ([]float64, error) {
	var out []float64
	for c := range b.sizes.Chains {
		for i := 1; i <= b.sizes.Hops; i++ {
			prev, ok1 := marks.get(b.hopKey(c, i-1))
			cur, ok2 := marks.get(b.hopKey(c, i))
			if !ok1 || !ok2 {
				return nil, fmt.Errorf("hop %d of chain %d was not stamped", i, c)
			}
			out = append(out, ms(cur.Sub(prev)))
		}
	}
	return out, nil
}

// braidHops runs the warm-up chain, then the counted chains, and returns
// their hop latencies and the commits of the counted chains.
func (b *bench) braidHops(ctx context.Context) ([]float64, int64, error) {
	s, err := b.newSide(ctx, ScenarioHop, "braid")
	if err != nil {
		return nil, 0, err
	}
	defer s.close()
	marks := newStamps()
	var link *workflow.Workflow[hopIn, struct{}]
	link = workflow.Define("bench_hop", func(t *workflow.Task, in hopIn) (struct{}, error) {
		marks.mark(b.hopKey(in.Chain, in.I))
		if in.I < in.Last {
			// The next link is created, with its first turn, in the
			// transaction that completes this one. It is detached, a run
			// of its own: a child the link did not await would be
			// cancelled as the link completes.
			workflow.Go(t, "next", link, hopIn{Chain: in.Chain, I: in.I + 1, Last: in.Last}, workflow.Detached())
		}
		return struct{}{}, nil
	})
	eng, err := s.startEngine(&workflow.Config{Workflows: []workflow.Definition{link}})
	if err != nil {
		return nil, 0, err
	}
	for c := -1; c < b.sizes.Chains; c++ {
		if c == 0 {
			if err := s.beginCommits(); err != nil {
				return nil, 0, err
			}
		}
		if _, err := link.Start(s.ctx, eng, hopIn{Chain: c, I: 0, Last: b.sizes.Hops}, nil); err != nil {
			return nil, 0, err
		}
		const q = `SELECT count(*) FILTER (WHERE status = 'completed'), count(*) FILTER (WHERE status IN ('failed', 'cancelled')) FROM braid_tasks`
		if err := s.waitFor(q, (c+2)*(b.sizes.Hops+1)); err != nil {
			return nil, 0, err
		}
	}
	commits, err := s.endCommits()
	if err != nil {
		return nil, 0, err
	}
	lat, err := b.latencies(marks)
	return lat, commits, err
}

// riverHops is braidHops on the River side.
func (b *bench) riverHops(ctx context.Context) ([]float64, int64, error) {
	s, err := b.newSide(ctx, ScenarioHop, "river")
	if err != nil {
		return nil, 0, err
	}
	defer s.close()
	marks := newStamps()
	workers := river.NewWorkers()
	river.AddWorker(workers, &hopWorker{b: b, marks: marks, pool: s.pool})
	client, err := s.startRiver(workers)
	if err != nil {
		return nil, 0, err
	}
	for c := -1; c < b.sizes.Chains; c++ {
		if c == 0 {
			if err := s.beginCommits(); err != nil {
				return nil, 0, err
			}
		}
		if _, err := client.Insert(s.ctx, hopArgs{Chain: c, I: 0, Last: b.sizes.Hops}, nil); err != nil {
			return nil, 0, err
		}
		if err := s.waitFor(jobsDone, (c+2)*(b.sizes.Hops+1)); err != nil {
			return nil, 0, err
		}
	}
	commits, err := s.endCommits()
	if err != nil {
		return nil, 0, err
	}
	lat, err := b.latencies(marks)
	return lat, commits, err
}
