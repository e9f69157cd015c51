-- Keep the join's partial index out of lookups by primary key.
--
-- braid_tasks_parent_unfinished serves the join: the unfinished children of
-- a parent. Its predicate (status not final) is implied by every fenced
-- transition of one task (WHERE id = $1 AND status = 'running', …), so the
-- planner may scan the whole partial index instead of the primary key. It
-- does so once statistics say the index is nearly empty, which is the steady
-- state (most tasks finished), while the index still holds the dead entries
-- of a recent fan-out: every turn then reads them all. Requiring
-- parent_task_id IS NOT NULL, which a lookup by id does not imply but every
-- query by parent does, leaves such lookups to the primary key. Root tasks,
-- which have no parent, never belonged in this index anyway.

-- +goose Up
-- +goose StatementBegin
DROP INDEX braid_tasks_parent_unfinished;
CREATE INDEX braid_tasks_parent_unfinished ON braid_tasks (parent_task_id)
    WHERE parent_task_id IS NOT NULL AND status NOT IN ('completed', 'failed', 'cancelled', 'skipped');
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DROP INDEX braid_tasks_parent_unfinished;
CREATE INDEX braid_tasks_parent_unfinished ON braid_tasks (parent_task_id)
    WHERE status NOT IN ('completed', 'failed', 'cancelled', 'skipped');
-- +goose StatementEnd
