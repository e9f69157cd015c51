package workflow_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// Eight turns end in one batch, each but one starting a detached child;
// the last round trip of the batch fails on the eighth turn's run (a
// trigger rejects its output), so that the batch, which had created the
// detached children's runs, commits nothing and is recorded again one
// outcome at a time. The detached runs are counted once each, as started
// when their start commits, and each has one braid.run.start span: the
// one its run keeps as its trace, under which its turns run.
func TestFailedBatchCountsAndTracesItsDetachedRunsOnce(t *testing.T) {
	t.Parallel()
	pool := testutil.Pool(t, testutil.URL(t))
	execSQL(t, pool, `
		CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		    IF NEW.output::text LIKE '%poison%' THEN
		        RAISE EXCEPTION 'poisoned output of %', NEW.id;
		    END IF;
		    RETURN NEW;
		END $$;
		CREATE TRIGGER poison BEFORE UPDATE ON braid_runs FOR EACH ROW EXECUTE FUNCTION poison();`)

	const n = 8
	gate := newBarrier(n)
	detached := workflow.Define("telemetry_detached", func(t *workflow.Task, in string) (string, error) {
		return in, nil
	})
	parent := workflow.Define("telemetry_parent", func(t *workflow.Task, in string) (string, error) {
		if in != "poison" {
			workflow.Go(t, "side", detached, in, workflow.Detached())
		}
		if t.Attempt() == 1 {
			gate.wait(20 * time.Second) // every first turn ends at once
		}
		return in, nil
	}, workflow.WithMaxAttempts(2))

	rec := &logRecorder{Handler: slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	cfg := testConfig(parent, detached)
	cfg.Logger = slog.New(rec)
	cfg.MeterProvider = mp
	cfg.TracerProvider = tp
	cfg.OutcomeLinger = 10 * time.Second // the batch waits for every turn
	eng := startEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 60*time.Second)

	runs := make([]*workflow.Run[string], n)
	for i := range runs {
		in := "good"
		if i == 3 {
			in = "poison"
		}
		r, err := parent.Start(ctx, eng, in, nil)
		if err != nil {
			t.Fatal(err)
		}
		runs[i] = r
	}
	for i, r := range runs {
		if _, err := r.Result(ctx); (err == nil) == (i == 3) {
			t.Fatalf("run %d: %v; want only the poisoned run failed", i, err)
		}
	}
	if !rec.has("workflow: a batch of turn outcomes failed; recording them one at a time outcomes=8") {
		t.Fatal("the eight outcomes were not committed as one batch that failed")
	}
	// The detached children run to their end.
	waitFor(t, "every detached child to complete", 20*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM braid_runs WHERE workflow = 'telemetry_detached' AND status = 'completed'`) == n-1
	})
	if err := eng.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	m := collectEngineMetrics(t, reader)
	if got, want := m.counters[workflow.MetricRunsStarted], int64(n+n-1); got != want {
		t.Errorf("%s counted %d runs, want %d: %d started, %d detached children", workflow.MetricRunsStarted, got, want, n, n-1)
	}

	// Each detached run has one braid.run.start span, the one its run
	// keeps as its trace.
	rows, err := pool.Query(ctx, `SELECT id::text, trace_parent FROM braid_runs WHERE workflow = 'telemetry_detached'`)
	if err != nil {
		t.Fatal(err)
	}
	kept := map[string]string{}
	for rows.Next() {
		var id, tp string
		if err := rows.Scan(&id, &tp); err != nil {
			t.Fatal(err)
		}
		kept[id] = tp
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	starts := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range spans.Ended() {
		if s.Name() != "braid.run.start" || attr(s, "workflow") != "telemetry_detached" {
			continue
		}
		id := attr(s, attribute.Key("run.id"))
		starts[id] = append(starts[id], s)
	}
	for id, ss := range starts {
		if _, ok := kept[id]; !ok {
			t.Errorf("%d braid.run.start spans name run %s, which does not exist", len(ss), id)
		}
	}
	for id, tp := range kept {
		ss := starts[id]
		if len(ss) != 1 {
			t.Errorf("detached run %s has %d braid.run.start spans, want 1", id, len(ss))
			continue
		}
		if sc := ss[0].SpanContext(); "00-"+sc.TraceID().String()+"-"+sc.SpanID().String()+"-01" != tp {
			t.Errorf("detached run %s keeps trace %s, not its braid.run.start span's (%s)", id, tp, sc.SpanID())
		}
	}
}
