package workflow_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// A worker runs, after the turn River fetched, the turns that its outcome
// claimed for it, in the same slot. Each is an attempt of its own, and
// the queue's duration histogram times each alone: the fetched turn's
// attempt ends with its own turn, not with the last turn the worker ran
// after it. Here only the child's turn is slow (it waits for the test),
// so only one attempt is slow.
func TestContinuationsAreNotTimedAsPartOfTheFetchedTurn(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })

	started, release := make(chan struct{}), make(chan struct{})
	slow := workflow.Define("timed_slow_child", func(t *workflow.Task, _ struct{}) (int, error) {
		return workflow.Step(t, "wait", func(ctx context.Context) (int, error) {
			close(started)
			<-release
			return 1, nil
		})
	})
	parent := workflow.Define("timed_parent", func(t *workflow.Task, _ struct{}) (int, error) {
		return workflow.Go(t, "kid", slow, struct{}{}).Get()
	})
	cfg := testConfig(parent, slow)
	cfg.MeterProvider = mp
	eng := startEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := parent.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	// The child's turn runs in the slot of the parent's first turn, as a
	// continuation; it waits well over the 2.5 s bucket boundary.
	time.Sleep(3 * time.Second)
	close(release)
	if got, err := run.Result(ctx); err != nil || got != 1 {
		t.Fatalf("run: %d, %v", got, err)
	}
	if err := eng.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	var attempts, slowAttempts uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != queue.MetricDuration {
				continue
			}
			for _, p := range m.Data.(metricdata.Histogram[float64]).DataPoints {
				if k, _ := p.Attributes.Value("job.kind"); k.AsString() != workflow.TaskKind {
					continue
				}
				attempts += p.Count
				for i, b := range p.Bounds {
					if b >= 2.5 {
						// Bucket i holds (Bounds[i-1], Bounds[i]]: those
						// from 2.5 s up start at bucket i+1.
						for _, c := range p.BucketCounts[i+1:] {
							slowAttempts += c
						}
						break
					}
				}
			}
		}
	}
	// The parent's two turns and the child's.
	if attempts != 3 {
		t.Fatalf("%d turn attempts timed, want 3", attempts)
	}
	if slowAttempts != 1 {
		t.Errorf("%d turn attempts took over 2.5 s, want 1: the child's, which waited 3 s", slowAttempts)
	}
}
