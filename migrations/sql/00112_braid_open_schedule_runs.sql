-- The scheduler's overlap check for workflow targets. A schedule starts
-- each run with the idempotency key "schedule:<name>:<slot>", so the
-- unfinished runs of one schedule are a range of this small index, which
-- holds only the unfinished runs started with a key. text_pattern_ops
-- compares bytes, so the range holds whatever the database's collation.

-- +goose Up
-- +goose StatementBegin
CREATE INDEX braid_runs_open_keys ON braid_runs (idempotency_key text_pattern_ops)
    WHERE idempotency_key IS NOT NULL AND status IN ('pending', 'running', 'waiting');
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DROP INDEX braid_runs_open_keys;
-- +goose StatementEnd
