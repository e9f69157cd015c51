package workflow_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// Node workflows of the definition tests. They are never run.
type etlIn struct {
	Source string `json:"source"`
}

type rows struct {
	Rows int `json:"rows"`
}

var (
	extractWF   = workflow.Define("dag_extract", func(t *workflow.Task, in etlIn) (rows, error) { return rows{Rows: 3}, nil })
	transformWF = workflow.Define("dag_transform", func(t *workflow.Task, in etlIn) (rows, error) { return rows{Rows: 2}, nil })
	loadWF      = workflow.Define("dag_load", func(t *workflow.Task, in etlIn) (string, error) { return "loaded", nil })
)

// badDAG registers dag with the node workflows on a fresh engine and
// returns NewEngine's error, which must be a *DefinitionError or a
// condition's error, and mention every part of want.
func badDAG(t *testing.T, dag workflow.Definition, want ...string) {
	t.Helper()
	pool := testutil.DB(t)
	_, err := workflow.NewEngine(pool, &workflow.Config{Workflows: []workflow.Definition{extractWF, transformWF, loadWF, dag}})
	if err == nil {
		t.Fatal("NewEngine accepted the DAG")
	}
	var de *workflow.DefinitionError
	var ce *workflow.ConditionError
	if !errors.As(err, &de) && !errors.As(err, &ce) {
		t.Errorf("error %T %q is neither a *DefinitionError nor a *ConditionError", err, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %q", err, w)
		}
	}
}

func TestDAGWithACycleNamesItsNodes(t *testing.T) {
	t.Parallel()
	dag := workflow.DAG[etlIn]("dag_cycle",
		workflow.Node("extract", extractWF),
		workflow.Node("transform", transformWF, workflow.After("extract", "load")),
		workflow.Node("check", transformWF, workflow.After("transform")),
		workflow.Node("load", loadWF, workflow.After("check")),
	)
	badDAG(t, dag, `"dag_cycle"`, "cycle: transform → check → load → transform")
}

func TestDAGWithASelfDependency(t *testing.T) {
	t.Parallel()
	dag := workflow.DAG[etlIn]("dag_self", workflow.Node("extract", extractWF, workflow.After("extract")))
	badDAG(t, dag, `node "extract" depends on itself`)
}

func TestDAGWithAnUnknownDependency(t *testing.T) {
	t.Parallel()
	dag := workflow.DAG[etlIn]("dag_unknown",
		workflow.Node("extract", extractWF),
		workflow.Node("load", loadWF, workflow.After("transfrom")),
	)
	badDAG(t, dag, `node "load" depends on "transfrom", which is not a node of the DAG (its nodes: extract, load)`)
}

func TestDAGWithADuplicateNodeName(t *testing.T) {
	t.Parallel()
	dag := workflow.DAG[etlIn]("dag_dup",
		workflow.Node("extract", extractWF),
		workflow.Node("extract", transformWF),
	)
	badDAG(t, dag, `node "extract" is declared twice`)
}

func TestEmptyDAG(t *testing.T) {
	t.Parallel()
	badDAG(t, workflow.DAG[etlIn]("dag_empty"), `"dag_empty"`, "the DAG has no nodes")
}

func TestDAGConditionThatDoesNotCompile(t *testing.T) {
	t.Parallel()
	dag := workflow.DAG[etlIn]("dag_syntax",
		workflow.Node("transform", transformWF),
		workflow.Node("load", loadWF, workflow.After("transform"), workflow.When(`transform.rows >`)),
	)
	badDAG(t, dag, `"dag_syntax"`, `"load"`, `transform.rows >`, "1:")
}

func TestDAGConditionThatIsNotBoolean(t *testing.T) {
	t.Parallel()
	dag := workflow.DAG[etlIn]("dag_not_bool",
		workflow.Node("transform", transformWF),
		workflow.Node("load", loadWF, workflow.After("transform"), workflow.When(`transform.rows + 1`)),
	)
	badDAG(t, dag, `"dag_not_bool"`, `"load"`, `transform.rows + 1`)
}

func TestDAGConditionOnANodeItDoesNotDependOn(t *testing.T) {
	t.Parallel()
	dag := workflow.DAG[etlIn]("dag_not_dep",
		workflow.Node("extract", extractWF),
		workflow.Node("transform", transformWF),
		workflow.Node("load", loadWF, workflow.After("transform"), workflow.When(`extract.rows > 0`)),
	)
	badDAG(t, dag, `"load"`, `extract.rows > 0`, "extract")
}

func TestDAGNodeWorkflowNotRegistered(t *testing.T) {
	t.Parallel()
	stray := workflow.Define("dag_stray", func(t *workflow.Task, in etlIn) (int, error) { return 0, nil })
	dag := workflow.DAG[etlIn]("dag_unregistered",
		workflow.Node("extract", extractWF),
		workflow.Node("stray", stray, workflow.After("extract")),
	)
	badDAG(t, dag, `"dag_unregistered"`, `node "stray" runs workflow "dag_stray", which is not registered with this engine`)
}

func TestDAGOnFailureNodeTakesNoDependencies(t *testing.T) {
	t.Parallel()
	dag := workflow.DAG[etlIn]("dag_on_failure",
		workflow.Node("extract", extractWF),
		workflow.Node("alert", loadWF, workflow.IfDAGFails(), workflow.After("extract")),
	)
	badDAG(t, dag, `node "alert" runs if the DAG fails, so it takes neither After nor When`)
}

func TestDAGWithOnlyOnFailureNodes(t *testing.T) {
	t.Parallel()
	dag := workflow.DAG[etlIn]("dag_only_on_failure",
		workflow.Node("alert", loadWF, workflow.IfDAGFails()),
	)
	badDAG(t, dag, "every node runs only if the DAG fails, so none would ever run")
}

func TestDAGNodeWithANilWorkflowOrBadName(t *testing.T) {
	t.Parallel()
	badDAG(t, workflow.DAG[etlIn]("dag_nil", workflow.Node[etlIn, rows]("extract", nil)), `node "extract" has a nil workflow`)
	badDAG(t, workflow.DAG[etlIn]("dag_noname", workflow.Node("", extractWF)), "node 0: node name is empty")
}
