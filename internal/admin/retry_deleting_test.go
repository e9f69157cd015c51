package admin

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/braidflow/braid/workflow"
)

var failsOnce = workflow.Define("fails_once", func(t *workflow.Task, n int) (int, error) {
	return 0, errors.New("boom")
}, workflow.WithMaxAttempts(1))

// A failed run that retention has begun to delete over several
// transactions is refused by Retry; the API says why, where it said that a
// failed run could not be retried for not being failed.
func TestRetryOfARunBeingDeletedSaysWhy(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	eng := f.startEngine(4, failsOnce)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	run, err := failsOnce.Start(ctx, eng, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Result(ctx); err == nil {
		t.Fatal("the run completed; want it failed")
	}
	// What retention's first transaction does to a run wider than its
	// batches.
	if _, err := f.pool.Exec(ctx, `UPDATE braid_runs SET deleting = true WHERE id = $1`, run.ID); err != nil {
		t.Fatal(err)
	}
	status, raw := f.do("POST", "/api/runs/"+run.ID+"/retry", adminSecret, nil)
	if status != http.StatusConflict || !strings.Contains(string(raw), "is being deleted by retention") {
		t.Fatalf("retry of a run being deleted: %d %s; want 409 saying it is being deleted", status, raw)
	}
}
