package chaos

import (
	"context"
	"sync"
	"syscall"
	"time"
)

// freezeFor is how long a worker stays frozen: past the heartbeat rescue
// window and the delay lease's TTL, so that its turns and its lease are
// taken over while it sleeps.
const freezeFor = rescueWindow + leaseTTL + 1500*time.Millisecond

// driveFreeze freezes a busy worker with SIGSTOP past the heartbeat rescue
// window, then thaws it with SIGCONT: its turns, rescued and run again
// elsewhere, come back as zombies that must not record anything twice.
func driveFreeze(ctx context.Context, s *scene) error {
	var wg sync.WaitGroup
	wg.Go(func() { s.load(ctx, s.phase, 0) })
	freezes := max(1, int(s.phase/(2*freezeFor)))
	every(ctx, max(s.phase-freezeFor, time.Second), freezes, func() {
		pid := s.busiestWorker(ctx)
		if pid == 0 || !s.fleet.signal(pid, syscall.SIGSTOP) {
			return
		}
		s.fault("sigstop")
		s.say("%s: froze worker %d for %s", s.name, pid, freezeFor)
		_ = sleep(context.WithoutCancel(ctx), freezeFor)
		s.fleet.signal(pid, syscall.SIGCONT)
		s.fault("sigcont")
	})
	wg.Wait()
	return ctx.Err()
}

// busiestWorker is the live worker that ran the most step bodies in the
// last two seconds, or a random one.
func (s *scene) busiestWorker(ctx context.Context) int {
	rows, err := s.pool.Query(ctx, `
		SELECT pid FROM chaos_ledger WHERE at > clock_timestamp() - interval '2 seconds'
		 GROUP BY pid ORDER BY count(*) DESC`)
	if err == nil {
		defer rows.Close()
		for rows.Next() {
			var pid int
			if rows.Scan(&pid) == nil && s.fleet.has(pid) {
				return pid
			}
		}
	}
	return s.fleet.random()
}
