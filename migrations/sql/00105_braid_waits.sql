-- When a task last began waiting on its children, set as it suspends: the
-- start of the span of the wait, which the batch that releases the task
-- records. NULL when its last suspension waited on a delay, whose step
-- keeps its own created_at.

-- +goose Up
-- +goose StatementBegin
ALTER TABLE braid_tasks ADD COLUMN waiting_since timestamptz;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
ALTER TABLE braid_tasks DROP COLUMN waiting_since;
-- +goose StatementEnd
