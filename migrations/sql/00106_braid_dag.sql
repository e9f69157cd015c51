-- DAG nodes. A DAG run's nodes are the children of its root task, all
-- created when the run starts: a node without dependencies pending with
-- its first turn, the others blocked with remaining set to the number of
-- their dependencies. dependents lists the nodes a node releases when it
-- is final; it is NULL for a task that is not a DAG node, which is how the
-- settle path tells the two apart. skip_reason says why a skipped node did
-- not run: the condition that was false, the dependencies that were all
-- skipped, or the node whose failure failed the DAG.

-- +goose Up
-- +goose StatementBegin
ALTER TABLE braid_tasks ADD COLUMN dependents uuid[];
ALTER TABLE braid_tasks ADD COLUMN skip_reason text;
-- An on-failure node waits for every other node of its DAG and runs only
-- if the DAG failed.
ALTER TABLE braid_tasks ADD COLUMN on_failure boolean NOT NULL DEFAULT false;
-- The reconciler's look for nodes left undecided: blocked with nothing
-- left to wait for, which happens only when the process that settled
-- their last dependency did not know their DAG.
CREATE INDEX braid_tasks_undecided_nodes ON braid_tasks (updated_at)
    WHERE status = 'blocked' AND remaining = 0 AND dependents IS NOT NULL;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DROP INDEX braid_tasks_undecided_nodes;
ALTER TABLE braid_tasks DROP COLUMN on_failure;
ALTER TABLE braid_tasks DROP COLUMN skip_reason;
ALTER TABLE braid_tasks DROP COLUMN dependents;
-- +goose StatementEnd
