-- The scheduler's overlap check: the unfinished fires of one schedule.
--
-- A schedule's jobs carry its name in their metadata (braid_schedule); the
-- unfinished ones are a lookup of this small index, which holds only the
-- unfinished jobs that schedules inserted.
--
-- A schedule starts each run with the idempotency key
-- "schedule:<name>:<slot>", so the unfinished runs of one schedule are a
-- range of the second index, which holds only the unfinished runs started
-- with a key. text_pattern_ops compares bytes, so the range holds whatever
-- the database's collation.

-- +goose Up
-- +goose StatementBegin
CREATE INDEX braid_river_job_open_schedule ON river_job ((metadata->>'braid_schedule'))
    WHERE metadata ? 'braid_schedule' AND state NOT IN ('completed', 'cancelled', 'discarded');
CREATE INDEX braid_runs_open_keys ON braid_runs (idempotency_key text_pattern_ops)
    WHERE idempotency_key IS NOT NULL AND status IN ('pending', 'running', 'waiting');
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DROP INDEX braid_runs_open_keys;
DROP INDEX braid_river_job_open_schedule;
-- +goose StatementEnd
