-- The one clock that braid decides by (design invariant 8).
--
-- Every time braid reads to decide something (a delay or a wait's
-- timeout is due, a run's deadline passed, a schedule's slot or a
-- recurring job came due, a lease expired, a task went stale, retention's
-- cutoff) and every time it records on its own rows is braid_now(), the
-- transaction's time, or braid_clock(), the time of the statement, where
-- a long transaction must not read a stale time. River's own times
-- (river_job) stay on River's clock, now().
--
-- Both are single-SELECT SQL functions, which PostgreSQL inlines into the
-- statements that call them: in production they are now() and
-- clock_timestamp(), at no cost. A test kit (testutil.Kit) replaces both,
-- in its own database only, with a time that stands still until the test
-- moves it forward; replacing a function invalidates the cached plans
-- that inlined it.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION braid_now() RETURNS timestamptz
    LANGUAGE sql STABLE PARALLEL SAFE AS $$ SELECT now() $$;
CREATE FUNCTION braid_clock() RETURNS timestamptz
    LANGUAGE sql VOLATILE PARALLEL SAFE AS $$ SELECT clock_timestamp() $$;

-- The times braid's rows record by default, on the same clock.
ALTER TABLE braid_runs ALTER COLUMN created_at SET DEFAULT braid_now(), ALTER COLUMN updated_at SET DEFAULT braid_now();
ALTER TABLE braid_tasks ALTER COLUMN created_at SET DEFAULT braid_now(), ALTER COLUMN updated_at SET DEFAULT braid_now();
ALTER TABLE braid_steps ALTER COLUMN created_at SET DEFAULT braid_now();
ALTER TABLE braid_leases ALTER COLUMN acquired_at SET DEFAULT braid_now(), ALTER COLUMN renewed_at SET DEFAULT braid_now();
ALTER TABLE braid_schedules ALTER COLUMN created_at SET DEFAULT braid_now(), ALTER COLUMN updated_at SET DEFAULT braid_now();
ALTER TABLE braid_recurring ALTER COLUMN created_at SET DEFAULT braid_now(), ALTER COLUMN updated_at SET DEFAULT braid_now();
ALTER TABLE braid_signals ALTER COLUMN created_at SET DEFAULT braid_now();
ALTER TABLE braid_events ALTER COLUMN published_at SET DEFAULT braid_now();
ALTER TABLE braid_run_events ALTER COLUMN created_at SET DEFAULT braid_now(), ALTER COLUMN updated_at SET DEFAULT braid_now();
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
ALTER TABLE braid_runs ALTER COLUMN created_at SET DEFAULT now(), ALTER COLUMN updated_at SET DEFAULT now();
ALTER TABLE braid_tasks ALTER COLUMN created_at SET DEFAULT now(), ALTER COLUMN updated_at SET DEFAULT now();
ALTER TABLE braid_steps ALTER COLUMN created_at SET DEFAULT now();
ALTER TABLE braid_leases ALTER COLUMN acquired_at SET DEFAULT now(), ALTER COLUMN renewed_at SET DEFAULT now();
ALTER TABLE braid_schedules ALTER COLUMN created_at SET DEFAULT now(), ALTER COLUMN updated_at SET DEFAULT now();
ALTER TABLE braid_recurring ALTER COLUMN created_at SET DEFAULT now(), ALTER COLUMN updated_at SET DEFAULT now();
ALTER TABLE braid_signals ALTER COLUMN created_at SET DEFAULT now();
ALTER TABLE braid_events ALTER COLUMN published_at SET DEFAULT now();
ALTER TABLE braid_run_events ALTER COLUMN created_at SET DEFAULT now(), ALTER COLUMN updated_at SET DEFAULT now();
DROP FUNCTION braid_clock();
DROP FUNCTION braid_now();
-- +goose StatementEnd
