package workflow_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// A turn whose code completed but whose outcome could not be recorded (a
// trigger rejects its output) fails its attempt: River records the error
// and retries the turn. Its span says so, with the error status and the
// error, as every failed attempt's span does, rather than show a
// completed turn.
func TestTurnSpanOfAnOutcomeNotRecordedIsAnError(t *testing.T) {
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
		CREATE TRIGGER poison BEFORE UPDATE ON braid_tasks FOR EACH ROW EXECUTE FUNCTION poison();`)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	echo := workflow.Define("outcome_echo", func(t *workflow.Task, in string) (string, error) {
		return in, nil
	}, workflow.WithMaxAttempts(2))
	cfg := testConfig(echo)
	cfg.TracerProvider = tp
	eng := startEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 60*time.Second)

	run, err := echo.Start(ctx, eng, "poison", nil)
	if err != nil {
		t.Fatal(err)
	}
	// Both attempts fail to record their outcome, and River discards the
	// turn's job.
	waitFor(t, "the turn's job to be discarded", 30*time.Second, func() bool {
		return count(t, pool, `
			SELECT count(*) FROM river_job j JOIN braid_tasks t ON braid_turn_task(j.unique_key, j.args) = t.id
			 WHERE t.run_id = $1 AND j.state = 'discarded' AND j.attempt = 2`, run.ID) == 1
	})
	var turns []sdktrace.ReadOnlySpan
	waitFor(t, "both turn spans to end", 10*time.Second, func() bool {
		turns = turns[:0]
		for _, s := range rec.Ended() {
			if s.Name() == "braid.task outcome_echo" {
				turns = append(turns, s)
			}
		}
		return len(turns) == 2
	})
	for _, s := range turns {
		if s.Status().Code != codes.Error || !strings.Contains(s.Status().Description, "poisoned output") {
			t.Errorf("turn span of attempt %s has status %v %q and outcome %q; want the error that kept its outcome from being recorded",
				attr(s, "attempt"), s.Status().Code, s.Status().Description, attr(s, "turn.outcome"))
		}
	}
}

// A turn of a workflow that the process that took it does not know is an
// attempt too: each is a span in its run's trace, and the one that fails
// the task, once no process took the turn in time, carries the error that
// the run then shows.
func TestTurnOfAnUnknownWorkflowIsTraced(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	known := workflow.Define("traced_deployed_later", func(t *workflow.Task, in int) (int, error) { return in * 2, nil })
	other := workflow.Define("traced_something_else", func(t *workflow.Task, in int) (int, error) { return in, nil })

	// The only working process does not know the workflow.
	cfg := testConfig(other)
	cfg.TracerProvider = tp
	cfg.UnknownWorkflowSnooze = 100 * time.Millisecond
	cfg.UnknownWorkflowTimeout = time.Second
	eng := startEngine(t, pool, cfg)
	starterCfg := testConfig(known)
	starterCfg.TracerProvider = tp
	starter := newEngine(t, pool, starterCfg)
	run, err := known.Start(ctxTimeout(t, 5*time.Second), starter, 21, nil)
	if err != nil {
		t.Fatal(err)
	}
	if msg := requireFailed(t, pool, eng, run.ID); !strings.Contains(msg, "is not registered") {
		t.Fatalf("task error %q does not name the unknown workflow", msg)
	}

	var start sdktrace.ReadOnlySpan
	var turns []sdktrace.ReadOnlySpan
	waitFor(t, "the span of the turn that failed the task", 10*time.Second, func() bool {
		start, turns = nil, nil
		failed := false
		for _, s := range rec.Ended() {
			switch s.Name() {
			case "braid.run.start":
				start = s
			case "braid.task traced_deployed_later":
				turns = append(turns, s)
				failed = failed || s.Status().Code == codes.Error
			}
		}
		return start != nil && failed
	})
	for _, s := range turns {
		if s.SpanContext().TraceID() != start.SpanContext().TraceID() || s.Parent().SpanID() != start.SpanContext().SpanID() {
			t.Errorf("a turn span is not a child of the run's braid.run.start")
		}
		if attr(s, "run.id") != run.ID || attr(s, "workflow") != "traced_deployed_later" {
			t.Errorf("turn span names run %q and workflow %q", attr(s, "run.id"), attr(s, "workflow"))
		}
		if s.Status().Code == codes.Error && !strings.Contains(s.Status().Description, "is not registered") {
			t.Errorf("turn span's error %q does not name the unknown workflow", s.Status().Description)
		}
	}
}
