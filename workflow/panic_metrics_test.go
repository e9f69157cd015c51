package workflow_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/braidflow/braid/queue"
	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// A turn whose workflow code panics fails its attempt with the stack in
// the error, and the queue counts that attempt's failure as a panic
// (error.type "panic"), as it counts a panic of any job.
func TestTurnPanicIsCountedAsAPanic(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	boom := workflow.Define("panic_counted", func(t *workflow.Task, _ struct{}) (int, error) {
		panic("workflow code panicked")
	}, workflow.WithMaxAttempts(1))
	cfg := testConfig(boom)
	cfg.MeterProvider = mp
	eng := startEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 30*time.Second)
	run, err := boom.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Result(ctx); err == nil {
		t.Fatal("the panicking run completed")
	}
	if err := eng.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	byType := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != queue.MetricFailures {
				continue
			}
			for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
				if k, _ := p.Attributes.Value("job.kind"); k.AsString() != workflow.TaskKind {
					continue
				}
				v, _ := p.Attributes.Value(attribute.Key("error.type"))
				byType[v.AsString()] += p.Value
			}
		}
	}
	if byType["panic"] != 1 || len(byType) != 1 {
		t.Errorf("%s of turns by error.type: %v; want one panic", queue.MetricFailures, byType)
	}
}
