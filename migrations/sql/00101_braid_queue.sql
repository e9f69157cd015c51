-- The queue package's additions: the heartbeat interval a job kind
-- declared, stored with an attempt's heartbeats so that the heartbeat
-- rescuer, in whatever process holds the braid:maintenance lease, judges
-- that attempt by its own interval.

-- +goose Up
-- +goose StatementBegin
ALTER TABLE braid_job_progress ADD COLUMN heartbeat_interval interval;
ALTER TABLE braid_job_progress ADD CONSTRAINT braid_job_progress_heartbeat_interval_positive
    CHECK (heartbeat_interval IS NULL OR heartbeat_interval > interval '0');
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
ALTER TABLE braid_job_progress DROP CONSTRAINT braid_job_progress_heartbeat_interval_positive;
ALTER TABLE braid_job_progress DROP COLUMN heartbeat_interval;
-- +goose StatementEnd
