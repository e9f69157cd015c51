package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/braidflow/braid/workflow"
)

// DAGChainNodes is the length of the dag scenario's chains, in nodes (or
// River jobs): a chain has DAGChainNodes-1 edges.
const DAGChainNodes = 20

// DAGResult is the time per edge of DAGs of no-op nodes, against River
// doing the same work. Each figure is a phase's wall time, from the start
// of its runs (the insert of its first jobs) until the last one is seen
// completed, over the phase's edges.
//
// The chain part runs Chains DAGs of ChainNodes nodes, each node depending
// on the one before (ChainNodes-1 edges each), one at a time after one
// uncounted warm-up DAG, against River chains of as many jobs in which
// each job inserts its successor and completes in one transaction (the
// hop scenario's River chain). The diamond part runs one DAG of a root,
// DiamondWidth middle nodes that depend on it and a sink that depends on
// all of them (2 x DiamondWidth edges), against a River root job that
// inserts DiamondWidth middle jobs and a join row counting them, each
// middle job counting itself off the join and inserting the sink job when
// the count reaches zero, in the transaction that completes it. Ratios are
// braid's time per edge over River's. Commits are per node of the counted
// DAGs of both parts (a task, or a River job).
type DAGResult struct {
	ChainNodes            int     `json:"chain_nodes"`
	Chains                int     `json:"chains"`
	ChainBraidS           float64 `json:"chain_braid_s"`
	ChainRiverS           float64 `json:"chain_river_s"`
	ChainBraidMsPerEdge   float64 `json:"chain_braid_ms_per_edge"`
	ChainRiverMsPerEdge   float64 `json:"chain_river_ms_per_edge"`
	ChainRatio            float64 `json:"chain_ratio"`
	DiamondWidth          int     `json:"diamond_width"`
	DiamondBraidS         float64 `json:"diamond_braid_s"`
	DiamondRiverS         float64 `json:"diamond_river_s"`
	DiamondBraidMsPerEdge float64 `json:"diamond_braid_ms_per_edge"`
	DiamondRiverMsPerEdge float64 `json:"diamond_river_ms_per_edge"`
	DiamondRatio          float64 `json:"diamond_ratio"`
	BraidCommitsPerRun    float64 `json:"braid_commits_per_run"`
	RiverCommitsPerRun    float64 `json:"river_commits_per_run"`
}

// dag measures the chain part, then the diamond part, River's side first
// in each.
func (b *bench) dag(ctx context.Context) (*DAGResult, error) {
	chains, width := b.sizes.DAGChains, b.sizes.DAGWidth
	b.say("dag: %d chains of %d nodes, one at a time, and a diamond %d wide, against River chains and a River diamond", chains, DAGChainNodes, width)
	res := &DAGResult{ChainNodes: DAGChainNodes, Chains: chains, DiamondWidth: width}
	chainEdges := chains * (DAGChainNodes - 1)
	diamondEdges := 2 * width
	chainNodes, diamondNodes := chains*DAGChainNodes, width+2

	riverChain, err := b.riverDAGChains(ctx)
	if err != nil {
		return nil, err
	}
	res.ChainRiverS = round(riverChain.elapsed.Seconds(), 3)
	res.ChainRiverMsPerEdge = round(ms(riverChain.elapsed)/float64(chainEdges), 3)
	b.say("dag: river chains in %s, %.3f ms per edge, %.2f commits per job",
		riverChain.elapsed.Round(time.Millisecond), res.ChainRiverMsPerEdge, perUnit(riverChain.commits, chainNodes))

	braidChain, err := b.braidDAGChains(ctx)
	if err != nil {
		return nil, err
	}
	res.ChainBraidS = round(braidChain.elapsed.Seconds(), 3)
	res.ChainBraidMsPerEdge = round(ms(braidChain.elapsed)/float64(chainEdges), 3)
	res.ChainRatio = ratio(ms(braidChain.elapsed), ms(riverChain.elapsed))
	b.say("dag: braid chains in %s, %.3f ms per edge, ratio %.3f, %.2f commits per node",
		braidChain.elapsed.Round(time.Millisecond), res.ChainBraidMsPerEdge, res.ChainRatio, perUnit(braidChain.commits, chainNodes))

	riverDiamond, err := b.riverDiamond(ctx, width)
	if err != nil {
		return nil, err
	}
	res.DiamondRiverS = round(riverDiamond.elapsed.Seconds(), 3)
	res.DiamondRiverMsPerEdge = round(ms(riverDiamond.elapsed)/float64(diamondEdges), 3)
	b.say("dag: river diamond in %s, %.3f ms per edge, %.2f commits per job",
		riverDiamond.elapsed.Round(time.Millisecond), res.DiamondRiverMsPerEdge, perUnit(riverDiamond.commits, diamondNodes))

	braidDiamond, err := b.braidDiamond(ctx, width)
	if err != nil {
		return nil, err
	}
	res.DiamondBraidS = round(braidDiamond.elapsed.Seconds(), 3)
	res.DiamondBraidMsPerEdge = round(ms(braidDiamond.elapsed)/float64(diamondEdges), 3)
	res.DiamondRatio = ratio(ms(braidDiamond.elapsed), ms(riverDiamond.elapsed))
	b.say("dag: braid diamond in %s, %.3f ms per edge, ratio %.3f, %.2f commits per node",
		braidDiamond.elapsed.Round(time.Millisecond), res.DiamondBraidMsPerEdge, res.DiamondRatio, perUnit(braidDiamond.commits, diamondNodes))

	res.BraidCommitsPerRun = perUnit(braidChain.commits+braidDiamond.commits, chainNodes+diamondNodes)
	res.RiverCommitsPerRun = perUnit(riverChain.commits+riverDiamond.commits, chainNodes+diamondNodes)
	return res, nil
}

// chainDAG declares a DAG of DAGChainNodes nodes n0 → n1 → … each running
// node.
func chainDAG(node *workflow.Workflow[struct{}, struct{}]) *workflow.Workflow[struct{}, workflow.DAGResult] {
	nodes := make([]workflow.DAGNode, DAGChainNodes)
	for i := range nodes {
		var opts []workflow.NodeOption
		if i > 0 {
			opts = append(opts, workflow.After(fmt.Sprintf("n%d", i-1)))
		}
		nodes[i] = workflow.Node(fmt.Sprintf("n%d", i), node, opts...)
	}
	return workflow.DAG[struct{}]("bench_dag_chain", nodes...)
}

// diamondDAG declares a DAG of a root, width middle nodes that depend on
// it, and a sink that depends on every middle node, each running node.
func diamondDAG(node *workflow.Workflow[struct{}, struct{}], width int) *workflow.Workflow[struct{}, workflow.DAGResult] {
	nodes := []workflow.DAGNode{workflow.Node("root", node)}
	middle := make([]string, width)
	for i := range middle {
		middle[i] = fmt.Sprintf("m%d", i)
		nodes = append(nodes, workflow.Node(middle[i], node, workflow.After("root")))
	}
	nodes = append(nodes, workflow.Node("sink", node, workflow.After(middle...)))
	return workflow.DAG[struct{}]("bench_dag_diamond", nodes...)
}

// braidDAGChains runs the warm-up chain DAG, then the counted ones, one at
// a time, and returns the counted ones' time and commits.
func (b *bench) braidDAGChains(ctx context.Context) (phase, error) {
	s, err := b.newSide(ctx, ScenarioDAG, "braid_chain")
	if err != nil {
		return phase{}, err
	}
	defer s.close()
	node := noopWorkflow()
	chain := chainDAG(node)
	eng, err := s.startEngine(&workflow.Config{Workflows: []workflow.Definition{node, chain}})
	if err != nil {
		return phase{}, err
	}
	var start time.Time
	for c := -1; c < b.sizes.DAGChains; c++ {
		if c == 0 {
			if err := s.beginCommits(); err != nil {
				return phase{}, err
			}
			start = time.Now()
		}
		if _, err := chain.Start(s.ctx, eng, struct{}{}, nil); err != nil {
			return phase{}, err
		}
		if err := s.waitFor(runsDone, c+2); err != nil {
			return phase{}, err
		}
	}
	return s.endPhase(start)
}

// riverDAGChains is braidDAGChains on the River side, with the hop
// scenario's River chain.
func (b *bench) riverDAGChains(ctx context.Context) (phase, error) {
	s, err := b.newSide(ctx, ScenarioDAG, "river_chain")
	if err != nil {
		return phase{}, err
	}
	defer s.close()
	workers := river.NewWorkers()
	river.AddWorker(workers, &hopWorker{b: b, marks: newStamps(), pool: s.pool})
	client, err := s.startRiver(workers)
	if err != nil {
		return phase{}, err
	}
	var start time.Time
	for c := -1; c < b.sizes.DAGChains; c++ {
		if c == 0 {
			if err := s.beginCommits(); err != nil {
				return phase{}, err
			}
			start = time.Now()
		}
		if _, err := client.Insert(s.ctx, hopArgs{Chain: c, I: 0, Last: DAGChainNodes - 1}, nil); err != nil {
			return phase{}, err
		}
		if err := s.waitFor(jobsDone, (c+2)*DAGChainNodes); err != nil {
			return phase{}, err
		}
	}
	return s.endPhase(start)
}

// braidDiamond runs one diamond DAG width wide and returns the time until
// its run completed.
func (b *bench) braidDiamond(ctx context.Context, width int) (phase, error) {
	s, err := b.newSide(ctx, ScenarioDAG, "braid_diamond")
	if err != nil {
		return phase{}, err
	}
	defer s.close()
	node := noopWorkflow()
	diamond := diamondDAG(node, width)
	eng, err := s.startEngine(&workflow.Config{Workflows: []workflow.Definition{node, diamond}})
	if err != nil {
		return phase{}, err
	}
	if err := s.beginCommits(); err != nil {
		return phase{}, err
	}
	start := time.Now()
	if _, err := diamond.Start(s.ctx, eng, struct{}{}, nil); err != nil {
		return phase{}, err
	}
	if err := s.waitFor(runsDone, 1); err != nil {
		return phase{}, err
	}
	return s.endPhase(start)
}

// diamondRootArgs is the River diamond's root job.
type diamondRootArgs struct {
	Width int `json:"width"`
}

func (diamondRootArgs) Kind() string { return "bench_diamond_root" }

// diamondMiddleArgs is a middle job of the River diamond; Join is the
// join row it counts itself off.
type diamondMiddleArgs struct {
	Join int64 `json:"join"`
}

func (diamondMiddleArgs) Kind() string { return "bench_diamond_middle" }

// diamondRootWorker works the root job: in one transaction, it creates the
// join row, counting Width middle jobs, inserts them, and completes its
// job.
type diamondRootWorker struct {
	river.WorkerDefaults[diamondRootArgs]
	pool *pgxpool.Pool
}

func (w *diamondRootWorker) Work(ctx context.Context, job *river.Job[diamondRootArgs]) error {
	return pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO bench_diamond_join (id, remaining) VALUES ($1, $2)`, job.ID, job.Args.Width); err != nil {
			return err
		}
		params := make([]river.InsertManyParams, job.Args.Width)
		for i := range params {
			params[i] = river.InsertManyParams{Args: diamondMiddleArgs{Join: job.ID}}
		}
		if _, err := river.ClientFromContext[pgx.Tx](ctx).InsertManyTx(ctx, tx, params); err != nil {
			return err
		}
		_, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
		return err
	})
}

// diamondMiddleWorker works a middle job: in one transaction, it counts
// itself off the join row, inserts the sink job (a no-op job) when the
// count reaches zero, and completes its job.
type diamondMiddleWorker struct {
	river.WorkerDefaults[diamondMiddleArgs]
	pool *pgxpool.Pool
}

func (w *diamondMiddleWorker) Work(ctx context.Context, job *river.Job[diamondMiddleArgs]) error {
	return pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		var remaining int
		if err := tx.QueryRow(ctx, `
			UPDATE bench_diamond_join SET remaining = remaining - 1
			 WHERE id = $1 AND remaining > 0
			RETURNING remaining`, job.Args.Join).Scan(&remaining); err != nil {
			return err
		}
		if remaining == 0 {
			if _, err := river.ClientFromContext[pgx.Tx](ctx).InsertTx(ctx, tx, noopArgs{}, nil); err != nil {
				return err
			}
		}
		_, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
		return err
	})
}

// riverDiamond is braidDiamond on the River side: the time from the root
// job's insert until every job, the sink's included, completed.
func (b *bench) riverDiamond(ctx context.Context, width int) (phase, error) {
	s, err := b.newSide(ctx, ScenarioDAG, "river_diamond")
	if err != nil {
		return phase{}, err
	}
	defer s.close()
	if _, err := s.pool.Exec(s.ctx, `
		CREATE TABLE bench_diamond_join (
		    id        bigint PRIMARY KEY,
		    remaining int    NOT NULL
		)`); err != nil {
		return phase{}, err
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &diamondRootWorker{pool: s.pool})
	river.AddWorker(workers, &diamondMiddleWorker{pool: s.pool})
	river.AddWorker(workers, noopWorker{})
	client, err := s.startRiver(workers)
	if err != nil {
		return phase{}, err
	}
	if err := s.beginCommits(); err != nil {
		return phase{}, err
	}
	start := time.Now()
	if _, err := client.Insert(s.ctx, diamondRootArgs{Width: width}, nil); err != nil {
		return phase{}, err
	}
	if err := s.waitFor(jobsDone, width+2); err != nil {
		return phase{}, err
	}
	return s.endPhase(start)
}
