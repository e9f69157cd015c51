package workflow_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// engineMetrics collects the engine's metrics from reader: each counter's
// total and each histogram's data points, by name and result attribute.
type engineMetrics struct {
	counters   map[string]int64
	histograms map[string]metricdata.HistogramDataPoint[float64]
	sizes      map[string]metricdata.HistogramDataPoint[int64]
}

func collectEngineMetrics(t *testing.T, reader *sdkmetric.ManualReader) engineMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	m := engineMetrics{counters: map[string]int64{}, histograms: map[string]metricdata.HistogramDataPoint[float64]{}, sizes: map[string]metricdata.HistogramDataPoint[int64]{}}
	key := func(name string, set attribute.Set) string {
		if v, ok := set.Value("result"); ok {
			return name + "{" + v.AsString() + "}"
		}
		return name
	}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != "github.com/braidflow/braid/workflow" {
			continue
		}
		for _, x := range sm.Metrics {
			switch d := x.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					m.counters[x.Name] += p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					m.histograms[key(x.Name, p.Attributes)] = p
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					m.sizes[key(x.Name, p.Attributes)] = p
				}
			}
		}
	}
	return m
}

// The engine counts turns, failures and runs, times steps, and records
// every batch of turn outcomes: its size and its duration, with buckets
// made for seconds.
func TestEngineMetrics(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })

	square := workflow.Define("metrics_square", func(t *workflow.Task, n int) (int, error) {
		return workflow.Step(t, "square", func(ctx context.Context) (int, error) { return n * n, nil })
	})
	sum := workflow.Define("metrics_sum", func(t *workflow.Task, items []int) (int, error) {
		out, err := workflow.Map(t, "square", square, items)
		total := 0
		for _, v := range out {
			total += v
		}
		return total, err
	})
	fail := workflow.Define("metrics_fail", func(t *workflow.Task, _ struct{}) (struct{}, error) {
		return struct{}{}, errors.New("refused")
	}, workflow.WithMaxAttempts(1))
	cfg := testConfig(sum, square, fail)
	cfg.MeterProvider = mp
	eng := startEngine(t, pool, cfg)
	ctx := ctxTimeout(t, time.Minute)

	run, err := sum.Start(ctx, eng, []int{1, 2, 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := run.Result(ctx); err != nil || got != 14 {
		t.Fatalf("sum: %d, %v; want 14", got, err)
	}
	failing, err := fail.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := failing.Result(ctx); err == nil {
		t.Fatal("the failing run completed")
	}
	// Stop records every batch: a batch's metrics follow its commit, and
	// so may follow the run's result.
	if err := eng.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	m := collectEngineMetrics(t, reader)
	// The parent's two turns (fan-out, continuation), three children's,
	// and the failing run's one.
	const turns = 6
	wantCounters := map[string]int64{
		workflow.MetricTurns:         turns,
		workflow.MetricTurnFailures:  1,
		workflow.MetricRunsStarted:   2,
		workflow.MetricRunsCompleted: 1,
		workflow.MetricRunsFailed:    1,
	}
	if diff := cmp.Diff(wantCounters, m.counters); diff != "" {
		t.Errorf("counters (-want +got):\n%s", diff)
	}
	steps := m.histograms[workflow.MetricStepDuration]
	if steps.Count != 3 {
		t.Errorf("%d step durations, want 3", steps.Count)
	}
	wantBounds := []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	if diff := cmp.Diff(wantBounds, steps.Bounds); diff != "" {
		t.Errorf("step duration buckets (-want +got):\n%s", diff)
	}
	// Every turn handed in one outcome, and every batch committed.
	committed := m.sizes[workflow.MetricBatchSize+"{committed}"]
	if committed.Sum != turns || committed.Count == 0 || committed.Count > turns {
		t.Errorf("committed batches: %d of %d outcomes in all; want %d outcomes in 1 to %d batches", committed.Count, committed.Sum, turns, turns)
	}
	if failed, ok := m.sizes[workflow.MetricBatchSize+"{failed}"]; ok {
		t.Errorf("%d batches failed, want none", failed.Count)
	}
	durations := m.histograms[workflow.MetricBatchDuration+"{committed}"]
	if durations.Count != committed.Count || durations.Sum <= 0 {
		t.Errorf("%d batch durations summing to %gs, want %d with a positive sum", durations.Count, durations.Sum, committed.Count)
	}
	if diff := cmp.Diff(wantBounds, durations.Bounds); diff != "" {
		t.Errorf("batch duration buckets (-want +got):\n%s", diff)
	}
}
