package migrations_test

import (
	"context"
	"testing"

	"github.com/braidflow/braid/migrations"
	"github.com/braidflow/braid/testutil"
)

// TestRunDeletingDownFinishesTheDeletesItMarked: version 113 marks a run
// that retention deletes over several transactions, some of its tasks
// already gone, so that Retry refuses it. Its Down drops the mark; a run
// still marked then would look whole to the engine of version 112, whose
// Retry would resume it without the tasks retention took (a Map starting
// again the children it no longer finds). So the Down deletes the runs it
// finds marked, as retention was doing, and keeps every other run.
func TestRunDeletingDownFinishesTheDeletesItMarked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testutil.DB(t)
	for _, q := range []string{
		`INSERT INTO braid_runs (id, workflow, status, input, finished_at, deleting) VALUES
		   ('00000000-0000-0000-0000-000000000001', 'w', 'failed', '{}', now() - interval '8 days', true),
		   ('00000000-0000-0000-0000-000000000002', 'w', 'failed', '{}', now() - interval '8 days', false)`,
		`INSERT INTO braid_tasks (id, run_id, key, workflow, status, input, max_attempts) VALUES
		   ('00000000-0000-0000-0000-0000000000a1', '00000000-0000-0000-0000-000000000001', 'root', 'w', 'failed', '{}', 1),
		   ('00000000-0000-0000-0000-0000000000a2', '00000000-0000-0000-0000-000000000002', 'root', 'w', 'failed', '{}', 1)`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	m, err := migrations.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.DownTo(ctx, 112); err != nil {
		t.Fatal(err)
	}
	var marked, other int
	if err := pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE id = '00000000-0000-0000-0000-000000000001'),
		       count(*) FILTER (WHERE id = '00000000-0000-0000-0000-000000000002')
		  FROM braid_runs`).Scan(&marked, &other); err != nil {
		t.Fatal(err)
	}
	if marked != 0 {
		t.Errorf("the run marked as being deleted is still there after the Down of 113, unmarked: an engine of 112 would retry it with tasks missing")
	}
	if other != 1 {
		t.Errorf("the Down of 113 deleted a run that was not marked")
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
}
