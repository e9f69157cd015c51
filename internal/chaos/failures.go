package chaos

import (
	"context"
	"sync"
	"time"

	"github.com/braidflow/braid/workflow"
)

// driveTimeout starts runs whose step outlives the workflow's timeout on
// every attempt, the last one included, one kind honouring its context
// and one ignoring it, beside runs that must complete: the former must end
// failed, and complete on Retry.
func driveTimeout(ctx context.Context, s *scene) error {
	return failBeside(ctx, s, wfFailTimeout, map[string]string{
		modeTimeout:       "timeout_last_attempt",
		modeIgnoreTimeout: "timeout_last_attempt_ignored",
	})
}

// driveErrors starts runs whose step fails with an error holding a NUL
// byte or of 1 MiB of text, in the root task and in a child, beside runs
// that must complete.
func driveErrors(ctx context.Context, s *scene) error {
	return failBeside(ctx, s, wfFailError, map[string]string{
		modeNUL:  "nul_byte_error",
		modeHuge: "one_mib_error",
	})
}

// failBeside starts, for each mode, runs of wf made to fail (alternately
// in the root and in a child), counted as faults of the mode's kind, near
// the end of a load of chaos_flow runs, so that runs of the load are in
// flight before, while and after they fail.
func failBeside(ctx context.Context, s *scene, wf *workflow.Workflow[FailIn, Out], kinds map[string]string) error {
	var wg sync.WaitGroup
	wg.Go(func() { s.load(ctx, s.phase, 0) })
	defer wg.Wait()
	if err := sleep(ctx, max(s.phase-2*time.Second, 0)); err != nil {
		return err
	}
	for mode, kind := range kinds {
		for i := range max(2, s.size.failing) {
			if _, err := s.startFail(ctx, wf, FailIn{Mode: mode, Child: i%2 == 1}); err == nil {
				s.fault(kind)
			}
		}
	}
	return ctx.Err()
}
