package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// A step without a retry policy records no failure of its own; when the
// task's code returns its error (wrapped or not), the task's error names
// the step, so operators see which step failed. An error of the code's own
// names none.
func TestTaskErrorNamesTheStepWhoseErrorFailedIt(t *testing.T) {
	t.Parallel()
	pool := testutil.DB(t)
	errRender := errors.New("render: template missing")
	plain := workflow.Define("fails_in_render", func(t *workflow.Task, _ struct{}) (string, error) {
		if _, err := workflow.Step(t, "load", func(ctx context.Context) (int, error) { return 1, nil }); err != nil {
			return "", err
		}
		return workflow.Step(t, "render", func(ctx context.Context) (string, error) { return "", errRender })
	}, workflow.WithMaxAttempts(1))
	wrapped := workflow.Define("wraps_render", func(t *workflow.Task, _ struct{}) (string, error) {
		_, err := workflow.Step(t, "render", func(ctx context.Context) (string, error) { return "", errRender })
		return "", fmt.Errorf("building the report: %w", err)
	}, workflow.WithMaxAttempts(1))
	own := workflow.Define("own_error", func(t *workflow.Task, _ struct{}) (string, error) {
		_, _ = workflow.Step(t, "render", func(ctx context.Context) (string, error) { return "", errRender })
		return "", errors.New("gave up after render")
	}, workflow.WithMaxAttempts(1))
	eng := startEngine(t, pool, testConfig(plain, wrapped, own))
	ctx := ctxTimeout(t, 30*time.Second)

	for _, tc := range []struct {
		wf   *workflow.Workflow[struct{}, string]
		want string
	}{{plain, "render"}, {wrapped, "render"}, {own, ""}} {
		run, err := tc.wf.Start(ctx, eng, struct{}{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := run.Result(ctx); err == nil {
			t.Fatalf("%s: the run completed", tc.wf.Name())
		}
		info, err := workflow.Inspect(ctx, pool, run.ID)
		if err != nil {
			t.Fatal(err)
		}
		root := info.Tasks[0]
		if root.Status != "failed" || root.FailedStep != tc.want {
			t.Errorf("%s: task %s, failed step %q; want failed in %q", tc.wf.Name(), root.Status, root.FailedStep, tc.want)
		}
		for _, s := range root.Steps {
			if s.Name == "render" {
				t.Errorf("%s: step render was recorded (%s); a step without a retry policy records no failure", tc.wf.Name(), s.Status)
			}
		}
	}
}
