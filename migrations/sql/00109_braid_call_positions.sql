-- The order of a task's durable calls, so that replay can refuse code that
-- no longer makes the calls its runs recorded.
--
-- Every durable call of a task's code (a step, a delay, a wait on a signal
-- or an event, SetEvent, Go, Map) takes the next position in the task,
-- from 0, on every turn. A step's row keeps the position of its call; a
-- child's row keeps the position of the Go or Map call that started it,
-- and call says which ('go' or 'map': a Map's children share its
-- position). Rows recorded before this migration have no position, and
-- replay checks nothing for them.

-- +goose Up
-- +goose StatementBegin
ALTER TABLE braid_steps ADD COLUMN position integer;
ALTER TABLE braid_tasks ADD COLUMN position integer;
ALTER TABLE braid_tasks ADD COLUMN call text;
ALTER TABLE braid_tasks ADD CONSTRAINT braid_tasks_call CHECK (call IS NULL OR call IN ('go', 'map'));
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
ALTER TABLE braid_tasks DROP CONSTRAINT braid_tasks_call;
ALTER TABLE braid_tasks DROP COLUMN call;
ALTER TABLE braid_tasks DROP COLUMN position;
ALTER TABLE braid_steps DROP COLUMN position;
-- +goose StatementEnd
