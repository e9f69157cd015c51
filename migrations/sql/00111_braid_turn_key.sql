-- A turn job names its task in its unique key, not in its args.
--
-- River indexes every key and every value of a job's args (and metadata)
-- in a GIN index, and PostgreSQL never deletes an entry from a GIN index's
-- key tree: vacuum empties an entry's list of rows but keeps the entry. A
-- value that no other row shares, such as a task's ID, therefore stays in
-- river_job_args_index after its job is deleted, and the index grows with
-- every task ever run, whatever the retention. So a turn job's args hold
-- only its workflow's name, and its unique key (which River uses to allow
-- at most one live turn per task, design invariant 1) is the 16 bytes of
-- its task's ID. River's unique index on that key is a B-tree, whose empty
-- pages vacuum recycles.
--
-- For the same reason, a turn's span link (the span that explains why the
-- turn runs, such as the parent's turn that started a child) is kept on
-- its task, in turn_link, and no longer in the turn job's metadata, which
-- River indexes the same way: {"job": the turn job's ID, "traceparent",
-- "kind"}. It holds for that job only; a later turn of the task without a
-- link ignores it.
--
-- braid_turn_task reads a turn job's task. Turn jobs written before this
-- migration have a key River derived from their args, and keep their task
-- in args.task_id; the function reads either, and gives NULL for a job
-- that names no valid task. It is a single-SELECT SQL function, so
-- PostgreSQL inlines it, and the index below serves the statements that
-- call it.
--
-- Upgrading: stop every process that runs an earlier braid before this
-- migration runs, and start the new ones after it. An earlier engine
-- cannot read a turn job of the new form (it would cancel it), nor find
-- one by its task; this one reads both forms.

-- +goose Up
-- +goose StatementBegin
ALTER TABLE braid_tasks ADD COLUMN turn_link jsonb;

CREATE FUNCTION braid_turn_task(unique_key bytea, args jsonb) RETURNS uuid
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN length(unique_key) = 16 THEN encode(unique_key, 'hex')::uuid
        WHEN args->>'task_id' ~ '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$'
            THEN (args->>'task_id')::uuid
    END $$;

-- Live turn jobs move to the new form now, so that the one-live-turn key
-- covers them and a turn inserted from now on. Their old keys, derived
-- from args that named the task, were unique per task already, so the new
-- ones are too. Finished ones, and a job inserted without a key, keep
-- their form until River's job cleaner deletes them.
-- Their span links move to their tasks first.
UPDATE braid_tasks t
   SET turn_link = jsonb_build_object('job', j.id) || (j.metadata->'braid_link')
  FROM river_job j
 WHERE j.kind = 'braid_task' AND j.unique_key IS NOT NULL AND j.unique_states IS NOT NULL
   AND j.state IN ('available', 'pending', 'running', 'retryable', 'scheduled')
   AND jsonb_typeof(j.metadata->'braid_link') = 'object'
   AND t.id = braid_turn_task(j.unique_key, j.args);
UPDATE river_job
   SET unique_key = uuid_send((args->>'task_id')::uuid), args = args - 'task_id', metadata = metadata - 'braid_link'
 WHERE kind = 'braid_task' AND unique_key IS NOT NULL AND unique_states IS NOT NULL
   AND state IN ('available', 'pending', 'running', 'retryable', 'scheduled')
   AND args->>'task_id' ~ '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$';

-- A task's turn jobs, by task: Cancel and Retry find a run's live turns,
-- and the reconciler asks whether a task still has one (was on
-- args->>'task_id', 00104).
DROP INDEX braid_river_job_task;
CREATE INDEX braid_river_job_task ON river_job (braid_turn_task(unique_key, args)) WHERE kind = 'braid_task';
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DROP INDEX braid_river_job_task;
-- The live turn jobs of the new form take their links back into metadata.
UPDATE river_job j
   SET metadata = j.metadata || jsonb_build_object('braid_link', t.turn_link - 'job')
  FROM braid_tasks t
 WHERE j.kind = 'braid_task' AND length(j.unique_key) = 16
   AND j.state IN ('available', 'pending', 'running', 'retryable', 'scheduled')
   AND t.id = encode(j.unique_key, 'hex')::uuid AND (t.turn_link->>'job')::bigint = j.id;
UPDATE river_job
   SET args = args || jsonb_build_object('task_id', encode(unique_key, 'hex')::uuid::text),
       -- the key River derives from such args (UniqueOpts.ByArgs): the
       -- kind and the args as Go's encoding/json writes them, compact,
       -- keys sorted, with <, >, & and U+2028/U+2029 escaped
       unique_key = sha256(convert_to('&kind=braid_task&args={"task_id":"' || encode(unique_key, 'hex')::uuid::text
                                      || '","workflow":'
                                      || replace(replace(replace(replace(replace(to_json(args->>'workflow')::text,
                                             '<', '\u003c'), '>', '\u003e'), '&', '\u0026'), U&'\2028', '\u2028'), U&'\2029', '\u2029')
                                      || '}', 'UTF8'))
 WHERE kind = 'braid_task' AND length(unique_key) = 16;
CREATE INDEX braid_river_job_task ON river_job ((args->>'task_id')) WHERE kind = 'braid_task';
DROP FUNCTION braid_turn_task(bytea, jsonb);
ALTER TABLE braid_tasks DROP COLUMN turn_link;
-- +goose StatementEnd
