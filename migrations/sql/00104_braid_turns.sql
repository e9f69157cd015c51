-- Indexes for the reconciler, Cancel, Retry and retention.

-- +goose Up
-- +goose StatementBegin

-- A task's turn jobs, by task ID: Cancel and Retry find a run's live turns,
-- and the reconciler asks whether a task still has one.
CREATE INDEX braid_river_job_task ON river_job ((args->>'task_id')) WHERE kind = 'braid_task';

-- The reconciler's candidates: tasks that should have a live turn. As with
-- braid_tasks_parent_unfinished (00102), the predicate carries a clause that
-- a lookup by id does not imply (updated_at IS NOT NULL; the reconciler's
-- updated_at < … does imply it), so fenced transitions of one task
-- (WHERE id = $1 AND status = 'running') keep to the primary key.
CREATE INDEX braid_tasks_live ON braid_tasks (updated_at)
    WHERE status IN ('pending', 'running') AND updated_at IS NOT NULL;

-- Retention: finished runs by the time they finished.
CREATE INDEX braid_runs_finished_at ON braid_runs (finished_at) WHERE status IN ('completed', 'failed', 'cancelled');

-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DROP INDEX braid_runs_finished_at;
DROP INDEX braid_tasks_live;
DROP INDEX braid_river_job_task;
-- +goose StatementEnd
