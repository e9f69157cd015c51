package workflow_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// Start and StartMany count the runs they start once their transaction
// has committed: a start whose commit fails (here a deferred constraint
// refuses it) counts nothing, and StartTx, whose commit the engine does
// not see, counts its run as it starts.
func TestStartCountsOnlyTheRunsItsCommitKept(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	execSQL(t, pool, `
		CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		    IF NEW.input::text LIKE '%poison%' THEN
		        RAISE EXCEPTION 'refused run %', NEW.id;
		    END IF;
		    RETURN NEW;
		END $$;
		CREATE CONSTRAINT TRIGGER refuse_poison AFTER INSERT ON braid_runs
		    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_poison();`)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })

	// The engine is not started: nothing runs, only the starts count.
	echo := workflow.Define("start_metrics_echo", func(t *workflow.Task, s string) (string, error) { return s, nil })
	cfg := testConfig(echo)
	cfg.MeterProvider = mp
	eng := newEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 30*time.Second)

	if _, err := echo.Start(ctx, eng, "poison", nil); err == nil {
		t.Fatal("a start whose commit is refused succeeded")
	}
	if _, err := echo.StartMany(ctx, eng, []workflow.StartManyParams[string]{{Input: "fine"}, {Input: "poison"}}); err == nil {
		t.Fatal("a StartMany whose commit is refused succeeded")
	}
	if _, err := echo.Start(ctx, eng, "fine", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := echo.StartMany(ctx, eng, []workflow.StartManyParams[string]{{Input: "a"}, {Input: "b"}}); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := echo.StartTx(ctx, tx, eng, "in a caller's transaction", nil); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_runs`); n != 4 {
		t.Fatalf("%d runs exist, want 4", n)
	}
	m := collectEngineMetrics(t, reader)
	if got := m.counters[workflow.MetricRunsStarted]; got != 4 {
		t.Errorf("%s counted %d runs, want the 4 that exist", workflow.MetricRunsStarted, got)
	}
}
