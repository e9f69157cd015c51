package chaos

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// integrity counts, over the runs ids, the steps recorded twice, the side
// effects applied more than once, the step bodies that ran again and the
// repeated side effects that their idempotency key refused.
//
// A step is recorded twice when a consumer of its result (a later step in
// the ledger, or the run's output) saw a token other than the one
// braid_steps holds for it, or when the recorded token is not one that an
// execution of the step produced.
func (s *scene) integrity(ctx context.Context, ids []string) error {
	recorded := map[string]string{}
	rows, err := s.pool.Query(ctx, `
		SELECT s.task_id::text || '/' || s.name, coalesce(s.output->>'token', '')
		  FROM braid_steps s JOIN braid_tasks t ON t.id = s.task_id
		 WHERE t.run_id = ANY($1::uuid[]) AND s.kind = 'step' AND s.status = 'completed'`, ids)
	if err != nil {
		return fmt.Errorf("chaos: reading recorded steps: %w", err)
	}
	for rows.Next() {
		var ref, tok string
		if err := rows.Scan(&ref, &tok); err != nil {
			rows.Close()
			return err
		}
		recorded[ref] = tok
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}

	bad := map[string]bool{}
	consumed := func(ref, tok string) {
		if rec, ok := recorded[ref]; !ok || rec != tok {
			bad[ref] = true
		}
	}
	produced := map[string]map[string]bool{}
	executions := 0
	rows, err = s.pool.Query(ctx, `SELECT ref, token, seen_refs, seen_tokens FROM chaos_ledger WHERE run_id = ANY($1::uuid[])`, ids)
	if err != nil {
		return fmt.Errorf("chaos: reading the ledger: %w", err)
	}
	var ref, tok string
	var seenRefs, seenTokens []string
	_, err = pgx.ForEachRow(rows, []any{&ref, &tok, &seenRefs, &seenTokens}, func() error {
		executions++
		if produced[ref] == nil {
			produced[ref] = map[string]bool{}
		}
		produced[ref][tok] = true
		for i := range seenRefs {
			consumed(seenRefs[i], seenTokens[i])
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("chaos: reading the ledger: %w", err)
	}
	s.fig.StepReruns = executions - len(produced)
	for ref, tok := range recorded {
		if !produced[ref][tok] {
			bad[ref] = true
		}
	}

	rows, err = s.pool.Query(ctx, `SELECT output FROM braid_runs WHERE id = ANY($1::uuid[]) AND status = 'completed'`, ids)
	if err != nil {
		return fmt.Errorf("chaos: reading outputs: %w", err)
	}
	var raw []byte
	_, err = pgx.ForEachRow(rows, []any{&raw}, func() error {
		var out Out
		if json.Unmarshal(raw, &out) == nil {
			for _, r := range out.Steps {
				consumed(r.Ref, r.Token)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("chaos: reading outputs: %w", err)
	}
	s.fig.StepsRecordedTwice = len(bad)

	err = s.pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM (SELECT 1 FROM chaos_effects WHERE run_id = ANY($1::uuid[])
		                               GROUP BY run_id, task_key, step HAVING count(*) > 1) d),
		       (SELECT coalesce(sum(refused), 0) FROM chaos_effects WHERE run_id = ANY($1::uuid[]))`, ids).
		Scan(&s.fig.SideEffectsDuplicated, &s.fig.EffectsRefused)
	if err != nil {
		return fmt.Errorf("chaos: reading side effects: %w", err)
	}
	return nil
}
