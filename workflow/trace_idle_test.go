package workflow_test

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// Cancel skips a turn job that another transaction holds (SKIP LOCKED),
// and that turn, once it runs, finds its task cancelled and does nothing.
// It is an attempt of a River job all the same, and a span of its run's
// trace, that says it ran nothing.
func TestTurnOfACancelledTaskIsTraced(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ctx := ctxTimeout(t, 60*time.Second)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ran := make(chan struct{}, 1)
	wf := workflow.Define("idle_traced", func(t *workflow.Task, _ struct{}) (int, error) {
		ran <- struct{}{}
		return 1, nil
	})
	cfg := testConfig(wf)
	cfg.TracerProvider = tp
	// A process that works nothing starts the run and cancels it.
	starter := newEngine(t, pool, cfg)
	run, err := wf.Start(ctx, starter, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var jobID int64
	if err := pool.QueryRow(ctx, `SELECT id FROM river_job WHERE kind = $1`, workflow.TaskKind).Scan(&jobID); err != nil {
		t.Fatal(err)
	}
	// Another transaction holds the turn job while Cancel runs.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM river_job WHERE id = $1 FOR UPDATE`, jobID); err != nil {
		t.Fatal(err)
	}
	cancelErr := starter.Cancel(ctx, run.ID)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if cancelErr != nil {
		t.Fatalf("Cancel: %v", cancelErr)
	}
	if n := count(t, pool, `SELECT count(*) FROM river_job WHERE id = $1 AND state = 'available'`, jobID); n != 1 {
		t.Fatal("Cancel cancelled the turn job it should have skipped")
	}
	// A working process runs the turn, which finds the task cancelled.
	startEngine(t, pool, cfg)
	waitFor(t, "the turn job to complete", 10*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM river_job WHERE id = $1 AND state = 'completed'`, jobID) == 1
	})
	select {
	case <-ran:
		t.Fatal("the cancelled task's code ran")
	default:
	}
	var turn sdktrace.ReadOnlySpan
	waitFor(t, "the turn's span", 5*time.Second, func() bool {
		for _, s := range rec.Ended() {
			if s.Name() == "braid.task idle_traced" {
				turn = s
			}
		}
		return turn != nil
	})
	if attr(turn, "run.id") != run.ID || attr(turn, "job.id") == "" {
		t.Errorf("the turn's span names run %q and job %q", attr(turn, "run.id"), attr(turn, "job.id"))
	}
}
