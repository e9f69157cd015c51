package workflow_test

import (
	"context"
	"errors"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// A DAG run counts as one run started, whatever the number of nodes that
// start with it: two roots and a node after them are one run.
func TestDAGRunCountsAsOneRunStarted(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })

	leaf := workflow.Define("dag_metrics_leaf", func(t *workflow.Task, _ struct{}) (string, error) {
		return t.Key(), nil
	})
	dag := workflow.DAG[struct{}]("dag_metrics_two_roots",
		workflow.Node("a", leaf),
		workflow.Node("b", leaf),
		workflow.Node("c", leaf, workflow.After("a", "b")),
	)
	cfg := testConfig(dag, leaf)
	cfg.MeterProvider = mp
	eng := startEngine(t, pool, cfg)
	ctx := ctxTimeout(t, time.Minute)

	run, err := dag.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Result(ctx); err != nil {
		t.Fatal(err)
	}
	if err := eng.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	m := collectEngineMetrics(t, reader)
	if got := m.counters[workflow.MetricRunsStarted]; got != 1 {
		t.Errorf("%s counted %d runs for one DAG run, want 1", workflow.MetricRunsStarted, got)
	}
	if got := m.counters[workflow.MetricRunsCompleted]; got != 1 {
		t.Errorf("%s counted %d runs, want 1", workflow.MetricRunsCompleted, got)
	}
}

// A node that a failed DAG skips (FailDAG, the default policy) is a
// skipped node, counted as one: the metric counts skips by "a false
// condition, skipped dependencies, or a failed DAG".
func TestNodesSkippedByAFailedDAGAreCounted(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })

	boom := workflow.Define("dag_metrics_boom", func(t *workflow.Task, _ struct{}) (string, error) {
		return "", errors.New("boom")
	}, workflow.WithMaxAttempts(1))
	leaf := workflow.Define("dag_metrics_after", func(t *workflow.Task, _ struct{}) (string, error) {
		return t.Key(), nil
	})
	dag := workflow.DAG[struct{}]("dag_metrics_fails",
		workflow.Node("a", boom),
		workflow.Node("b", leaf, workflow.After("a")),
		workflow.Node("c", leaf, workflow.After("b")),
	)
	cfg := testConfig(dag, boom, leaf)
	cfg.MeterProvider = mp
	eng := startEngine(t, pool, cfg)
	ctx := ctxTimeout(t, time.Minute)

	run, err := dag.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Result(ctx); err == nil {
		t.Fatal("the DAG whose first node fails completed")
	}
	if err := eng.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_tasks WHERE run_id = $1 AND status = 'skipped'`, run.ID); n != 2 {
		t.Fatalf("%d nodes skipped, want 2 (b and c)", n)
	}
	m := collectEngineMetrics(t, reader)
	if got := m.counters[workflow.MetricNodesSkipped]; got != 2 {
		t.Errorf("%s counted %d nodes, want 2", workflow.MetricNodesSkipped, got)
	}
}
