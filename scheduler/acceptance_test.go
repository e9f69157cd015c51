package scheduler_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/braidflow/braid/scheduler"
	"github.com/braidflow/braid/testutil"
	"github.com/braidflow/braid/workflow"
)

// TestCreateUnknownWorkflow uses the workflow engine as the scheduler's
// starter: a schedule of a workflow the engine does not know is refused
// with an error that names it.
func TestCreateUnknownWorkflow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testutil.DB(t)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	digest := workflow.Define("send_digest", func(t *workflow.Task, in struct{}) (struct{}, error) { return in, nil })
	eng, err := workflow.NewEngine(pool, &workflow.Config{Workflows: []workflow.Definition{digest}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	s, err := scheduler.New(pool, &scheduler.Config{Queue: eng.Queue(), Workflows: eng, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Create(ctx, &scheduler.ScheduleParams{Name: "nightly", Expression: "@daily",
		TargetType: scheduler.TargetWorkflow, Target: "send_digestt"})
	const want = `scheduler: schedule "nightly": workflow "send_digestt" is not registered`
	if !errors.Is(err, scheduler.ErrUnknownTarget) || err.Error() != want {
		t.Fatalf("Create: %v; want %q", err, want)
	}
	if _, err := s.Create(ctx, &scheduler.ScheduleParams{Name: "nightly", Expression: "@daily",
		TargetType: scheduler.TargetWorkflow, Target: "send_digest"}); err != nil {
		t.Fatalf("Create of a registered workflow: %v", err)
	}
}
