-- A run that retention deletes over several transactions, one that holds
-- more tasks than one of its transactions deletes, is marked first:
-- Retry, which would find some of its tasks gone, refuses it from then on.

-- +goose Up
-- +goose StatementBegin
ALTER TABLE braid_runs ADD COLUMN deleting boolean NOT NULL DEFAULT false;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
ALTER TABLE braid_runs DROP COLUMN deleting;
-- +goose StatementEnd
