package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// finalRun is the SQL list of final run statuses.
const finalRun = `('completed', 'failed', 'cancelled')`

// liveTurn is the SQL list of River states of a turn that may still run.
const liveTurn = `('available', 'pending', 'running', 'retryable', 'scheduled')`

// unsettled counts the runs among ids that are not final, plus their live
// turns.
func (e *env) unsettled(ctx context.Context, ids []string) (int, error) {
	var n int
	err := e.pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM braid_runs WHERE id = ANY($1::uuid[]) AND status NOT IN `+finalRun+`)
		     + (SELECT count(*) FROM river_job j JOIN braid_tasks t ON braid_turn_task(j.unique_key, j.args) = t.id
		         WHERE j.kind = 'braid_task' AND t.run_id = ANY($1::uuid[]) AND j.state IN `+liveTurn+`)`, ids).Scan(&n)
	return n, err
}

// settle waits until every run among ids is final with no live turn, or
// until bound has passed. It returns when they settled (the deadline when
// they did not) and whether they did.
func (e *env) settle(ctx context.Context, ids []string, bound time.Duration) (time.Time, bool) {
	deadline := time.Now().Add(bound)
	for {
		n, err := e.unsettled(ctx, ids)
		if err == nil && n == 0 {
			return time.Now(), true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return deadline, false
		}
		_ = sleep(ctx, 200*time.Millisecond)
	}
}

// runState is a run's status and outcome as the database has it.
type runState struct {
	status string
	output []byte
	errMsg string
}

func (e *env) states(ctx context.Context, ids []string) (map[string]runState, error) {
	rows, err := e.pool.Query(ctx, `
		SELECT id::text, status, output, left(coalesce(error->>'message', error::text, ''), 300)
		  FROM braid_runs WHERE id = ANY($1::uuid[])`, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]runState{}
	for rows.Next() {
		var id string
		var st runState
		if err := rows.Scan(&id, &st.status, &st.output, &st.errMsg); err != nil {
			return nil, err
		}
		out[id] = st
	}
	return out, rows.Err()
}

// finish settles the scene after its last fault and fills its figures:
// it waits for the runs to settle, checks that the runs meant to fail
// failed, releases and retries them, waits again, and judges every run.
func (s *scene) finish(ctx context.Context) error {
	runs := s.snapshot()
	ids := make([]string, len(runs))
	for i, r := range runs {
		ids[i] = r.id
	}
	from := s.lastFault
	if from.IsZero() {
		from = time.Now()
	}
	settledAt, ok := s.settle(ctx, ids, s.cfg.SettleTimeout)
	s.fig.Settled = ok
	s.fig.SettleSeconds = round(settledAt.Sub(from).Seconds())

	states, err := s.states(ctx, ids)
	if err != nil {
		return fmt.Errorf("chaos: reading runs: %w", err)
	}
	var retried []string
	for _, r := range runs {
		if r.expect != expectFail {
			continue
		}
		switch st := states[r.id]; st.status {
		case "failed":
			r.failed = true
			s.fig.Failed++
			if _, err := s.pool.Exec(ctx, `INSERT INTO chaos_released (run_id) VALUES ($1) ON CONFLICT DO NOTHING`, r.id); err != nil {
				return fmt.Errorf("chaos: releasing run %s: %w", r.id, err)
			}
			if err := s.retry(ctx, r.id); err != nil {
				r.why = "Retry after its failure: " + errKind("retry", err)
				continue
			}
			s.fig.Retried++
			retried = append(retried, r.id)
		case "completed":
			r.why = "completed although it was made to fail"
		default:
			r.why = fmt.Sprintf("meant to fail on its last attempt, still %s after %s", st.status, s.cfg.SettleTimeout)
		}
	}
	if len(retried) > 0 {
		retriedAt := time.Now()
		doneAt, ok := s.settle(ctx, retried, s.cfg.SettleTimeout)
		s.fig.RetrySettleSeconds = round(doneAt.Sub(retriedAt).Seconds())
		s.fig.Settled = s.fig.Settled && ok
		if states, err = s.states(ctx, ids); err != nil {
			return fmt.Errorf("chaos: reading runs: %w", err)
		}
	}
	s.judge(ctx, runs, states)
	return s.integrity(ctx, ids)
}

// retry retries a run, trying again a few times on errors that may pass
// (a turn still ending, a server restarting).
func (s *scene) retry(ctx context.Context, id string) error {
	var err error
	for range 3 {
		if err = s.eng.Retry(ctx, id); err == nil {
			return nil
		}
		s.opError("retry", err)
		if sleep(ctx, time.Second) != nil {
			break
		}
	}
	return err
}

// judge counts completed and lost runs.
func (s *scene) judge(ctx context.Context, runs []*tracked, states map[string]runState) {
	for _, r := range runs {
		st := states[r.id]
		if r.why == "" {
			switch st.status {
			case "completed":
				var out Out
				if err := json.Unmarshal(st.output, &out); err != nil || out.Sum != r.sum {
					r.why = fmt.Sprintf("completed with output %s, want sum %d", truncate(string(st.output), 200), r.sum)
				}
			case "failed", "cancelled":
				r.why = "ended " + st.status
			default:
				r.why = fmt.Sprintf("not settled within %s: %s", s.cfg.SettleTimeout, st.status)
			}
		}
		if r.why == "" {
			s.fig.Completed++
			continue
		}
		s.fig.Lost++
		if len(s.lost) < lostRunsShown {
			s.lost = append(s.lost, s.describe(ctx, r, st))
		}
	}
}

// lostRunsShown is how many lost runs a scenario describes.
const lostRunsShown = 5

// describe says where a lost run stands: its unfinished tasks and its
// turns that are not completed.
func (s *scene) describe(ctx context.Context, r *tracked, st runState) LostRun {
	lr := LostRun{ID: r.id, Workflow: r.workflow, Expected: r.expect, Status: st.status, Why: r.why, Error: truncate(st.errMsg, 200)}
	rows, err := s.pool.Query(ctx, `
		SELECT key || ' ' || status || ' attempt ' || attempt || '/' || max_attempts || ' remaining ' || remaining
		  FROM braid_tasks WHERE run_id = $1 AND status NOT IN ('completed', 'skipped') ORDER BY created_at`, r.id)
	if err == nil {
		for rows.Next() {
			var t string
			if rows.Scan(&t) == nil {
				lr.Tasks = append(lr.Tasks, t)
			}
		}
		rows.Close()
	}
	rows, err = s.pool.Query(ctx, `
		SELECT t.key || ' job ' || j.id || ' ' || j.state || ' attempt ' || j.attempt || '/' || j.max_attempts
		  FROM river_job j JOIN braid_tasks t ON braid_turn_task(j.unique_key, j.args) = t.id
		 WHERE j.kind = 'braid_task' AND t.run_id = $1 AND j.state <> 'completed' ORDER BY j.id`, r.id)
	if err == nil {
		for rows.Next() {
			var t string
			if rows.Scan(&t) == nil {
				lr.Turns = append(lr.Turns, t)
			}
		}
		rows.Close()
	}
	return lr
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func round(x float64) float64 {
	return float64(int64(x*100+0.5)) / 100
}
