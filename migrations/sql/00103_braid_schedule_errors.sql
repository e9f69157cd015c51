-- The scheduler's record of failed fires. A slot whose job or run cannot be
-- started (a deadlock, a dropped connection, an unknown target) stays due:
-- last_error and last_error_at say why, fire_failures counts the failures
-- in a row and retry_at, when set, holds the slot back until the next try,
-- so a schedule that keeps failing backs off instead of spinning. A
-- successful fire clears all four.

-- +goose Up
-- +goose StatementBegin
ALTER TABLE braid_schedules
    ADD COLUMN last_error    text,
    ADD COLUMN last_error_at timestamptz,
    ADD COLUMN fire_failures integer NOT NULL DEFAULT 0,
    ADD COLUMN retry_at      timestamptz,
    ADD CONSTRAINT braid_schedules_fire_failures_non_negative CHECK (fire_failures >= 0);
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
ALTER TABLE braid_schedules
    DROP CONSTRAINT braid_schedules_fire_failures_non_negative,
    DROP COLUMN retry_at,
    DROP COLUMN fire_failures,
    DROP COLUMN last_error_at,
    DROP COLUMN last_error;
-- +goose StatementEnd
