-- A run that retention deletes over several transactions, one that holds
-- more tasks than one of its transactions deletes, is marked first:
-- Retry, which would find some of its tasks gone, refuses it from then on.

-- +goose Up
-- +goose StatementBegin
ALTER TABLE braid_runs ADD COLUMN deleting boolean NOT NULL DEFAULT false;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
-- A run still marked has lost some of its tasks already; without its mark
-- an earlier engine's Retry would resume it as if whole. Its delete, which
-- retention began, ends here (its tasks, steps, signals and published
-- state go with it; its finished turn jobs are left to River's cleaner).
DELETE FROM braid_runs WHERE deleting;
ALTER TABLE braid_runs DROP COLUMN deleting;
-- +goose StatementEnd
