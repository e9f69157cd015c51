package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// TestRunsExportAndCheck: `braid runs export` writes a history that
// replays against the code that made it; `braid check` with no workflows
// in the binary refuses with exit status 2, and with the workflow of a
// run waiting on a signal it replays it and finds nothing to report.
func TestRunsExportAndCheck(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := testutil.URL(t)
	pool := testutil.Pool(t, url)
	eng := startEngine(t, ctx, pool, approval)
	run, err := approval.Start(ctx, eng, "order-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	awaitWait(t, ctx, pool, run.ID, "signal")

	code, out, errOut := braid(t, "runs", "export", run.ID, "--database-url", url)
	if code != 0 {
		t.Fatalf("runs export: %d, %s", code, errOut)
	}
	h, err := workflow.ReadRunHistory(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if h.RunID != run.ID || len(h.Tasks) != 1 || len(h.Tasks[0].Steps) != 1 || h.Tasks[0].Steps[0].Kind != "signal" {
		t.Errorf("runs export wrote %+v", h)
	}
	if rep, err := workflow.Replay(ctx, h, approval); err != nil || rep.Tasks != 1 || len(rep.Divergences) != 0 {
		t.Errorf("replay of the export: %+v, %v", rep, err)
	}
	if code, _, errOut := braid(t, "runs", "export", "0195f3a0-0000-7000-8000-000000000000", "--database-url", url); code != 1 || !strings.Contains(errOut, "not found") {
		t.Errorf("runs export of an unknown run: %d, %q", code, errOut)
	}

	if code, _, errOut := braid(t, "check", "--database-url", url); code != 2 || !strings.Contains(errOut, "registers no workflows") {
		t.Errorf("check in a binary without workflows: %d, %q", code, errOut)
	}
	checkWorkflows = []workflow.Definition{approval}
	defer func() { checkWorkflows = nil }()
	code, out, errOut = braid(t, "check", "--database-url", url)
	if code != 0 || !strings.Contains(out, "replayed 1 unfinished runs (1 tasks): 0 would diverge") {
		t.Errorf("check: %d, %q, %q", code, out, errOut)
	}
}
