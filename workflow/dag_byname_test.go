package workflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// gate holds the turns of a test's nodes: a held turn reports its key on
// started, then runs on once the test opens the key, or ends with its
// context. A key that fails makes the turn fail once opened.
type gate struct {
	started chan string
	mu      sync.Mutex
	keys    map[string]chan struct{}
	fails   map[string]bool
}

func newGate() *gate {
	return &gate{started: make(chan string, 64), keys: map[string]chan struct{}{}, fails: map[string]bool{}}
}

func (g *gate) ch(key string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := g.keys[key]
	if c == nil {
		c = make(chan struct{})
		g.keys[key] = c
	}
	return c
}

func (g *gate) hold(ctx context.Context, key string) error {
	c := g.ch(key)
	g.started <- key
	select {
	case <-c:
	case <-ctx.Done():
		return ctx.Err()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fails[key] {
		return errors.New("the store is down")
	}
	return nil
}

// open lets the turns held on key run on, and those that come later pass.
func (g *gate) open(key string) { close(g.ch(key)) }

// shut makes the turns that come on key wait again, failing or not.
func (g *gate) shut(key string, fail bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.keys[key] = make(chan struct{})
	g.fails[key] = fail
}

// await waits until a turn is held on each of keys.
func (g *gate) await(ctx context.Context, t *testing.T, keys ...string) {
	t.Helper()
	want := map[string]bool{}
	for _, k := range keys {
		want[k] = true
	}
	for len(want) > 0 {
		select {
		case k := <-g.started:
			delete(want, k)
		case <-ctx.Done():
			t.Fatalf("no turn was held on %v", want)
		}
	}
}

type heldIn struct {
	Key string `json:"key"`
}

// dagStarts is a DAG, hold → after, whose hold node the test holds, run
// by a worker engine that registers it, and the two ways to start it: by
// its definition in that engine, and by name from an engine that
// registers nothing (as the admin server and the braid CLI do).
type dagStarts struct {
	pool       *pgxpool.Pool
	worker     *workflow.Engine
	dispatcher *workflow.Engine
	dag        *workflow.Workflow[heldIn, workflow.DAGResult]
	gate       *gate
}

func newDAGStarts(t *testing.T) *dagStarts {
	pool := testutil.DB(t)
	g := newGate()
	hold := workflow.Define("dsn_hold", func(t *workflow.Task, in heldIn) (string, error) {
		return workflow.Step(t, "hold", func(ctx context.Context) (string, error) {
			return "held", g.hold(ctx, in.Key)
		})
	}, workflow.WithMaxAttempts(1))
	holdRef := workflow.Node("hold", hold)
	after := workflow.Define("dsn_after", func(t *workflow.Task, in heldIn) (string, error) {
		held, err := holdRef.Output(t)
		return held + ", then after", err
	})
	dag := workflow.DAG[heldIn]("dsn_dag", holdRef, workflow.Node("after", after, workflow.After("hold")))
	return &dagStarts{
		pool:       pool,
		worker:     startEngine(t, pool, testConfig(hold, after, dag)),
		dispatcher: newEngine(t, pool, testConfig()),
		dag:        dag,
		gate:       g,
	}
}

// start starts a run on key, byName or by the definition, with key as its
// idempotency key. The database must hold a run of the DAG before the
// first start by name.
func (s *dagStarts) start(ctx context.Context, t *testing.T, key string, byName bool) string {
	t.Helper()
	if !byName {
		run, err := s.dag.Start(ctx, s.worker, heldIn{Key: key}, &workflow.StartOpts{IdempotencyKey: key})
		if err != nil {
			t.Fatal(err)
		}
		return run.ID
	}
	in, err := json.Marshal(heldIn{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	run, err := s.dispatcher.StartByName(ctx, "dsn_dag", in, &workflow.StartByNameOpts{IdempotencyKey: key})
	if err != nil {
		t.Fatal(err)
	}
	return run.ID
}

// dagRunState is what a DAG run shows: its status and its root task's as
// stored, and as the inspection shows them to the engine, the CLI and the
// admin API.
type dagRunState struct {
	Run, Root     string // braid_runs.status, and the root's braid_tasks.status
	RootRemaining int
	Shown         string            // Engine.Run
	ShownRoot     string            // the root task, as Engine.Run shows it
	Nodes         map[string]string // the nodes, as Engine.Run shows them
	Inspected     string            // InspectRun
	Listed        string            // ListRuns
}

func (s *dagStarts) state(ctx context.Context, t *testing.T, runID, key string) dagRunState {
	t.Helper()
	var st dagRunState
	if err := s.pool.QueryRow(ctx, `
		SELECT r.status, t.status, t.remaining FROM braid_runs r JOIN braid_tasks t ON t.run_id = r.id AND t.parent_task_id IS NULL
		 WHERE r.id = $1`, runID).Scan(&st.Run, &st.Root, &st.RootRemaining); err != nil {
		t.Fatal(err)
	}
	info, err := s.worker.Run(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	st.Shown, st.Nodes = info.Status, map[string]string{}
	for _, task := range info.Tasks {
		switch {
		case task.ParentID == "":
			st.ShownRoot = task.Status
		case task.Node:
			st.Nodes[task.Key] = task.Status
		}
	}
	inspected, err := workflow.InspectRun(ctx, s.pool, runID)
	if err != nil {
		t.Fatal(err)
	}
	st.Inspected = inspected.Status
	listed, err := workflow.ListRuns(ctx, s.pool, workflow.RunFilter{IdempotencyKey: key})
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || listed[0].ID != runID {
		t.Fatalf("ListRuns by key %q = %v; want run %s", key, listed, runID)
	}
	st.Listed = listed[0].Status
	return st
}

// TestDAGRunShowsTheSameHoweverStarted starts one DAG twice, once by its
// definition and once by name from an engine that does not register it,
// and holds both runs' first node: the runs, their root tasks and their
// nodes show the same statuses, stored and inspected, the runs waiting on
// their nodes as a run whose root waits on its children does. Released,
// both complete with the same result.
func TestDAGRunShowsTheSameHoweverStarted(t *testing.T) {
	t.Parallel()
	s := newDAGStarts(t)
	ctx := ctxTimeout(t, 60*time.Second)
	defined := s.start(ctx, t, "defined", false)
	named := s.start(ctx, t, "named", true)
	s.gate.await(ctx, t, "defined", "named")

	want := dagRunState{
		Run: "waiting", Root: "waiting", RootRemaining: 2,
		Shown: "waiting", ShownRoot: "waiting", Nodes: map[string]string{"hold": "running", "after": "blocked"},
		Inspected: "waiting", Listed: "waiting",
	}
	byDefinition, byName := s.state(ctx, t, defined, "defined"), s.state(ctx, t, named, "named")
	if diff := cmp.Diff(byDefinition, byName); diff != "" {
		t.Errorf("the held run started by name shows otherwise than the one started by its definition (-definition +name):\n%s", diff)
	}
	if diff := cmp.Diff(want, byDefinition); diff != "" {
		t.Errorf("the held run started by its definition (-want +got):\n%s", diff)
	}

	s.gate.open("defined")
	s.gate.open("named")
	for _, id := range []string{defined, named} {
		raw, err := s.worker.Wait(ctx, id)
		if err != nil {
			t.Fatalf("run %s: %v", id, err)
		}
		var res workflow.DAGResult
		if err := json.Unmarshal(raw, &res); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(workflow.DAGResult{"after": json.RawMessage(`"held, then after"`)}, res); diff != "" {
			t.Errorf("run %s's result (-want +got):\n%s", id, diff)
		}
	}
	want = dagRunState{
		Run: "completed", Root: "completed",
		Shown: "completed", ShownRoot: "completed", Nodes: map[string]string{"hold": "completed", "after": "completed"},
		Inspected: "completed", Listed: "completed",
	}
	for key, id := range map[string]string{"defined": defined, "named": named} {
		if diff := cmp.Diff(want, s.state(ctx, t, id, key)); diff != "" {
			t.Errorf("the completed run %s (-want +got):\n%s", key, diff)
		}
	}
}

// TestDAGStartedByNameFailsAndIsRetried fails the held node of a DAG run
// started by name under FailDAG, as it fails that of a run started by the
// definition: both runs fail naming the node, the dependent skipped. Retry
// runs the node again, and the runs show the same while it is held (waiting,
// as a started run does), and complete.
func TestDAGStartedByNameFailsAndIsRetried(t *testing.T) {
	t.Parallel()
	s := newDAGStarts(t)
	ctx := ctxTimeout(t, 60*time.Second)
	runs := map[string]string{}
	for _, key := range []string{"defined", "named"} {
		s.gate.shut(key, true)
		runs[key] = s.start(ctx, t, key, key == "named")
	}
	s.gate.await(ctx, t, "defined", "named")
	s.gate.open("defined")
	s.gate.open("named")
	want := dagRunState{
		Run: "failed", Root: "failed",
		Shown: "failed", ShownRoot: "failed", Nodes: map[string]string{"hold": "failed", "after": "skipped"},
		Inspected: "failed", Listed: "failed",
	}
	for key, id := range runs {
		_, err := s.worker.Wait(ctx, id)
		var re *workflow.RunError
		if !errors.As(err, &re) || re.Status != "failed" || !strings.Contains(re.Message, `node "hold"`) || !strings.Contains(re.Message, "the store is down") {
			t.Fatalf("run %s: %v; want it failed naming node hold and its error", key, err)
		}
		if diff := cmp.Diff(want, s.state(ctx, t, id, key)); diff != "" {
			t.Errorf("the failed run %s (-want +got):\n%s", key, diff)
		}
		if _, reasons := nodeStatuses(t, s.pool, id); reasons["after"] != `the DAG failed: node "hold" failed` {
			t.Errorf("run %s: after's skip reason = %q", key, reasons["after"])
		}
	}

	for key, id := range runs {
		s.gate.shut(key, false)
		if err := s.worker.Retry(ctx, id); err != nil {
			t.Fatalf("Retry of run %s: %v", key, err)
		}
	}
	s.gate.await(ctx, t, "defined", "named")
	// Retry sets the run's status itself, whichever way the run started:
	// the two must agree.
	byDefinition, byName := s.state(ctx, t, runs["defined"], "defined"), s.state(ctx, t, runs["named"], "named")
	if diff := cmp.Diff(byDefinition, byName); diff != "" {
		t.Errorf("the retried run started by name shows otherwise than the one started by its definition (-definition +name):\n%s", diff)
	}
	// Resumed, the run shows as a started one does: waiting, as its root
	// is, while its nodes run.
	want = dagRunState{
		Run: "waiting", Root: "waiting", RootRemaining: 2,
		Shown: "waiting", ShownRoot: "waiting", Nodes: map[string]string{"hold": "running", "after": "blocked"},
		Inspected: "waiting", Listed: "waiting",
	}
	if diff := cmp.Diff(want, byName); diff != "" {
		t.Errorf("the retried run started by name, its node held (-want +got):\n%s", diff)
	}
	s.gate.open("defined")
	s.gate.open("named")
	for key, id := range runs {
		raw, err := s.worker.Wait(ctx, id)
		if err != nil {
			t.Fatalf("run %s after Retry: %v", key, err)
		}
		var res workflow.DAGResult
		if err := json.Unmarshal(raw, &res); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(workflow.DAGResult{"after": json.RawMessage(`"held, then after"`)}, res); diff != "" {
			t.Errorf("run %s's result after Retry (-want +got):\n%s", key, diff)
		}
		if status, _ := nodeStatuses(t, s.pool, id); !cmp.Equal(map[string]string{"hold": "completed", "after": "completed"}, status) {
			t.Errorf("run %s's nodes after Retry: %v", key, status)
		}
	}
}

// TestDAGStartedByNameIsCancelled cancels DAG runs while their first node
// is held, one started by the definition and one by name: both end
// cancelled, every node with them, and the dependent never runs.
func TestDAGStartedByNameIsCancelled(t *testing.T) {
	t.Parallel()
	s := newDAGStarts(t)
	ctx := ctxTimeout(t, 60*time.Second)
	runs := map[string]string{}
	for _, key := range []string{"defined", "named"} {
		runs[key] = s.start(ctx, t, key, key == "named")
	}
	s.gate.await(ctx, t, "defined", "named")
	want := dagRunState{
		Run: "cancelled", Root: "cancelled",
		Shown: "cancelled", ShownRoot: "cancelled", Nodes: map[string]string{"hold": "cancelled", "after": "cancelled"},
		Inspected: "cancelled", Listed: "cancelled",
	}
	for key, id := range runs {
		if err := s.worker.Cancel(ctx, id); err != nil {
			t.Fatalf("Cancel of run %s: %v", key, err)
		}
		if _, err := s.worker.Wait(ctx, id); !errors.Is(err, workflow.ErrCancelled) {
			t.Fatalf("run %s: %v; want it cancelled", key, err)
		}
		if diff := cmp.Diff(want, s.state(ctx, t, id, key)); diff != "" {
			t.Errorf("the cancelled run %s (-want +got):\n%s", key, diff)
		}
	}
}
