package chaos

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/braidflow/braid/workflow"
)

// stormers is how many goroutines call Cancel and Retry at once.
const stormers = 4

// driveStorm calls Cancel and Retry from the coordinator, at random,
// against runs that are completing and suspending, then retries every run
// left cancelled: every run must complete, and no call may deadlock.
func driveStorm(ctx context.Context, s *scene) error {
	var wg sync.WaitGroup
	wg.Go(func() { s.load(ctx, s.phase, 0) })
	end := time.Now().Add(s.phase)
	for range stormers {
		wg.Go(func() {
			_ = sleep(ctx, s.phase/10)
			for time.Now().Before(end) && ctx.Err() == nil {
				runs := s.snapshot()
				if len(runs) > 0 {
					s.stormOnce(ctx, runs[rand.IntN(len(runs))].id)
				}
				_ = sleep(ctx, time.Duration(rand.IntN(40))*time.Millisecond)
			}
		})
	}
	wg.Wait()

	// Whatever the storm left cancelled (or failed) is retried, so that
	// every run must end completed.
	states, err := s.states(ctx, ids(s.snapshot()))
	if err != nil {
		return err
	}
	for id, st := range states {
		if st.status == "cancelled" || st.status == "failed" {
			if s.retry(ctx, id) == nil {
				s.fault("retry")
				s.mu.Lock()
				s.fig.Retried++
				s.mu.Unlock()
			}
		}
	}
	return ctx.Err()
}

// stormOnce cancels or retries one run. Refusals that follow from the
// run's state (finished, not retryable) are the storm's normal noise;
// anything else is counted.
func (s *scene) stormOnce(ctx context.Context, id string) {
	opCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if rand.IntN(2) == 0 {
		err := s.eng.Cancel(opCtx, id)
		switch {
		case err == nil:
			s.fault("cancel")
			s.mu.Lock()
			s.fig.Cancels++
			s.mu.Unlock()
		case errors.Is(err, workflow.ErrRunFinished):
		default:
			s.opError("cancel", err)
		}
		return
	}
	err := s.eng.Retry(opCtx, id)
	switch {
	case err == nil:
		s.fault("retry")
		s.mu.Lock()
		s.fig.Retries++
		s.mu.Unlock()
	case errors.Is(err, workflow.ErrRunNotRetryable):
	default:
		s.opError("retry", err)
	}
}

func ids(runs []*tracked) []string {
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = r.id
	}
	return out
}
