-- Run deadlines. A run started with a timeout (StartOpts.Timeout, or its
-- definition's WithRunTimeout) keeps it in timeout and its deadline, the
-- database's now() plus the timeout, in deadline_at; both are NULL for a
-- run without one. Retry counts a fresh deadline from the retry with the
-- same timeout. The delay processor cancels the unfinished runs whose
-- deadline has passed, and sleeps until the earliest one as it does until
-- the earliest delay.

-- +goose Up
-- +goose StatementBegin
ALTER TABLE braid_runs ADD COLUMN timeout interval;
ALTER TABLE braid_runs ADD COLUMN deadline_at timestamptz;
ALTER TABLE braid_runs ADD CONSTRAINT braid_runs_deadline
    CHECK ((timeout IS NULL) = (deadline_at IS NULL) AND (timeout IS NULL OR timeout > interval '0'));
-- The delay processor's look for due deadlines, and for the earliest one:
-- unfinished runs that have a deadline.
CREATE INDEX braid_runs_deadline_at ON braid_runs (deadline_at)
    WHERE deadline_at IS NOT NULL AND status IN ('pending', 'running', 'waiting');
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DROP INDEX braid_runs_deadline_at;
ALTER TABLE braid_runs DROP CONSTRAINT braid_runs_deadline;
ALTER TABLE braid_runs DROP COLUMN deadline_at;
ALTER TABLE braid_runs DROP COLUMN timeout;
-- +goose StatementEnd
