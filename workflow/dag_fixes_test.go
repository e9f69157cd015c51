package workflow_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// TestRootNodeConditionIsDecidedAtStart starts a DAG whose node without
// dependencies has a When condition on the input: a false condition skips
// it before it ever gets a turn, and the skip cascades to its dependents;
// a true one runs it.
func TestRootNodeConditionIsDecidedAtStart(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	a := workflow.Define("rw_a", func(t *workflow.Task, in dagIn) (string, error) { return "a ran", nil })
	b := workflow.Define("rw_b", func(t *workflow.Task, in dagIn) (string, error) { return "b ran", nil })
	c := workflow.Define("rw_c", func(t *workflow.Task, in dagIn) (string, error) { return "c ran", nil })
	aRef := workflow.Node("a", a, workflow.When(`input.lang == "en"`))
	cRef := workflow.Node("c", c, workflow.After("a"))
	dag := workflow.DAG[dagIn]("rw_dag", aRef, workflow.Node("b", b), cRef)
	eng := startEngine(t, pool, testConfig(dag, a, b, c))
	ctx := ctxTimeout(t, 30*time.Second)

	run, err := dag.Start(ctx, eng, dagIn{Lang: "fr"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Result(ctx); err != nil {
		t.Fatal(err)
	}
	status, reasons := nodeStatuses(t, pool, run.ID)
	if diff := cmp.Diff(map[string]string{"a": "skipped", "b": "completed", "c": "skipped"}, status); diff != "" {
		t.Errorf("statuses (-want +got):\n%s", diff)
	}
	wantReasons := map[string]string{"a": `condition false: input.lang == "en"`, "c": "every dependency was skipped: a"}
	if diff := cmp.Diff(wantReasons, reasons); diff != "" {
		t.Errorf("skip reasons (-want +got):\n%s", diff)
	}
	if n := nodeTurns(t, pool, run.ID, "a") + nodeTurns(t, pool, run.ID, "c"); n != 0 {
		t.Errorf("skipped nodes had %d turns", n)
	}

	run, err = dag.Start(ctx, eng, dagIn{Lang: "en"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := run.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := cRef.From(res); err != nil || got != "c ran" {
		t.Errorf("c = %q, %v", got, err)
	}
}

// TestDAGWhoseEveryNodeIsSkippedAtStartCompletes starts, as a run and as a
// child, a DAG whose only node's condition is false at start: the root
// counts the skip off at once and the run completes with no output.
func TestDAGWhoseEveryNodeIsSkippedAtStartCompletes(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	a := workflow.Define("rs_a", func(t *workflow.Task, in dagIn) (string, error) { return "a ran", nil })
	aRef := workflow.Node("a", a, workflow.When(`input.n > 0`))
	dag := workflow.DAG[dagIn]("rs_dag", aRef)
	parent := workflow.Define("rs_parent", func(t *workflow.Task, n int) (string, error) {
		res, err := workflow.Go(t, "dag", dag, dagIn{N: n}).Get()
		if err != nil {
			return "", err
		}
		return aRef.From(res)
	})
	eng := startEngine(t, pool, testConfig(dag, a, parent))
	ctx := ctxTimeout(t, 30*time.Second)

	run, err := dag.Start(ctx, eng, dagIn{N: 0}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := run.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 0 {
		t.Errorf("result = %v, want none", res)
	}
	if status, _ := nodeStatuses(t, pool, run.ID); status["a"] != "skipped" {
		t.Errorf("a is %q, want skipped", status["a"])
	}

	// As a child: the parent's batch creates the DAG and decides its node.
	prun, err := parent.Start(ctx, eng, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := prun.Result(ctx); err == nil || !strings.Contains(err.Error(), "no output") {
		t.Errorf("parent's result: %v, want no output for a skipped node", err)
	}
	prun, err = parent.Start(ctx, eng, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := prun.Result(ctx); err != nil || got != "a ran" {
		t.Errorf("parent's result = %q, %v", got, err)
	}
}

// TestRootNodeConditionErrorAtStartFailsTheNode starts a DAG whose root
// node's condition cannot be evaluated on the input: the node fails at
// start, as a dependent's would once released, and the run fails naming
// it.
func TestRootNodeConditionErrorAtStartFailsTheNode(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	a := workflow.Define("re_a", func(t *workflow.Task, in dagIn) (string, error) { return "a ran", nil })
	b := workflow.Define("re_b", func(t *workflow.Task, in dagIn) (string, error) { return "b ran", nil })
	dag := workflow.DAG[dagIn]("re_dag",
		workflow.Node("a", a, workflow.When(`input.lang.x == 1`)),
		workflow.Node("b", b, workflow.After("a")))
	eng := startEngine(t, pool, testConfig(dag, a, b))
	ctx := ctxTimeout(t, 30*time.Second)
	run, err := dag.Start(ctx, eng, dagIn{Lang: "fr"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Result(ctx); err == nil || !strings.Contains(err.Error(), `node "a"`) {
		t.Fatalf("result error %v, want node a's failure", err)
	}
	status, _ := nodeStatuses(t, pool, run.ID)
	if diff := cmp.Diff(map[string]string{"a": "failed", "b": "skipped"}, status); diff != "" {
		t.Errorf("statuses (-want +got):\n%s", diff)
	}
	if n := nodeTurns(t, pool, run.ID, "a"); n != 0 {
		t.Errorf("a had %d turns", n)
	}
}

// TestDAGConditionThatIsNotText refuses a When condition holding a NUL
// character or invalid UTF-8, which the node's skip reason could not
// store, naming the DAG, the node and the rule.
func TestDAGConditionThatIsNotText(t *testing.T) {
	t.Parallel()
	for _, src := range []string{"input.source == \"\x00\"", "input.source == \"\xff\""} {
		dag := workflow.DAG[etlIn]("dag_nul_cond",
			workflow.Node("extract", extractWF),
			workflow.Node("load", loadWF, workflow.After("extract"), workflow.When(src)))
		badDAG(t, dag, `"dag_nul_cond"`, `"load"`, "NUL character or invalid UTF-8")
	}
}

// TestDAGStartedByNameFromAnEngineThatDoesNotKnowIt starts DAG runs by
// name on an engine that registers nothing: one of a DAG the database has
// seen, and one forced of a DAG it has never seen. The engine that knows
// the DAG creates the nodes on the root's first turn and the runs
// complete, a root node's false condition skipping it there.
func TestDAGStartedByNameFromAnEngineThatDoesNotKnowIt(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ctx := ctxTimeout(t, 60*time.Second)
	a := workflow.Define("sbn_a", func(t *workflow.Task, in int) (int, error) { return in + 1, nil })
	aRef := workflow.Node("a", a)
	bRef := workflow.Node("b", a, workflow.After("a"))
	dag := workflow.DAG[int]("sbn_dag", aRef, bRef)
	gRef := workflow.Node("g", a, workflow.When(`input > 5`))
	hRef := workflow.Node("h", a)
	gated := workflow.DAG[int]("sbn_gated", gRef, hRef)
	worker := startEngine(t, pool, testConfig(a, dag, gated))
	dispatcher := newEngine(t, pool, testConfig())

	first, err := dag.Start(ctx, worker, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Result(ctx); err != nil {
		t.Fatal(err)
	}
	started, err := dispatcher.StartByName(ctx, "sbn_dag", json.RawMessage(`2`), nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := worker.Wait(ctx, started.ID)
	if err != nil {
		t.Fatalf("the run started by name: %v", err)
	}
	var res workflow.DAGResult
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	if got, err := bRef.From(res); err != nil || got != 3 {
		t.Errorf("b = %d, %v; want 3", got, err)
	}

	forced, err := dispatcher.StartByName(ctx, "sbn_gated", json.RawMessage(`1`), &workflow.StartByNameOpts{Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := worker.Wait(ctx, forced.ID); err != nil {
		t.Fatalf("the forced run: %v", err)
	}
	status, reasons := nodeStatuses(t, pool, forced.ID)
	if diff := cmp.Diff(map[string]string{"g": "skipped", "h": "completed"}, status); diff != "" {
		t.Errorf("statuses (-want +got):\n%s", diff)
	}
	if reasons["g"] != "condition false: input > 5" {
		t.Errorf("g's skip reason = %q", reasons["g"])
	}
}

// TestStartByNameTimeout starts runs by name from an engine that does not
// register the workflow: a run gets the deadline its caller gives, and no
// other, not even one that an earlier run of the workflow was given by its
// own caller.
func TestStartByNameTimeout(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ctx := ctxTimeout(t, 60*time.Second)
	w := workflow.Define("sbn_timed", func(t *workflow.Task, in int) (int, error) { return in, nil })
	worker := startEngine(t, pool, testConfig(w))
	dispatcher := newEngine(t, pool, testConfig())
	timeoutOf := func(id string) int {
		return count(t, pool, `SELECT coalesce(extract(epoch FROM timeout), 0)::int FROM braid_runs WHERE id = $1`, id)
	}
	once, err := w.Start(ctx, worker, 1, &workflow.StartOpts{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	given, err := dispatcher.StartByName(ctx, "sbn_timed", json.RawMessage(`2`), &workflow.StartByNameOpts{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if got := timeoutOf(given.ID); got != 60 {
		t.Errorf("a run started by name with a timeout of 1m has %ds", got)
	}
	plain, err := dispatcher.StartByName(ctx, "sbn_timed", json.RawMessage(`3`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := timeoutOf(plain.ID); got != 0 {
		t.Errorf("a run started by name without a timeout has one of %ds, an earlier run's caller's", got)
	}
	for _, id := range []string{once.ID, given.ID, plain.ID} {
		if _, err := worker.Wait(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDAGAsANodeOfAnotherDAG runs a DAG whose middle node is a DAG: the
// inner DAG's nodes are created when its node is released, and the outer
// DAG goes on with the inner's result; an inner node's failure fails the
// node, and so the outer DAG.
func TestDAGAsANodeOfAnotherDAG(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ctx := ctxTimeout(t, 60*time.Second)
	plus := workflow.Define("nest_plus", func(t *workflow.Task, in int) (int, error) { return in + 1, nil })
	var fixed atomic.Bool
	fail := workflow.Define("nest_fail", func(t *workflow.Task, in int) (int, error) {
		if in < 0 && !fixed.Load() {
			return 0, errors.New("negative input")
		}
		return in, nil
	}, workflow.WithMaxAttempts(1))
	xRef := workflow.Node("x", plus)
	yRef := workflow.Node("y", fail, workflow.After("x"))
	inner := workflow.DAG[int]("nest_inner", xRef, yRef)
	subRef := workflow.Node("sub", inner, workflow.After("pre"))
	post := workflow.Define("nest_post", func(t *workflow.Task, in int) (int, error) {
		res, err := subRef.Output(t)
		if err != nil {
			return 0, err
		}
		y, err := yRef.From(res)
		return y * 10, err
	})
	postRef := workflow.Node("post", post, workflow.After("sub"))
	outer := workflow.DAG[int]("nest_outer", workflow.Node("pre", plus), subRef, postRef)
	eng := startEngine(t, pool, testConfig(plus, fail, post, inner, outer))

	run, err := outer.Start(ctx, eng, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := run.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := postRef.From(res); err != nil || got != 10 {
		t.Errorf("post = %d, %v; want 10", got, err)
	}

	run, err = outer.Start(ctx, eng, -5, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = run.Result(ctx)
	if err == nil || !strings.Contains(err.Error(), `node "sub"`) || !strings.Contains(err.Error(), "negative input") {
		t.Fatalf("result error %v, want node sub's failure with the inner node's error", err)
	}
	status, _ := nodeStatuses(t, pool, run.ID)
	want := map[string]string{"pre": "completed", "sub": "failed", "post": "skipped", "x": "completed", "y": "failed"}
	if diff := cmp.Diff(want, status); diff != "" {
		t.Errorf("statuses (-want +got):\n%s", diff)
	}

	// Retry runs the failed inner node again, and the outer DAG on.
	fixed.Store(true)
	if err := eng.Retry(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	if res, err = run.Result(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := postRef.From(res); err != nil || got != -50 {
		t.Errorf("post after Retry = %d, %v; want -50", got, err)
	}
}

// TestDAGOverTheSizeLimits refuses a DAG of more than DAGMaxNodes nodes,
// or more than DAGMaxDependencies dependencies, naming the limit.
func TestDAGOverTheSizeLimits(t *testing.T) {
	t.Parallel()
	nodes := make([]workflow.DAGNode, workflow.DAGMaxNodes+1)
	for i := range nodes {
		nodes[i] = workflow.Node(fmt.Sprintf("n%d", i), extractWF)
	}
	badDAG(t, workflow.DAG[etlIn]("dag_too_many_nodes", nodes...),
		`"dag_too_many_nodes"`, fmt.Sprintf("%d nodes", workflow.DAGMaxNodes+1), fmt.Sprintf("limit of %d (DAGMaxNodes)", workflow.DAGMaxNodes))

	// Each node depends on every one before it.
	var deps []string
	nodes = nodes[:0]
	total := 0
	for i := 0; total <= workflow.DAGMaxDependencies; i++ {
		name := fmt.Sprintf("n%d", i)
		nodes = append(nodes, workflow.Node(name, extractWF, workflow.After(deps...)))
		total += len(deps)
		deps = append(deps, name)
	}
	badDAG(t, workflow.DAG[etlIn]("dag_too_many_deps", nodes...),
		`"dag_too_many_deps"`, fmt.Sprintf("%d dependencies", total), fmt.Sprintf("limit of %d (DAGMaxDependencies)", workflow.DAGMaxDependencies))

	// Each on-failure node waits for every regular node: 400 regular
	// nodes and 251 on-failure ones are 100,400 dependencies.
	nodes = nodes[:0]
	for i := range 400 {
		nodes = append(nodes, workflow.Node(fmt.Sprintf("r%d", i), extractWF))
	}
	for i := range 251 {
		nodes = append(nodes, workflow.Node(fmt.Sprintf("f%d", i), extractWF, workflow.IfDAGFails()))
	}
	badDAG(t, workflow.DAG[etlIn]("dag_too_many_handlers", nodes...),
		`"dag_too_many_handlers"`, "100400 dependencies", fmt.Sprintf("limit of %d (DAGMaxDependencies)", workflow.DAGMaxDependencies))
}

// TestDAGUnknownDependencyErrorIsBounded names an unknown dependency of a
// DAG of many nodes: the error lists a few of its nodes, and says how many
// it leaves out.
func TestDAGUnknownDependencyErrorIsBounded(t *testing.T) {
	t.Parallel()
	var nodes []workflow.DAGNode
	for i := range 50 {
		nodes = append(nodes, workflow.Node(fmt.Sprintf("node%02d", i), extractWF))
	}
	nodes = append(nodes, workflow.Node("load", loadWF, workflow.After("transfrom")))
	dag := workflow.DAG[etlIn]("dag_unknown_many", nodes...)
	badDAG(t, dag, `node "load" depends on "transfrom", which is not a node of the DAG (its nodes: node00, node01,`, "and 41 more)")
	pool := testutil.DB(t)
	_, err := workflow.NewEngine(pool, &workflow.Config{Workflows: []workflow.Definition{extractWF, loadWF, dag}})
	if err == nil || strings.Contains(err.Error(), "node20") {
		t.Errorf("error %v lists every node", err)
	}
}

// TestDAGDependencyNamedLikeTheSandbox refuses a condition over a
// dependency whose name the sandbox of conditions keeps for itself.
func TestDAGDependencyNamedLikeTheSandbox(t *testing.T) {
	t.Parallel()
	dag := workflow.DAG[etlIn]("dag_budget_dep",
		workflow.Node(" budget", extractWF),
		workflow.Node("load", loadWF, workflow.After(" budget"), workflow.When(`status[" budget"] == "completed"`)))
	badDAG(t, dag, `"dag_budget_dep"`, `"load"`, `dependency " budget" takes a name the condition reserves for itself`)
}

// TestNodeSharedByTwoDAGsNamesItsOwnDAG declares one node in two DAGs:
// its condition's evaluation error in a run of the first names the first.
func TestNodeSharedByTwoDAGsNamesItsOwnDAG(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ex := workflow.Node("extract", extractWF)
	load := workflow.Node("load", loadWF, workflow.After("extract"), workflow.When(`extract.missing.x == 1`))
	first := workflow.DAG[etlIn]("dag_shared_first", ex, load)
	second := workflow.DAG[etlIn]("dag_shared_second", ex, load)
	eng := startEngine(t, pool, testConfig(extractWF, loadWF, first, second))
	ctx := ctxTimeout(t, 30*time.Second)
	run, err := first.Start(ctx, eng, etlIn{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = run.Result(ctx)
	if err == nil || !strings.Contains(err.Error(), `DAG "dag_shared_first" node "load": condition`) || strings.Contains(err.Error(), "dag_shared_second") {
		t.Errorf("result error %v, want the condition's error naming dag_shared_first", err)
	}
}
