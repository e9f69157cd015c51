package workflow_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// Two delays fall due together and the delay processor wakes them in one
// transaction, which fails as it commits (a deferred trigger rejects the
// wake of one of them); the processor then wakes them one by one, and
// only the good one's wake commits. The lateness histogram counts the
// delays woken: one, once.
func TestDelayLatenessCountsEachWokenDelayOnce(t *testing.T) {
	t.Parallel()
	pool := testutil.Pool(t, testutil.URL(t))
	execSQL(t, pool, `
		CREATE FUNCTION poison_wake() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		    IF NEW.status = 'pending' AND NEW.input::text LIKE '%poison%' THEN
		        RAISE EXCEPTION 'poisoned wake of %', NEW.id;
		    END IF;
		    RETURN NEW;
		END $$;
		CREATE CONSTRAINT TRIGGER poison_wake AFTER UPDATE ON braid_tasks
		    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION poison_wake();`)

	type in struct {
		At  time.Time
		Tag string
	}
	var suspended = make(chan struct{}, 2)
	delayed := workflow.Define("lateness_delayed", func(t *workflow.Task, in in) (string, error) {
		if err := t.DelayUntil("wait", in.At); err != nil {
			suspended <- struct{}{}
			return "", err
		}
		return in.Tag, nil
	})
	rec := &logRecorder{Handler: slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	cfg := testConfig(delayed)
	cfg.Logger = slog.New(rec)
	cfg.MeterProvider = mp
	eng := startEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 60*time.Second)

	// Both delays are due at the same moment, well after both turns
	// have suspended.
	at := time.Now().Add(3 * time.Second)
	good, err := delayed.Start(ctx, eng, in{At: at, Tag: "good"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := delayed.Start(ctx, eng, in{At: at, Tag: "poison"}, nil); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		<-suspended
	}
	if out, err := good.Result(ctx); err != nil || out != "good" {
		t.Fatalf("good run: %q, %v", out, err)
	}
	if !rec.has("workflow: waking due delays; retrying them one by one") {
		t.Fatal("the two delays were not woken in one transaction that failed")
	}
	if err := eng.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	m := collectEngineMetrics(t, reader)
	if got := m.histograms[workflow.MetricDelayLateness].Count; got != 1 {
		t.Errorf("%s recorded %d latenesses, want 1: one delay was woken", workflow.MetricDelayLateness, got)
	}
}
