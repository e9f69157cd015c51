package workflow_test

import (
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// TestUndecidedNodesOfAnOlderVersionHideNoOther leaves, in more DAG runs
// than one look takes, undecided nodes that an older version of a DAG
// declared and the deciding process's version does not (a rolling deploy
// that removed a node), and one undecided node of a run of the version
// the process knows, left last. The process cannot decide the former; one
// look must still decide the latter, as it does when the undecidable
// nodes belong to a DAG it does not know at all.
func TestUndecidedNodesOfAnOlderVersionHideNoOther(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	a, b := nodeWorkflows("v")
	v1 := workflow.DAG[dagIn]("versioned_dag", workflow.Node("a", a), workflow.Node("gone", b, workflow.After("a")))
	v2 := workflow.DAG[dagIn]("versioned_dag", workflow.Node("a", a), workflow.Node("b", b, workflow.After("a")))
	ctx := ctxTimeout(t, 90*time.Second)

	const others = 120
	starter1 := newEngine(t, pool, testConfig(v1, a, b))
	params := make([]workflow.StartManyParams[dagIn], others)
	for i := range params {
		params[i].Input = dagIn{N: i}
	}
	if _, err := v1.StartMany(ctx, starter1, params); err != nil {
		t.Fatal(err)
	}
	// A process that runs the nodes but knows no DAG settles every node
	// a, and leaves every dependent undecided.
	oldCfg := testConfig(a, b)
	oldCfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	old := newEngine(t, pool, oldCfg)
	if err := old.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for count(t, pool, `SELECT count(*) FROM braid_tasks WHERE key = 'gone' AND status = 'blocked' AND remaining = 0`) < others {
		select {
		case <-ctx.Done():
			t.Fatal("the nodes gone never became undecided")
		case <-time.After(20 * time.Millisecond):
		}
	}
	starter2 := newEngine(t, pool, testConfig(v2, a, b))
	run, err := v2.Start(ctx, starter2, dagIn{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitUndecided(ctx, t, pool, 1, `run_id = $1`, run.ID)
	if err := old.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	decCfg := testConfig(v2, a, b)
	decCfg.Logger = oldCfg.Logger
	deciding := newEngine(t, pool, decCfg)
	// The looks find the same undecidable nodes first every time: three
	// are as good as any number.
	for range 3 {
		if err := workflow.DecideUndecidedNodes(ctx, deciding); err != nil {
			t.Fatal(err)
		}
	}
	status, _ := nodeStatuses(t, pool, run.ID)
	if diff := cmp.Diff(map[string]string{"a": "completed", "b": "pending"}, status); diff != "" {
		t.Errorf("the nodes of the run of the version the process knows, after three looks (-want +got):\n%s", diff)
	}
}

// TestRetryGivesNoTurnToTheForgottenNodesOfANestedDAG fails a node of a
// DAG that is itself a node (sub) of an outer DAG, after sub's dependency
// failed under Continue. Retry runs the dependency again, so sub starts
// afresh once released: its inner nodes are forgotten. None of them may
// get a turn: the tasks are gone, and sub's next turn creates new ones.
func TestRetryGivesNoTurnToTheForgottenNodesOfANestedDAG(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ctx := ctxTimeout(t, 60*time.Second)
	var fixed atomic.Bool
	flaky := func(name string) *workflow.Workflow[int, int] {
		return workflow.Define(name, func(t *workflow.Task, in int) (int, error) {
			if !fixed.Load() {
				return 0, errors.New(name + " is broken")
			}
			return in, nil
		}, workflow.WithMaxAttempts(1))
	}
	pre, x := flaky("rn_pre"), flaky("rn_x")
	inner := workflow.DAG[int]("rn_inner", workflow.Node("x", x))
	outer := workflow.DAG[int]("rn_outer",
		workflow.Node("pre", pre, workflow.OnFailure(workflow.Continue)),
		workflow.Node("sub", inner, workflow.After("pre")))
	eng := startEngine(t, pool, testConfig(pre, x, inner, outer))

	run, err := outer.Start(ctx, eng, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Result(ctx); err == nil || !strings.Contains(err.Error(), `node "sub"`) {
		t.Fatalf("Result = %v, want the run failed by node sub", err)
	}
	status, _ := nodeStatuses(t, pool, run.ID)
	if diff := cmp.Diff(map[string]string{"pre": "failed", "sub": "failed", "x": "failed"}, status); diff != "" {
		t.Fatalf("statuses (-want +got):\n%s", diff)
	}
	var lastJob int64
	if err := pool.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM river_job`).Scan(&lastJob); err != nil {
		t.Fatal(err)
	}

	fixed.Store(true)
	if err := eng.Retry(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := run.Result(ctx); err != nil {
		t.Fatalf("after Retry: %v", err)
	}
	if n := count(t, pool, `
		SELECT count(*) FROM river_job j
		 WHERE j.id > $1 AND j.kind = $2
		   AND NOT EXISTS (SELECT 1 FROM braid_tasks k WHERE k.id = braid_turn_task(j.unique_key, j.args))`,
		lastJob, workflow.TaskKind); n != 0 {
		t.Errorf("Retry gave %d turns to tasks that do not exist, want none", n)
	}
}

// TestDAGRunKeepsTheNodesItStartedWith: a run started when its DAG had
// node a alone ends in a process whose DAG adds node c after a (a deploy
// that grew the DAG). The run completes with a's output, its own sink,
// rather than fail for want of c; a run started by the grown DAG has c.
func TestDAGRunKeepsTheNodesItStartedWith(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	a, c := nodeWorkflows("grown")
	v1 := workflow.DAG[dagIn]("grown_dag", workflow.Node("a", a))
	nodeA := workflow.Node("a", a)
	nodeC := workflow.Node("c", c, workflow.After("a"))
	v2 := workflow.DAG[dagIn]("grown_dag", nodeA, nodeC)
	ctx := ctxTimeout(t, 60*time.Second)

	// Started by a process of the first version, which runs nothing.
	old := newEngine(t, pool, testConfig(v1, a, c))
	run, err := v1.Start(ctx, old, dagIn{N: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	eng := startEngine(t, pool, testConfig(v2, a, c))
	oldRun, err := v2.Get(ctx, eng, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	res, err := oldRun.Result(ctx)
	if err != nil {
		t.Fatalf("the run started before the DAG grew: %v", err)
	}
	if out, err := nodeA.From(res); err != nil || out != 1 {
		t.Errorf("the run started before the DAG grew: a's output %d, %v; want 1 (result %v)", out, err, res)
	}
	if _, ok := res["c"]; ok {
		t.Errorf("the run started before the DAG grew has an output of c: %v", res)
	}
	status, _ := nodeStatuses(t, pool, run.ID)
	if diff := cmp.Diff(map[string]string{"a": "completed"}, status); diff != "" {
		t.Errorf("the nodes of the run started before the DAG grew (-want +got):\n%s", diff)
	}

	grown, err := v2.Start(ctx, eng, dagIn{N: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err = grown.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := nodeC.From(res); err != nil || out != "b ran" {
		t.Errorf("the run of the grown DAG: c's output %q, %v; want its sink c (result %v)", out, err, res)
	}
}
