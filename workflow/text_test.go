package workflow_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// TestTextThatPostgreSQLCannotHoldIsRefused gives a NUL character and a
// byte that is not UTF-8 wherever a caller's text becomes a text column:
// each is refused where it is given, with an error that names it, before
// any of it is written or any step body runs.
func TestTextThatPostgreSQLCannotHoldIsRefused(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	ctx := context.Background()
	const rule = "is not UTF-8 text without NUL characters"

	for _, name := range []string{"bad\x00name", "bad\xffname"} {
		wf := workflow.Define(name, func(t *workflow.Task, in int) (int, error) { return in, nil })
		_, err := workflow.NewEngine(pool, &workflow.Config{Workflows: []workflow.Definition{wf}})
		var de *workflow.DefinitionError
		if !errors.As(err, &de) || !strings.Contains(err.Error(), "the name "+rule[:2]) {
			t.Errorf("a workflow named %q: %v, want a *DefinitionError saying the name is not UTF-8 text", name, err)
		}
	}

	var ran atomic.Int32
	names := []string{"a\x00b", "a\xffb"}
	wf := workflow.Define("text_step", func(t *workflow.Task, i int) (int, error) {
		return workflow.Step(t, names[i], func(ctx context.Context) (int, error) {
			ran.Add(1)
			return 1, nil
		})
	}, workflow.WithMaxAttempts(1))
	eng := startEngine(t, pool, testConfig(wf))
	for i, name := range names {
		run, err := wf.Start(ctx, eng, i, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := run.Result(ctx); err == nil || !strings.Contains(err.Error(), "step name") || !strings.Contains(err.Error(), rule) {
			t.Errorf("a step named %q: %v, want the step's name refused", name, err)
		}
	}
	if n := ran.Load(); n != 0 {
		t.Errorf("the body of a step with a bad name ran %d times", n)
	}

	runs := func() (n int) {
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM braid_runs`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := runs()
	for _, key := range []string{"k\x00", "k\xff"} {
		if _, err := wf.Start(ctx, eng, 0, &workflow.StartOpts{IdempotencyKey: key}); err == nil || !strings.Contains(err.Error(), "idempotency key") || !strings.Contains(err.Error(), rule) {
			t.Errorf("idempotency key %q: %v, want it refused", key, err)
		}
		for _, f := range []workflow.RunFilter{{Workflow: key}, {IdempotencyKey: key}} {
			if _, err := eng.ListRuns(ctx, f); !errors.Is(err, workflow.ErrInvalidRunFilter) || !strings.Contains(err.Error(), rule) {
				t.Errorf("ListRuns(%+v): %v, want ErrInvalidRunFilter", f, err)
			}
		}
	}
	if after := runs(); after != before {
		t.Errorf("refused starts wrote %d runs", after-before)
	}
}
