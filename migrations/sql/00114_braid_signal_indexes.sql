-- The mailbox's rows by their run and by the wait that took them.
--
-- A run's delete (retention, through ON DELETE CASCADE) finds its signals
-- by run, delivered ones included, which the partial indexes of 00108
-- leave out: without this index it read the whole table once per run.
-- Retry gives back the signals that the waits it forgets took, found by
-- the wait's task and step.

-- +goose Up
-- +goose StatementBegin
CREATE INDEX braid_signals_run_id ON braid_signals (run_id);
CREATE INDEX braid_signals_taken_by ON braid_signals (task_id, step) WHERE task_id IS NOT NULL;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DROP INDEX braid_signals_taken_by;
DROP INDEX braid_signals_run_id;
-- +goose StatementEnd
