package workflow

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
)

// TurnRun is the run and task a turn job (kind TaskKind) belongs to.
type TurnRun struct {
	RunID    string `json:"run_id"`
	TaskID   string `json:"task_id"`
	Workflow string `json:"workflow"`
}

// TurnRuns finds the run of each turn job among jobs, keyed by job ID.
// Jobs of other kinds, and turn jobs whose task no longer exists (its run
// was deleted by retention), have no entry. Operators use it to show a dead
// turn job with its run, and to retry the run rather than the bare job: a
// turn job retried alone would find its task failed and do nothing.
func TurnRuns(ctx context.Context, db Querier, jobs []*rivertype.JobRow) (map[int64]TurnRun, error) {
	byTask := map[uuid.UUID][]int64{}
	var taskIDs []uuid.UUID
	for _, j := range jobs {
		if j == nil || j.Kind != TaskKind {
			continue
		}
		var args taskArgs
		if len(j.UniqueKey) != len(uuid.UUID{}) && json.Unmarshal(j.EncodedArgs, &args) != nil {
			continue
		}
		id, err := turnTask(j, args)
		if err != nil {
			continue
		}
		if _, seen := byTask[id]; !seen {
			taskIDs = append(taskIDs, id)
		}
		byTask[id] = append(byTask[id], j.ID)
	}
	out := make(map[int64]TurnRun, len(taskIDs))
	if len(taskIDs) == 0 {
		return out, nil
	}
	rows, err := db.Query(ctx, `SELECT id, run_id, workflow FROM braid_tasks WHERE id = ANY($1)`, taskIDs)
	if err != nil {
		return nil, fmt.Errorf("workflow: runs of turn jobs: %w", err)
	}
	type found struct {
		task, run uuid.UUID
		workflow  string
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (found, error) {
		var f found
		return f, r.Scan(&f.task, &f.run, &f.workflow)
	})
	if err != nil {
		return nil, fmt.Errorf("workflow: runs of turn jobs: %w", err)
	}
	for _, f := range list {
		for _, jobID := range byTask[f.task] {
			out[jobID] = TurnRun{RunID: f.run.String(), TaskID: f.task.String(), Workflow: f.workflow}
		}
	}
	return out, nil
}
