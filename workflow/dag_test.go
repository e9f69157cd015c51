package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

type dagIn struct {
	N    int    `json:"n"`
	Lang string `json:"lang"`
}

// nodeStatuses reads a DAG run's nodes: name → status, and name → skip
// reason for the skipped ones.
func nodeStatuses(t *testing.T, pool *pgxpool.Pool, runID string) (map[string]string, map[string]string) {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT key, status, coalesce(skip_reason, '') FROM braid_tasks
		 WHERE run_id = $1 AND dependents IS NOT NULL`, runID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	status, reasons := map[string]string{}, map[string]string{}
	for rows.Next() {
		var k, s, r string
		if err := rows.Scan(&k, &s, &r); err != nil {
			t.Fatal(err)
		}
		status[k] = s
		if r != "" {
			reasons[k] = r
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return status, reasons
}

// nodeTurns counts the turn jobs of a run's node.
func nodeTurns(t *testing.T, pool *pgxpool.Pool, runID, node string) int {
	t.Helper()
	return count(t, pool, `
		SELECT count(*) FROM river_job j JOIN braid_tasks k ON braid_turn_task(j.unique_key, j.args) = k.id
		 WHERE k.run_id = $1 AND k.key = $2 AND k.dependents IS NOT NULL`, runID, node)
}

// TestDiamondRunsTheJoinOnce runs A → B, C → D fifty times, with B and C
// released by A together and finishing together (both wait on a barrier),
// and checks that D has exactly one turn each time, after both.
func TestDiamondRunsTheJoinOnce(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ledger(t, pool)
	const reps = 50
	var mu sync.Mutex
	arrived := map[string]int{}
	release := map[string]chan struct{}{}
	barrier := func(runID string) {
		mu.Lock()
		ch := release[runID]
		if ch == nil {
			ch = make(chan struct{})
			release[runID] = ch
		}
		arrived[runID]++
		if arrived[runID] == 2 {
			close(ch)
		}
		mu.Unlock()
		select {
		case <-ch:
		case <-time.After(20 * time.Second):
		}
	}
	start := workflow.Define("diamond_a", func(t *workflow.Task, in dagIn) (int, error) { return in.N, nil })
	mid := workflow.Define("diamond_mid", func(t *workflow.Task, in dagIn) (int, error) {
		n, err := workflow.Step(t, "work", func(ctx context.Context) (int, error) {
			barrier(t.RunID())
			return in.N * 10, recordStep(pool, t, t.Key())
		})
		return n, err
	})
	a := workflow.Node("a", start)
	b := workflow.Node("b", mid, workflow.After("a"))
	c := workflow.Node("c", mid, workflow.After("a"))
	var dRefs struct{ b, c *workflow.NodeRef[int] }
	dRefs.b, dRefs.c = b, c
	join := workflow.Define("diamond_d", func(t *workflow.Task, in dagIn) (int, error) {
		bv, err := dRefs.b.Output(t)
		if err != nil {
			return 0, err
		}
		cv, err := dRefs.c.Output(t)
		if err != nil {
			return 0, err
		}
		return bv + cv, recordStep(pool, t, "d")
	})
	d := workflow.Node("d", join, workflow.After("b", "c"))
	dag := workflow.DAG[dagIn]("diamond", a, b, c, d)
	cfg := testConfig(dag, start, mid, join)
	cfg.Queue.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 8}}
	eng := startEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 120*time.Second)

	for i := range reps {
		r, err := dag.Start(ctx, eng, dagIn{N: i}, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := r.Result(ctx)
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		got, err := d.From(res)
		if err != nil {
			t.Fatal(err)
		}
		if got != 20*i {
			t.Errorf("run %d: d = %d, want %d", i, got, 20*i)
		}
		if _, err := b.From(res); !errors.Is(err, workflow.ErrNoOutput) {
			t.Errorf("run %d: b is not a sink, but From gave %v", i, err)
		}
		if n := nodeTurns(t, pool, r.ID, "d"); n != 1 {
			t.Errorf("run %d: d had %d turns, want 1", i, n)
		}
		if n := count(t, pool, `SELECT count(*) FROM ledger WHERE run_id = $1 AND step = 'd'`, r.ID); n != 1 {
			t.Errorf("run %d: d recorded %d times, want 1", i, n)
		}
		for _, node := range []string{"b", "c"} {
			if n := count(t, pool, `SELECT count(*) FROM ledger WHERE run_id = $1 AND step = $2`, r.ID, node); n != 1 {
				t.Errorf("run %d: %s ran %d times, want 1", i, node, n)
			}
		}
		// D started after both B and C finished.
		if n := count(t, pool, `
			SELECT count(*) FROM braid_tasks dd JOIN braid_tasks m ON m.parent_task_id = dd.parent_task_id AND m.key IN ('b', 'c')
			 WHERE dd.run_id = $1 AND dd.key = 'd' AND dd.started_at >= m.finished_at`, r.ID); n != 2 {
			t.Errorf("run %d: d started before %d of b and c finished", i, 2-n)
		}
	}
}

// TestWhenFalseSkipsTheBranch checks that a false condition skips its
// node and the nodes that depend only on it, while a sibling branch runs,
// and that the skip reasons are recorded.
func TestWhenFalseSkipsTheBranch(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	extract := workflow.Define("w_extract", func(t *workflow.Task, in dagIn) (string, error) { return in.Lang, nil })
	summarize := workflow.Define("w_summarize", func(t *workflow.Task, in dagIn) (string, error) { return "summary", nil })
	translate := workflow.Define("w_translate", func(t *workflow.Task, in dagIn) (string, error) { return "translated", nil })
	index := workflow.Define("w_index", func(t *workflow.Task, in dagIn) (string, error) { return "indexed", nil })
	ex := workflow.Node("extract", extract)
	sum := workflow.Node("summarize", summarize, workflow.After("extract"), workflow.When(`extract == "en"`))
	tr := workflow.Node("translate", translate, workflow.After("summarize"))
	idx := workflow.Node("index", index, workflow.After("extract"), workflow.When(`input.n > 0 && status.extract == "completed"`))
	dag := workflow.DAG[dagIn]("when_dag", ex, sum, tr, idx)
	eng := startEngine(t, pool, testConfig(dag, extract, summarize, translate, index))
	ctx := ctxTimeout(t, 30*time.Second)

	run, err := dag.Start(ctx, eng, dagIn{N: 1, Lang: "fr"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := run.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := idx.From(res); err != nil || got != "indexed" {
		t.Errorf("index = %q, %v", got, err)
	}
	if _, err := tr.From(res); !errors.Is(err, workflow.ErrNoOutput) {
		t.Errorf("translate was skipped, but From gave %v", err)
	}
	status, reasons := nodeStatuses(t, pool, run.ID)
	want := map[string]string{"extract": "completed", "summarize": "skipped", "translate": "skipped", "index": "completed"}
	if diff := cmp.Diff(want, status); diff != "" {
		t.Errorf("statuses (-want +got):\n%s", diff)
	}
	wantReasons := map[string]string{
		"summarize": `condition false: extract == "en"`,
		"translate": "every dependency was skipped: summarize",
	}
	if diff := cmp.Diff(wantReasons, reasons); diff != "" {
		t.Errorf("skip reasons (-want +got):\n%s", diff)
	}
	if n := nodeTurns(t, pool, run.ID, "summarize") + nodeTurns(t, pool, run.ID, "translate"); n != 0 {
		t.Errorf("skipped nodes had %d turns", n)
	}

	// The same DAG with an English input runs every node.
	run, err = dag.Start(ctx, eng, dagIn{N: 1, Lang: "en"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err = run.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := tr.From(res); err != nil || got != "translated" {
		t.Errorf("translate = %q, %v", got, err)
	}
}

// A DAG's root fails at once when a node has failed, on the attempt that
// read the failure: its turn job is cancelled with the error there, not
// left for River to retry (a retry would only find the task failed, and
// until then a Retry of the run would find the turn still live). The
// run's dead letter is the node's job.
func TestFailedDAGRootsTurnIsNotRetried(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	broken := workflow.Define("root_broken_node", func(t *workflow.Task, _ dagIn) (string, error) {
		return "", errors.New("broken for good")
	}, workflow.WithMaxAttempts(1))
	dag := workflow.DAG[dagIn]("root_failing_dag", workflow.Node("broken", broken))
	eng := startEngine(t, pool, testConfig(dag, broken))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := dag.Start(ctx, eng, dagIn{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var re *workflow.RunError
	if _, err := run.Result(ctx); !errors.As(err, &re) || re.Status != "failed" {
		t.Fatalf("Result = %v; want the run failed", err)
	}
	turns := `
		SELECT count(*) FROM river_job j JOIN braid_tasks t ON t.id = braid_turn_task(j.unique_key, j.args)
		 WHERE t.run_id = $1 AND (t.parent_task_id IS NULL) = $2 AND j.state = $3 AND j.attempt = 1`
	waitFor(t, "the root's turn job to be finalized", 10*time.Second, func() bool {
		return count(t, pool, `
			SELECT count(*) FROM river_job j JOIN braid_tasks t ON t.id = braid_turn_task(j.unique_key, j.args)
			 WHERE t.run_id = $1 AND t.parent_task_id IS NULL AND j.finalized_at IS NOT NULL`, run.ID) > 0
	})
	if n := count(t, pool, turns, run.ID, true, "cancelled"); n != 1 {
		t.Errorf("%d of the root's turn jobs were cancelled on attempt 1; want its one turn job", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM river_job j JOIN braid_tasks t ON t.id = braid_turn_task(j.unique_key, j.args)
		 WHERE t.run_id = $1 AND t.parent_task_id IS NULL`, run.ID); n != 1 {
		t.Errorf("the root has %d turn jobs; want 1", n)
	}
	if n := count(t, pool, turns, run.ID, false, "discarded"); n != 1 {
		t.Errorf("%d of the node's turn jobs were discarded on attempt 1; want its one turn job, the run's dead letter", n)
	}
}

// TestNodeFailureFailsTheRunAndRetryRerunsOnlyIt fails a node
// permanently: the run fails naming it, its dependents are skipped, the
// on-failure node runs, and Retry once the fault is fixed reruns that node
// and its dependents only.
func TestNodeFailureFailsTheRunAndRetryRerunsOnlyIt(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ledger(t, pool)
	var mu sync.Mutex
	broken := true
	ok := func(name string) *workflow.Workflow[dagIn, string] {
		return workflow.Define(name, func(t *workflow.Task, in dagIn) (string, error) {
			return name, recordStep(pool, t, t.Key())
		})
	}
	first, side, last, cleanup := ok("f_first"), ok("f_side"), ok("f_last"), ok("f_cleanup")
	flaky := workflow.Define("f_flaky", func(t *workflow.Task, in dagIn) (string, error) {
		if err := recordStep(pool, t, t.Key()); err != nil {
			return "", err
		}
		mu.Lock()
		defer mu.Unlock()
		if broken {
			return "", errors.New("the index is down")
		}
		return "fixed", nil
	}, workflow.WithMaxAttempts(2), workflow.WithRetry(fast))
	dag := workflow.DAG[dagIn]("failing_dag",
		workflow.Node("first", first),
		workflow.Node("side", side, workflow.After("first")),
		workflow.Node("flaky", flaky, workflow.After("first")),
		workflow.Node("last", last, workflow.After("flaky", "side")),
		workflow.Node("cleanup", cleanup, workflow.IfDAGFails()),
	)
	eng := startEngine(t, pool, testConfig(dag, first, side, last, cleanup, flaky))
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := dag.Start(ctx, eng, dagIn{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = run.Result(ctx)
	var re *workflow.RunError
	if !errors.As(err, &re) || re.Status != "failed" || !strings.Contains(re.Message, `node "flaky"`) || !strings.Contains(re.Message, "the index is down") {
		t.Fatalf("Result = %v, want the run failed naming node flaky and its error", err)
	}
	status, reasons := nodeStatuses(t, pool, run.ID)
	want := map[string]string{"first": "completed", "side": "completed", "flaky": "failed", "last": "skipped", "cleanup": "completed"}
	if diff := cmp.Diff(want, status); diff != "" {
		t.Errorf("statuses (-want +got):\n%s", diff)
	}
	if r := reasons["last"]; r != `the DAG failed: node "flaky" failed` {
		t.Errorf("last's skip reason = %q", r)
	}

	mu.Lock()
	broken = false
	mu.Unlock()
	if err := eng.Retry(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	res, err := run.Result(ctx)
	if err != nil {
		t.Fatalf("after Retry: %v", err)
	}
	if len(res) != 1 || string(res["last"]) != `"f_last"` {
		t.Errorf("result = %v, want last's output", res)
	}
	runs := func(node string) int {
		return count(t, pool, `SELECT count(*) FROM ledger WHERE run_id = $1 AND step = $2`, run.ID, node)
	}
	for node, want := range map[string]int{"first": 1, "side": 1, "flaky": 3, "last": 1, "cleanup": 1} {
		if got := runs(node); got != want {
			t.Errorf("%s ran %d times, want %d", node, got, want)
		}
	}
	status, _ = nodeStatuses(t, pool, run.ID)
	want = map[string]string{"first": "completed", "side": "completed", "flaky": "completed", "last": "completed", "cleanup": "skipped"}
	if diff := cmp.Diff(want, status); diff != "" {
		t.Errorf("statuses after Retry (-want +got):\n%s", diff)
	}
}

// TestContinuePolicyLetsDependentsDecide fails a node under Continue: its
// dependents run or skip by their conditions, which see its status, and
// the run completes.
func TestContinuePolicyLetsDependentsDecide(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	bad := workflow.Define("c_bad", func(t *workflow.Task, in dagIn) (string, error) {
		return "", errors.New("no luck")
	}, workflow.WithMaxAttempts(1))
	fallback := workflow.Define("c_fallback", func(t *workflow.Task, in dagIn) (string, error) { return "fallback", nil })
	after := workflow.Define("c_after", func(t *workflow.Task, in dagIn) (string, error) { return "after", nil })
	badRef := workflow.Node("bad", bad, workflow.OnFailure(workflow.Continue))
	read := workflow.Define("c_read", func(t *workflow.Task, in dagIn) (string, error) {
		_, err := badRef.Output(t)
		if !errors.Is(err, workflow.ErrNoOutput) || !strings.Contains(err.Error(), "no luck") {
			return "", fmt.Errorf("Output of a failed node = %v", err)
		}
		return "read", nil
	})
	dag := workflow.DAG[dagIn]("continue_dag",
		badRef,
		workflow.Node("fallback", fallback, workflow.After("bad"), workflow.When(`status.bad == "failed"`)),
		workflow.Node("after", after, workflow.After("bad"), workflow.When(`status.bad == "completed"`)),
		workflow.Node("read", read, workflow.After("bad")),
	)
	eng := startEngine(t, pool, testConfig(dag, bad, fallback, after, read))
	ctx := ctxTimeout(t, 30*time.Second)
	run, err := dag.Start(ctx, eng, dagIn{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := run.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := workflow.DAGResult{"fallback": []byte(`"fallback"`), "read": []byte(`"read"`)}
	if diff := cmp.Diff(want, res); diff != "" {
		t.Errorf("result (-want +got):\n%s", diff)
	}
	status, _ := nodeStatuses(t, pool, run.ID)
	if diff := cmp.Diff(map[string]string{"bad": "failed", "fallback": "completed", "after": "skipped", "read": "completed"}, status); diff != "" {
		t.Errorf("statuses (-want +got):\n%s", diff)
	}
}

// TestConditionErrorFailsTheNode checks that a condition that fails to
// evaluate fails its node, with the node and the expression in the run's
// error.
func TestConditionErrorFailsTheNode(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	src := workflow.Define("e_src", func(t *workflow.Task, in dagIn) (map[string]any, error) { return map[string]any{"a": nil}, nil })
	dst := workflow.Define("e_dst", func(t *workflow.Task, in dagIn) (string, error) { return "ran", nil })
	dag := workflow.DAG[dagIn]("cond_error_dag",
		workflow.Node("src", src),
		workflow.Node("dst", dst, workflow.After("src"), workflow.When(`src.a.b > 1`)),
	)
	eng := startEngine(t, pool, testConfig(dag, src, dst))
	ctx := ctxTimeout(t, 30*time.Second)
	run, err := dag.Start(ctx, eng, dagIn{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = run.Result(ctx)
	if err == nil || !strings.Contains(err.Error(), `node "dst"`) || !strings.Contains(err.Error(), "src.a.b > 1") {
		t.Fatalf("Result = %v, want an error naming node dst and its expression", err)
	}
	if n := nodeTurns(t, pool, run.ID, "dst"); n != 0 {
		t.Errorf("dst had %d turns", n)
	}
}

// TestDAGAsAChildAndAWorkflowAsANode starts a DAG as a child of a
// workflow, with a node that is itself a workflow spawning children.
func TestDAGAsAChildAndAWorkflowAsANode(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	double := workflow.Define("k_double", func(t *workflow.Task, n int) (int, error) { return 2 * n, nil })
	fan := workflow.Define("k_fan", func(t *workflow.Task, in dagIn) (int, error) {
		outs, err := workflow.Map(t, "double", double, []int{in.N, in.N + 1})
		if err != nil {
			return 0, err
		}
		return outs[0] + outs[1], nil
	})
	plus := workflow.Define("k_plus", func(t *workflow.Task, in dagIn) (int, error) { return in.N + 100, nil })
	fanRef := workflow.Node("fan", fan)
	sum := workflow.Define("k_sum", func(t *workflow.Task, in dagIn) (int, error) {
		return fanRef.Output(t)
	})
	sumRef := workflow.Node("sum", sum, workflow.After("fan", "plus"))
	dag := workflow.DAG[dagIn]("child_dag", fanRef, workflow.Node("plus", plus), sumRef)
	parent := workflow.Define("k_parent", func(t *workflow.Task, n int) (int, error) {
		f := workflow.Go(t, "dag", dag, dagIn{N: n})
		res, err := f.Get()
		if err != nil {
			return 0, err
		}
		return sumRef.From(res)
	})
	eng := startEngine(t, pool, testConfig(parent, dag, fan, plus, sum, double))
	ctx := ctxTimeout(t, 30*time.Second)
	run, err := parent.Start(ctx, eng, 5, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := run.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got != 2*5+2*6 {
		t.Errorf("result = %d, want %d", got, 2*5+2*6)
	}
}

// TestCancelADAGRun cancels a DAG run while its first node runs: the
// blocked nodes are cancelled, and no node runs afterwards. Retry then
// runs every node, the first one included.
func TestCancelADAGRun(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ledger(t, pool)
	started := make(chan struct{}, 1)
	var cancelled atomic.Bool
	slow := workflow.Define("x_slow", func(t *workflow.Task, in dagIn) (string, error) {
		return workflow.Step(t, "wait", func(ctx context.Context) (string, error) {
			if cancelled.Load() {
				return "slow", nil
			}
			started <- struct{}{}
			<-ctx.Done()
			return "", ctx.Err()
		})
	})
	next := workflow.Define("x_next", func(t *workflow.Task, in dagIn) (string, error) {
		return "next", recordStep(pool, t, "next")
	})
	dag := workflow.DAG[dagIn]("cancel_dag", workflow.Node("slow", slow), workflow.Node("next", next, workflow.After("slow")))
	eng := startEngine(t, pool, testConfig(dag, slow, next))
	ctx := ctxTimeout(t, 30*time.Second)
	run, err := dag.Start(ctx, eng, dagIn{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	if err := eng.Cancel(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := run.Result(ctx); !errors.Is(err, workflow.ErrCancelled) {
		t.Fatalf("Result = %v, want cancelled", err)
	}
	status, _ := nodeStatuses(t, pool, run.ID)
	if diff := cmp.Diff(map[string]string{"slow": "cancelled", "next": "cancelled"}, status); diff != "" {
		t.Errorf("statuses (-want +got):\n%s", diff)
	}
	if n := count(t, pool, `SELECT count(*) FROM ledger WHERE run_id = $1`, run.ID); n != 0 {
		t.Errorf("next ran %d times after Cancel", n)
	}

	cancelled.Store(true)
	if err := eng.Retry(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	res, err := run.Result(ctx)
	if err != nil {
		t.Fatalf("after Retry: %v", err)
	}
	if string(res["next"]) != `"next"` {
		t.Errorf("result = %v, want next's output", res)
	}
	status, _ = nodeStatuses(t, pool, run.ID)
	if diff := cmp.Diff(map[string]string{"slow": "completed", "next": "completed"}, status); diff != "" {
		t.Errorf("statuses after Retry (-want +got):\n%s", diff)
	}
}

// TestUndecidedNodeIsDecidedByAProcessThatKnowsTheDAG settles a node's
// last dependency in a process that runs the node workflows but does not
// know their DAG, as during a rolling deploy: the dependent is left
// blocked with nothing to wait for, and a process that knows the DAG
// decides it.
func TestUndecidedNodeIsDecidedByAProcessThatKnowsTheDAG(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	a, b := nodeWorkflows("u")
	bRef := workflow.Node("b", b, workflow.After("a"), workflow.When(`a == 1`))
	dag := workflow.DAG[dagIn]("undecided_dag", workflow.Node("a", a), bRef)
	ctx := ctxTimeout(t, 60*time.Second)

	old, err := workflow.NewEngine(pool, testConfig(a, b))
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Start(ctx); err != nil {
		t.Fatal(err)
	}
	full := newEngine(t, pool, testConfig(dag, a, b))
	run, err := dag.Start(ctx, full, dagIn{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitUndecided(ctx, t, pool, 1, `run_id = $1`, run.ID)
	if err := old.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := full.Start(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := run.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := bRef.From(res); err != nil || got != "b ran" {
		t.Errorf("b = %q, %v", got, err)
	}
}

// TestUndecidedNodesOfAnUnknownDAGHideNoOther leaves more undecided nodes
// of a DAG that the deciding process does not know than one look takes,
// as services that share a database would, and one of a DAG it knows,
// left last: one look decides the node it knows and
// leaves the others to a process that knows theirs.
func TestUndecidedNodesOfAnUnknownDAGHideNoOther(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	a, b := nodeWorkflows("h")
	hidden := workflow.DAG[dagIn]("hidden_dag", workflow.Node("a", a), workflow.Node("b", b, workflow.After("a")))
	known := workflow.DAG[dagIn]("known_dag", workflow.Node("a", a), workflow.Node("b", b, workflow.After("a")))
	ctx := ctxTimeout(t, 60*time.Second)

	starter := newEngine(t, pool, testConfig(hidden, known, a, b))
	const others = 120
	params := make([]workflow.StartManyParams[dagIn], others)
	for i := range params {
		params[i].Input = dagIn{N: i}
	}
	if _, err := hidden.StartMany(ctx, starter, params); err != nil {
		t.Fatal(err)
	}
	run, err := known.Start(ctx, starter, dagIn{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A process that runs the nodes but knows neither DAG settles every
	// node a and leaves every node b undecided (warning of each, which
	// this test does not need to read).
	oldCfg := testConfig(a, b)
	oldCfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	old := newEngine(t, pool, oldCfg)
	if err := old.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitUndecided(ctx, t, pool, others+1, `true`)
	if err := old.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	deciding := newEngine(t, pool, testConfig(known, a, b))
	if err := workflow.DecideUndecidedNodes(ctx, deciding); err != nil {
		t.Fatal(err)
	}

	status, _ := nodeStatuses(t, pool, run.ID)
	if diff := cmp.Diff(map[string]string{"a": "completed", "b": "pending"}, status); diff != "" {
		t.Errorf("the nodes of the DAG the process knows after one look (-want +got):\n%s", diff)
	}
	if n := nodeTurns(t, pool, run.ID, "b"); n != 1 {
		t.Errorf("node b of the DAG the process knows has %d turns, want 1", n)
	}
	if n := count(t, pool, `
		SELECT count(*) FROM braid_tasks t JOIN braid_tasks p ON p.id = t.parent_task_id
		 WHERE p.workflow = 'hidden_dag' AND t.key = 'b' AND t.status = 'blocked' AND t.remaining = 0`); n != others {
		t.Errorf("%d nodes b of the unknown DAG are still undecided, want all %d", n, others)
	}
}

// TestUndecidedNodeIsDecidedByAProcessThatDoesNotLead: as services that
// share a database, the process that settles a node's last dependency,
// and holds the maintenance lease throughout, does not know the node's
// DAG; another process, which knows the DAG but leads nothing, decides the
// node.
func TestUndecidedNodeIsDecidedByAProcessThatDoesNotLead(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	a, b := nodeWorkflows("l")
	bRef := workflow.Node("b", b, workflow.After("a"))
	dag := workflow.DAG[dagIn]("leaderless_dag", workflow.Node("a", a), bRef)
	ctx := ctxTimeout(t, 30*time.Second)

	other := newEngine(t, pool, testConfig(a, b))
	if err := other.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Stop(context.Background()) })
	holder := func() string {
		t.Helper()
		var h string
		for {
			err := pool.QueryRow(ctx, `SELECT holder FROM braid_leases WHERE name = $1 AND expires_at > now()`, queue.MaintenanceLease).Scan(&h)
			if err == nil {
				return h
			}
			if ctx.Err() != nil {
				t.Fatalf("reading the maintenance lease: %v", err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	lead := holder()

	owner := newEngine(t, pool, testConfig(dag, a, b))
	run, err := dag.Start(ctx, owner, dagIn{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitUndecided(ctx, t, pool, 1, `run_id = $1`, run.ID)
	if err := owner.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for count(t, pool, `SELECT count(*) FROM braid_tasks WHERE run_id = $1 AND key = 'b' AND status = 'blocked'`, run.ID) != 0 {
		select {
		case <-ctx.Done():
			t.Fatal("node b was never decided")
		case <-time.After(20 * time.Millisecond):
		}
	}
	if h := holder(); h != lead {
		t.Fatalf("the maintenance lease moved from %s to %s; the test needs its first holder to keep it", lead, h)
	}
	// The other process would put back the turns of the DAG's root, which
	// it does not know, for UnknownWorkflowSnooze each time it took one.
	if err := other.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := run.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := bRef.From(res); err != nil || got != "b ran" {
		t.Errorf("b = %q, %v", got, err)
	}
}

// waitUndecided waits until n nodes b that match where (with args) are
// undecided: blocked with no dependency left to wait for.
func waitUndecided(ctx context.Context, t *testing.T, pool *pgxpool.Pool, n int, where string, args ...any) {
	t.Helper()
	for count(t, pool, `SELECT count(*) FROM braid_tasks WHERE key = 'b' AND status = 'blocked' AND remaining = 0 AND `+where, args...) < n {
		select {
		case <-ctx.Done():
			t.Fatalf("%d nodes b never became undecided", n)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// nodeWorkflows defines the node workflows of the undecided-node tests,
// named prefix_a and prefix_b: a returns 1, b returns "b ran".
func nodeWorkflows(prefix string) (*workflow.Workflow[dagIn, int], *workflow.Workflow[dagIn, string]) {
	a := workflow.Define(prefix+"_a", func(t *workflow.Task, in dagIn) (int, error) { return 1, nil })
	b := workflow.Define(prefix+"_b", func(t *workflow.Task, in dagIn) (string, error) { return "b ran", nil })
	return a, b
}
