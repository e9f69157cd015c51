package queue

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/braidflow/braid/internal/testdb"
)

// points flattens the collected metrics into name{attrs} → value; a
// histogram contributes its count.
func points(t *testing.T, reader *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	key := func(name string, set attribute.Set) string {
		return name + "{" + set.Encoded(attribute.DefaultEncoder()) + "}"
	}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != "github.com/braidflow/braid/queue" {
			continue // the lease manager's own metrics
		}
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[key(m.Name, p.Attributes)] = p.Value
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out[key(m.Name, p.Attributes)] = p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[key(m.Name, p.Attributes)] = int64(p.Count)
				}
			}
		}
	}
	return out
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	workers := river.NewWorkers()
	river.AddWorker(workers, &flakyWorker{})
	w := &poisonWorker{}
	river.AddWorker(workers, w)
	q := startQueue(t, testdb.DB(t), &Config{Workers: workers, MeterProvider: mp})

	flaky, err := q.Insert(ctx, flakyArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	poison, err := q.Insert(ctx, poisonArgs{}, &InsertOpts{InsertOpts: river.InsertOpts{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Insert(ctx, flakyArgs{}, &InsertOpts{InsertOpts: river.InsertOpts{Queue: "parked"}}); err != nil {
		t.Fatal(err)
	}
	waitState(t, q, flaky.Job.ID, rivertype.JobStateCompleted)
	waitState(t, q, poison.Job.ID, rivertype.JobStateDiscarded)

	got := points(t, reader)
	want := map[string]int64{
		"braid.queue.job.attempts{job.kind=flaky,queue=default}":                   2,
		"braid.queue.job.attempts{job.kind=poison,queue=default}":                  1,
		"braid.queue.job.failures{error.type=error,job.kind=flaky,queue=default}":  1,
		"braid.queue.job.failures{error.type=panic,job.kind=poison,queue=default}": 1,
		"braid.queue.job.duration{job.kind=flaky,outcome=completed,queue=default}": 1,
		"braid.queue.job.duration{job.kind=flaky,outcome=failed,queue=default}":    1,
		"braid.queue.job.duration{job.kind=poison,outcome=panicked,queue=default}": 1,
		"braid.queue.depth{queue=parked,state=available}":                          1,
		"braid.queue.depth{queue=parked,state=pending}":                            0,
		"braid.queue.depth{queue=parked,state=retryable}":                          0,
		"braid.queue.depth{queue=parked,state=running}":                            0,
		"braid.queue.depth{queue=parked,state=scheduled}":                          0,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}

	// The duration's buckets are made for seconds, not the SDK's default
	// milliseconds.
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	var bounds []float64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == MetricDuration && len(h.DataPoints) > 0 {
				bounds = h.DataPoints[0].Bounds
			}
		}
	}
	wantBounds := []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 600}
	if diff := cmp.Diff(wantBounds, bounds); diff != "" {
		t.Errorf("job duration buckets (-want +got):\n%s", diff)
	}
}
