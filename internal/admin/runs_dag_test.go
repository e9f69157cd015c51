package admin

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/workflow"
)

// TestDAGsLayers lays out the DAGs of runs as Inspect lists their tasks: a
// diamond with an on-failure node, a DAG started as a child task by a node
// of another DAG, and a run without a DAG.
func TestDAGsLayers(t *testing.T) {
	t.Parallel()
	node := func(id, parent, key string, deps ...string) workflow.TaskInfo {
		return workflow.TaskInfo{ID: id, ParentID: parent, Key: key, Workflow: "w_" + key, Node: true, DependsOn: deps}
	}
	tasks := []workflow.TaskInfo{
		{ID: "r", Key: "root", Workflow: "outer"},
		node("a", "r", "a"),
		node("b", "r", "b", "a"),
		node("c", "r", "c", "a"),
		node("inner", "r", "inner", "a"),
		node("d", "r", "d", "b", "c"),
		node("alert", "r", "alert", "a", "b", "c", "d", "inner"),
		{ID: "kid", ParentID: "inner", Key: "pipeline", Workflow: "inner_dag"},
		node("x", "kid", "x"),
		node("y", "kid", "y"),
		node("z", "kid", "z", "x"),
	}
	want := []RunDAG{
		{TaskID: "r", TaskKey: "root", Workflow: "outer", Layers: [][]string{{"a"}, {"b", "c", "inner"}, {"d"}, {"alert"}}},
		{TaskID: "kid", TaskKey: "pipeline", Workflow: "inner_dag", Layers: [][]string{{"x", "y"}, {"z"}}},
	}
	if diff := cmp.Diff(want, DAGs(tasks)); diff != "" {
		t.Errorf("DAGs (-want +got):\n%s", diff)
	}
	if got := DAGs([]workflow.TaskInfo{{ID: "r", Key: "root"}, {ID: "k", ParentID: "r", Key: "kid"}}); got == nil || len(got) != 0 {
		t.Errorf("DAGs of a run without one = %#v; want an empty list", got)
	}
}

// TestRunDetailDAG runs a DAG on a real engine, in which a false condition
// skips a node and a failing node fails the DAG, and reads the run's
// detail: the DAG's layers, and each node's status, dependencies and skip
// reason.
func TestRunDetailDAG(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	type article struct {
		Lang string `json:"lang"`
	}
	def := func(name string) *workflow.Workflow[article, string] {
		return workflow.Define(name, func(t *workflow.Task, in article) (string, error) { return name, nil })
	}
	fetch, summarize, cleanup, plain := def("dag_fetch"), def("dag_summarize"), def("dag_cleanup"), def("dag_plain")
	index := workflow.Define("dag_index", func(t *workflow.Task, in article) (string, error) {
		return "", errors.New("search index unavailable")
	}, workflow.WithMaxAttempts(1))
	dag := workflow.DAG[article]("dag_publish",
		workflow.Node("fetch", fetch),
		workflow.Node("summary", summarize, workflow.After("fetch"), workflow.When(`input.lang == "en"`)),
		workflow.Node("index", index, workflow.After("fetch")),
		workflow.Node("cleanup", cleanup, workflow.IfDAGFails()),
	)
	quiet := slog.New(slog.DiscardHandler)
	eng, err := workflow.NewEngine(f.pool, &workflow.Config{
		Workflows: []workflow.Definition{dag, fetch, summarize, index, cleanup, plain},
		Queue:     &queue.Config{Logger: quiet},
		Logger:    quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Stop(context.Background()) })
	run, err := dag.Start(ctx, eng, article{Lang: "de"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Result(ctx); err == nil || !strings.Contains(err.Error(), `node "index"`) {
		t.Fatalf("the DAG ended with %v; want it failed naming node index", err)
	}

	var d RunDetail
	f.call("GET", "/api/runs/"+run.ID, nil, 200, &d)
	root := d.Tasks[0]
	want := []RunDAG{{TaskID: root.ID, TaskKey: "root", Workflow: "dag_publish", Layers: [][]string{{"fetch"}, {"summary", "index"}, {"cleanup"}}}}
	if diff := cmp.Diff(want, d.DAGs); diff != "" {
		t.Errorf("dags (-want +got):\n%s", diff)
	}
	type node struct {
		Key, Status, SkipReason string
		DependsOn               []string
	}
	var got []node
	for _, task := range d.Tasks {
		if task.Node {
			got = append(got, node{task.Key, task.Status, task.SkipReason, task.DependsOn})
		}
	}
	wantNodes := []node{
		{"fetch", "completed", "", nil},
		{"summary", "skipped", `condition false: input.lang == "en"`, []string{"fetch"}},
		{"index", "failed", "", []string{"fetch"}},
		{"cleanup", "completed", "", []string{"fetch", "index", "summary"}},
	}
	if diff := cmp.Diff(wantNodes, got); diff != "" {
		t.Errorf("nodes (-want +got):\n%s", diff)
	}

	// A run without a DAG has an empty list of them.
	prun, err := plain.Start(ctx, eng, article{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := prun.Result(ctx); err != nil {
		t.Fatal(err)
	}
	_, raw := f.do("GET", "/api/runs/"+prun.ID, adminSecret, nil)
	var plainDetail map[string]json.RawMessage
	if err := json.Unmarshal(raw, &plainDetail); err != nil || string(plainDetail["dags"]) != "[]" {
		t.Errorf("the detail of a run without a DAG has dags %s; want []", plainDetail["dags"])
	}
}
