package admin

import (
	"context"
	"testing"

	"github.com/riverqueue/river/rivertype"

	"github.com/braidflow/braid/workflow"
)

// TestStaleTurnJobIsNotRetriedAlone gives changeState a turn job read as
// retryable that has since been discarded with its run failed, as a bulk
// request may after working through the jobs before it: the turn job is
// not moved to available alone; its run is retried.
func TestStaleTurnJobIsNotRetriedAlone(t *testing.T) {
	t.Parallel()
	w := newRunsWorld(t)
	ctx := context.Background()
	var id int64
	if err := w.pool.QueryRow(ctx, `SELECT j.id FROM river_job j JOIN braid_tasks t ON braid_turn_task(j.unique_key, j.args) = t.id
		WHERE j.kind = $1 AND t.run_id = $2 AND j.state = 'discarded' ORDER BY j.id DESC LIMIT 1`, workflow.TaskKind, w.declined).Scan(&id); err != nil {
		t.Fatal(err)
	}
	job, err := w.srv.jobByID(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	runs, err := w.srv.turnRuns(ctx, []*rivertype.JobRow{job})
	if err != nil {
		t.Fatal(err)
	}
	stale := *job
	stale.State = rivertype.JobStateRetryable // as read before its last attempt failed
	w.chargeFails.Store(false)
	_, retried, err := w.srv.changeState(ctx, &stale, runs[id], rivertype.JobStateAvailable)
	if err != nil {
		t.Fatal(err)
	}
	if retried != w.declined {
		t.Errorf("changeState retried run %q, want the turn job's run %s retried, not the job alone", retried, w.declined)
	}
	w.waitStatus(t, w.declined, "completed")
}
