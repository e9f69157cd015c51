package chaos

import (
	"context"
	"sync"
	"time"
)

// driveKill SIGKILLs random workers under load, and kills the workers that
// run the attempts of runs whose step hangs, up to and including their
// last attempt: those runs must end failed, and complete on Retry.
func driveKill(ctx context.Context, s *scene) error {
	var wg sync.WaitGroup
	wg.Go(func() { s.load(ctx, s.phase, 0) })
	for i := range s.size.failing {
		wg.Go(func() {
			id, err := s.startFail(ctx, wfFailKill, FailIn{Mode: modeHang, Child: i%2 == 1})
			if err == nil {
				s.killEveryAttempt(ctx, id, s.phase+s.cfg.SettleTimeout)
			}
		})
	}
	kills := max(2, int(s.phase/(2*time.Second)))
	every(ctx, s.phase, kills, func() {
		if pid := s.fleet.random(); pid != 0 && s.fleet.kill(pid) {
			s.fault("sigkill")
		}
	})
	wg.Wait()
	return ctx.Err()
}

// killEveryAttempt waits for each attempt of the run's hanging step to
// start, and kills the worker running it, until the last attempt's worker
// has been killed or the run has ended (a random kill may have taken an
// attempt before its step began).
func (s *scene) killEveryAttempt(ctx context.Context, runID string, bound time.Duration) {
	deadline := time.Now().Add(bound)
	killed := map[int]bool{} // attempts handled
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var status string
		if s.pool.QueryRow(ctx, `SELECT status FROM braid_runs WHERE id = $1`, runID).Scan(&status) == nil &&
			(status == "completed" || status == "failed" || status == "cancelled") {
			return
		}
		var pid, attempt int
		err := s.pool.QueryRow(ctx, `
			SELECT pid, attempt FROM chaos_ledger WHERE run_id = $1 AND step = 'trouble' ORDER BY id DESC LIMIT 1`, runID).Scan(&pid, &attempt)
		if err == nil && !killed[attempt] {
			killed[attempt] = true
			if s.fleet.kill(pid) {
				kind := "sigkill_hung_attempt"
				if attempt >= failAttempts {
					kind = "sigkill_last_attempt"
				}
				s.fault(kind)
				s.say("%s: killed worker %d running attempt %d/%d of run %s", s.name, pid, attempt, failAttempts, runID)
			}
			if attempt >= failAttempts {
				return
			}
		}
		_ = sleep(ctx, 100*time.Millisecond)
	}
}
