package chaos

import (
	"context"
	"sync"
	"time"
)

// restartDowntime is how long PostgreSQL stays down at each restart.
const restartDowntime = 500 * time.Millisecond

// driveRestart shuts PostgreSQL down immediately and starts it again,
// twice, while runs are in flight.
func driveRestart(ctx context.Context, s *scene) error {
	var wg sync.WaitGroup
	wg.Go(func() { s.load(ctx, s.phase, 0) })
	var err error
	every(ctx, s.phase, 2, func() {
		if err != nil {
			return
		}
		s.deadlocks.checkpoint(ctx, s.pool)
		began := time.Now()
		if err = s.cl.restartImmediate(ctx, restartDowntime); err != nil {
			return
		}
		s.fault("postgres_immediate_restart")
		s.say("%s: PostgreSQL shut down immediately and started again in %s", s.name, time.Since(began).Round(10*time.Millisecond))
		s.deadlocks.rebase(ctx, s.pool)
	})
	wg.Wait()
	if err != nil {
		return err
	}
	return ctx.Err()
}
