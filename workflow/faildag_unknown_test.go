package workflow_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// withQueues is cfg working only the queues named.
func withQueues(cfg *workflow.Config, names ...string) *workflow.Config {
	cfg.Queue.Queues = map[string]river.QueueConfig{}
	for _, n := range names {
		cfg.Queue.Queues[n] = river.QueueConfig{MaxWorkers: 10}
	}
	return cfg
}

// A node fails under FailDAG in a process that runs its workflow but does
// not know its DAG, and so cannot apply the policy; its dependent is left
// undecided. The process that knows the DAG and decides the dependent
// applies the policy first: the dependent is skipped, not released.
func TestFailDAGHoldsWhenTheNodeFailedInAProcessThatDoesNotKnowTheDAG(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ctx := ctxTimeout(t, 60*time.Second)
	a := workflow.Define("fu_a", func(t *workflow.Task, in dagIn) (int, error) { return 0, errors.New("boom") },
		workflow.WithMaxAttempts(1), workflow.WithQueue("fu_old"))
	b := workflow.Define("fu_b", func(t *workflow.Task, in dagIn) (int, error) { return 2, nil })
	dag := workflow.DAG[dagIn]("fu_dag", workflow.Node("a", a), workflow.Node("b", b, workflow.After("a")))

	old := startEngine(t, pool, withQueues(testConfig(a, b), "fu_old"))
	full := newEngine(t, pool, withQueues(testConfig(dag, a, b), river.QueueDefault))
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
	if _, err := run.Result(ctx); err == nil || !strings.Contains(err.Error(), `node "a"`) {
		t.Fatalf("run error %v; want node a's failure", err)
	}
	status, reasons := nodeStatuses(t, pool, run.ID)
	if status["b"] != "skipped" || reasons["b"] != `the DAG failed: node "a" failed` {
		t.Errorf("b is %s (%q); want skipped because the DAG failed", status["b"], reasons["b"])
	}
}

// A node fails under FailDAG in a process that does not know its DAG and
// has no dependent to leave undecided; another branch's node then
// completes in a process that knows the DAG. Its settle applies the
// policy: the branch's blocked node is skipped, not released.
func TestFailDAGHoldsWhenAnotherBranchSettlesInAProcessThatKnowsTheDAG(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ctx := ctxTimeout(t, 60*time.Second)
	a := workflow.Define("fs_a", func(t *workflow.Task, in dagIn) (int, error) { return 0, errors.New("boom") },
		workflow.WithMaxAttempts(1), workflow.WithQueue("fs_old"))
	d := workflow.Define("fs_d", func(t *workflow.Task, in dagIn) (int, error) { return 1, nil })
	e := workflow.Define("fs_e", func(t *workflow.Task, in dagIn) (int, error) { return 2, nil })
	dag := workflow.DAG[dagIn]("fs_dag", workflow.Node("a", a), workflow.Node("d", d), workflow.Node("e", e, workflow.After("d")))

	old := startEngine(t, pool, withQueues(testConfig(a), "fs_old"))
	full := newEngine(t, pool, withQueues(testConfig(dag, a, d, e), river.QueueDefault))
	run, err := dag.Start(ctx, full, dagIn{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "node a failed", 20*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM braid_tasks WHERE run_id = $1 AND key = 'a' AND status = 'failed'`, run.ID) == 1
	})
	if err := old.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := full.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := run.Result(ctx); err == nil || !strings.Contains(err.Error(), `node "a"`) {
		t.Fatalf("run error %v; want node a's failure", err)
	}
	status, reasons := nodeStatuses(t, pool, run.ID)
	if status["d"] != "completed" || status["e"] != "skipped" || reasons["e"] != `the DAG failed: node "a" failed` {
		t.Errorf("d is %s, e is %s (%q); want d completed and e skipped because the DAG failed", status["d"], status["e"], reasons["e"])
	}
}
