package workflow_test

import (
	"context"
	"log/slog"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// countingHandler counts the records at WARN or above whose message
// contains match.
type countingHandler struct {
	match string
	n     *atomic.Int64
}

func (h countingHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h countingHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.match) {
		h.n.Add(1)
	}
	return nil
}
func (h countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countingHandler) WithGroup(string) slog.Handler      { return h }

// A task that the reconciler keeps failing to settle is set aside, longer
// after each failure, as the delay processor sets aside a delay: looks
// that follow one another without pause try it, and report its failure,
// only as often as its back-off allows (at 0, 1, 3, 7… seconds), rather
// than at every look.
func TestReconcilerSetsAsideATaskItCannotSettle(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	refuseUpdates(t, pool, "braid_tasks", `NEW.status = 'failed'`)
	wf := workflow.Define("reconcile_aside", func(t *workflow.Task, _ struct{}) (int, error) { return 1, nil })
	var logged atomic.Int64
	cfg := testConfig(wf)
	cfg.Logger = slog.New(countingHandler{match: "reconciler", n: &logged})
	// Not started: the reconciler runs only when the test calls it.
	eng := newEngine(t, pool, cfg)
	ctx := ctxTimeout(t, 60*time.Second)
	run, err := wf.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	execSQL(t, pool, `
		UPDATE river_job SET state = 'discarded', attempt = max_attempts, attempted_at = now(), finalized_at = now()
		 WHERE kind = $1 AND braid_turn_task(unique_key, args) = (SELECT id FROM braid_tasks WHERE run_id = $2)`,
		workflow.TaskKind, run.ID)

	start := time.Now()
	looks, reported := 0, 0
	for time.Since(start) < 2500*time.Millisecond {
		if err := workflow.Reconcile(ctx, eng); err != nil {
			reported++
		}
		looks++
	}
	elapsed := time.Since(start).Seconds()
	reported += int(logged.Load())
	// Tried at most at 0, 1, 3, 7… seconds after the first failure.
	most := int(math.Floor(math.Log2(elapsed+1))) + 1
	if reported == 0 || reported > most {
		t.Fatalf("%d looks in %.1fs reported the task's failure %d times; want 1 to %d", looks, elapsed, reported, most)
	}
	if n := count(t, pool, `SELECT count(*) FROM braid_tasks WHERE run_id = $1 AND status = 'pending'`, run.ID); n != 1 {
		t.Fatalf("%d pending tasks; want the task that cannot be failed left pending", n)
	}
}
