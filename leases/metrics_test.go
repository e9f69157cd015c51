package leases_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/braidflow/braid/leases"
	"github.com/braidflow/braid/testutil"
)

func TestMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testutil.DB(t)
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })

	m, err := leases.New(pool, &leases.Config{
		Holder: "a", TTL: 2 * time.Second, Heartbeat: 50 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler), MeterProvider: provider,
	})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		l, err := m.TryAcquire(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	// A lease stolen under Run counts as a loss.
	err = m.Run(ctx, "job", func(ctx context.Context, _ *leases.Lease) error {
		if _, err := pool.Exec(ctx, `UPDATE braid_leases SET holder = 'thief', generation = generation + 1 WHERE name = 'job'`); err != nil {
			return err
		}
		<-ctx.Done()
		return ctx.Err()
	})
	if !errors.Is(err, leases.ErrLeaseNotHeld) {
		t.Fatalf("Run error = %v, want ErrLeaseNotHeld", err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, md := range sm.Metrics {
			sum, ok := md.Data.(metricdata.Sum[int64])
			if !ok {
				continue
			}
			for _, dp := range sum.DataPoints {
				if v, _ := dp.Attributes.Value(attribute.Key("braid.lease.name")); v.AsString() == "job" {
					got[md.Name] += dp.Value
				}
			}
		}
	}
	want := map[string]int64{"braid.lease.acquisitions": 3, "braid.lease.losses": 1}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s = %d, want %d (all: %v)", name, got[name], w, got)
		}
	}
}
