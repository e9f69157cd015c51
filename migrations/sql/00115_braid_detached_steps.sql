-- A detached child's start is recorded in its parent's history, as a step
-- of kind 'detached' whose output is the child's run ID: a parent that
-- outlives the retention of its child's run then knows, from its own
-- records, that the child was started, and does not start it again.

-- +goose Up
-- +goose StatementBegin
ALTER TABLE braid_steps DROP CONSTRAINT braid_steps_kind;
ALTER TABLE braid_steps ADD CONSTRAINT braid_steps_kind
    CHECK (kind IN ('step', 'delay', 'child', 'signal', 'event', 'set_event', 'detached'));
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DELETE FROM braid_steps WHERE kind = 'detached';
ALTER TABLE braid_steps DROP CONSTRAINT braid_steps_kind;
ALTER TABLE braid_steps ADD CONSTRAINT braid_steps_kind
    CHECK (kind IN ('step', 'delay', 'child', 'signal', 'event', 'set_event'));
-- +goose StatementEnd
