package chaos

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/braidflow/braid/workflow"
)

// driveLease SIGKILLs the holder of the delay processor's lease while
// delays are pending, and measures how long until another process holds
// it.
func driveLease(ctx context.Context, s *scene) error {
	var wg sync.WaitGroup
	wg.Go(func() { s.load(ctx, s.phase, s.size.delay/2) })
	every(ctx, s.phase, 2, func() {
		l, err := s.leases.Holder(ctx, workflow.DelayLease)
		if err != nil {
			s.opError("lease holder", err)
			return
		}
		pid := holderPID(l.Holder)
		if pid == 0 || !s.fleet.kill(pid) {
			return
		}
		killed := time.Now()
		s.fault("sigkill_delay_lease_holder")
		s.say("%s: killed worker %d, holder of %s", s.name, pid, workflow.DelayLease)
		for time.Since(killed) < s.cfg.SettleTimeout && ctx.Err() == nil {
			if n, err := s.leases.Holder(ctx, workflow.DelayLease); err == nil && n.Holder != l.Holder {
				took := round(time.Since(killed).Seconds())
				s.mu.Lock()
				s.fig.LeaseTakeoverSeconds = max(s.fig.LeaseTakeoverSeconds, took)
				s.mu.Unlock()
				return
			}
			_ = sleep(ctx, 50*time.Millisecond)
		}
	})
	wg.Wait()
	return ctx.Err()
}

// holderPID reads the process ID out of a worker's holder name,
// "chaos-<pid>-<random>".
func holderPID(holder string) int {
	parts := strings.Split(holder, "-")
	if len(parts) != 3 || parts[0] != "chaos" {
		return 0
	}
	pid, _ := strconv.Atoi(parts[1])
	return pid
}
