package admin

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/braidflow/braid/workflow"
)

// TestCancelWhoseRequestEndsDuringTheWaitIsRecorded cancels a run whose
// step ignores its context, from a client that gives up while Cancel waits
// for the turn after its commit: the run is cancelled, so the cancel is
// audited, and the server answers it as done.
func TestCancelWhoseRequestEndsDuringTheWaitIsRecorded(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	started, release := make(chan struct{}), make(chan struct{})
	stubborn := workflow.Define("stubborn", func(t *workflow.Task, _ struct{}) (int, error) {
		return workflow.Step(t, "ignore", func(context.Context) (int, error) {
			close(started)
			<-release // ignores its context
			return 1, nil
		})
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	eng := f.startEngine(2, stubborn)
	t.Cleanup(func() { close(release) }) // before the engine stops
	run, err := stubborn.Start(ctx, eng, struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-started

	req, _ := http.NewRequest("POST", f.http.URL+"/api/runs/"+run.ID+"/cancel", nil)
	req.Header.Set("Authorization", "Bearer "+adminSecret)
	req.Header.Set("X-Braid-Request", "1")
	client := &http.Client{Timeout: 500 * time.Millisecond}
	if res, err := client.Do(req); err == nil {
		res.Body.Close()
		t.Fatalf("the cancel answered %d while the step still ran", res.StatusCode)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(f.auditLog(), `"run.cancel"`) {
		if time.Now().After(deadline) {
			t.Fatalf("the cancel of run %s was not audited; log: %s", run.ID, f.auditLog())
		}
		time.Sleep(50 * time.Millisecond)
	}
	info, err := workflow.InspectRun(ctx, f.pool, run.ID)
	if err != nil || info.Status != "cancelled" {
		t.Errorf("run %v, %v: want it cancelled", info, err)
	}
}
