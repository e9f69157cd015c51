package scheduler_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
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

// TestScheduleNameFitsTheKeysOfItsSlots: every slot of a schedule carries
// the idempotency key "schedule:<name>:<slot>", and the workflow engine
// refuses a run's key over its byte limit. A name of few characters but
// many bytes is refused by Create for a workflow target, naming the limit,
// rather than accepted and then failing at every slot; the longest name
// Create accepts fires.
func TestScheduleNameFitsTheKeysOfItsSlots(t *testing.T) {
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

	// 200 characters, the limit in characters, of 3 bytes each.
	wide := strings.Repeat("時", scheduler.NameMaxLength)
	_, err = s.Create(ctx, &scheduler.ScheduleParams{Name: wide, Expression: "@daily",
		TargetType: scheduler.TargetWorkflow, Target: "send_digest"})
	if err == nil {
		_, fireErr := s.RunNow(ctx, wide)
		t.Fatalf("Create accepted a name of %d bytes whose slots cannot fire (RunNow: %v)", len(wide), fireErr)
	}
	if !errors.Is(err, scheduler.ErrInvalidSchedule) || !strings.Contains(err.Error(), "is 600 bytes") {
		t.Fatalf("Create of a name of %d bytes: %v; want ErrInvalidSchedule naming its size and the limit", len(wide), err)
	}

	// A job's key is limited in characters: the name fits it.
	bare, err := scheduler.New(pool, &scheduler.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bare.Create(ctx, &scheduler.ScheduleParams{Name: wide, Expression: "@daily",
		TargetType: scheduler.TargetJob, Target: "send_digest_job"}); err != nil {
		t.Fatalf("Create of a job target named by %d characters of %d bytes: %v", len([]rune(wide)), len(wide), err)
	}

	// 200 characters of 2 bytes each fit.
	narrower := strings.Repeat("é", scheduler.NameMaxLength)
	if _, err := s.Create(ctx, &scheduler.ScheduleParams{Name: narrower, Expression: "@daily",
		TargetType: scheduler.TargetWorkflow, Target: "send_digest"}); err != nil {
		t.Fatalf("Create of a name of %d bytes: %v", len(narrower), err)
	}
	if _, err := s.RunNow(ctx, narrower); err != nil {
		t.Fatalf("RunNow of a schedule whose name is %d bytes: %v", len(narrower), err)
	}
}
