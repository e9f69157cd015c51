-- braid's own tables. River's schema comes first (versions 1-8, rendered by
-- migrations/internal/rivergen); everything here is prefixed braid_.

-- +goose Up
-- +goose StatementBegin

-- A run is one execution of a workflow.
CREATE TABLE braid_runs (
    id              uuid        PRIMARY KEY,
    workflow        text        NOT NULL,
    version         integer     NOT NULL DEFAULT 1,
    status          text        NOT NULL DEFAULT 'pending',
    input           jsonb       NOT NULL,
    output          jsonb,
    error           jsonb,
    idempotency_key text,
    trace_parent    text,
    queue           text        NOT NULL DEFAULT 'default',
    priority        smallint    NOT NULL DEFAULT 3,
    created_at      timestamptz NOT NULL DEFAULT now(),
    started_at      timestamptz,
    finished_at     timestamptz,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT braid_runs_workflow_length CHECK (char_length(workflow) BETWEEN 1 AND 200),
    CONSTRAINT braid_runs_status CHECK (status IN ('pending', 'running', 'waiting', 'completed', 'failed', 'cancelled')),
    CONSTRAINT braid_runs_idempotency_key_length CHECK (idempotency_key IS NULL OR char_length(idempotency_key) BETWEEN 1 AND 500),
    CONSTRAINT braid_runs_priority CHECK (priority BETWEEN 1 AND 4)
);

CREATE UNIQUE INDEX braid_runs_idempotency_key ON braid_runs (idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX braid_runs_status_created_at ON braid_runs (status, created_at DESC);
CREATE INDEX braid_runs_workflow_created_at ON braid_runs (workflow, created_at DESC);
CREATE INDEX braid_runs_created_at ON braid_runs (created_at DESC);

-- A task is one invocation of a durable function inside a run: the root, a
-- child spawned by another task, or a DAG node. It executes in turns, each
-- one River job of kind braid_task.
CREATE TABLE braid_tasks (
    id              uuid        PRIMARY KEY,
    run_id          uuid        NOT NULL REFERENCES braid_runs (id) ON DELETE CASCADE,
    parent_task_id  uuid        REFERENCES braid_tasks (id) ON DELETE CASCADE,
    key             text        NOT NULL,
    workflow        text        NOT NULL,
    status          text        NOT NULL DEFAULT 'pending',
    input           jsonb       NOT NULL,
    output          jsonb,
    error           jsonb,
    attempt         integer     NOT NULL DEFAULT 0,
    max_attempts    integer     NOT NULL DEFAULT 25,
    remaining       integer     NOT NULL DEFAULT 0,
    turns           integer     NOT NULL DEFAULT 0,
    queue           text        NOT NULL DEFAULT 'default',
    priority        smallint    NOT NULL DEFAULT 3,
    job_id          bigint,
    suspended_span  text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    started_at      timestamptz,
    finished_at     timestamptz,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT braid_tasks_key_length CHECK (char_length(key) BETWEEN 1 AND 500),
    CONSTRAINT braid_tasks_status CHECK (status IN ('blocked', 'pending', 'running', 'waiting', 'completed', 'failed', 'cancelled', 'skipped')),
    CONSTRAINT braid_tasks_remaining_non_negative CHECK (remaining >= 0),
    CONSTRAINT braid_tasks_max_attempts_positive CHECK (max_attempts >= 1),
    CONSTRAINT braid_tasks_priority CHECK (priority BETWEEN 1 AND 4)
);

-- The task's key is unique among its siblings; a run has one root.
CREATE UNIQUE INDEX braid_tasks_parent_key ON braid_tasks (parent_task_id, key) WHERE parent_task_id IS NOT NULL;
CREATE UNIQUE INDEX braid_tasks_root ON braid_tasks (run_id) WHERE parent_task_id IS NULL;
CREATE INDEX braid_tasks_run_id ON braid_tasks (run_id);
-- Serves the join: the unfinished children of a parent.
CREATE INDEX braid_tasks_parent_unfinished ON braid_tasks (parent_task_id)
    WHERE status NOT IN ('completed', 'failed', 'cancelled', 'skipped');

-- A step is a memoized unit inside a task: a recorded result (kind step), a
-- durable timer (kind delay) or a spawned child (kind child).
CREATE TABLE braid_steps (
    task_id         uuid        NOT NULL REFERENCES braid_tasks (id) ON DELETE CASCADE,
    name            text        NOT NULL,
    kind            text        NOT NULL,
    status          text        NOT NULL,
    output          jsonb,
    error           jsonb,
    attempts        integer     NOT NULL DEFAULT 1,
    resume_at       timestamptz,
    child_task_id   uuid,
    started_at      timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz,
    PRIMARY KEY (task_id, name),
    CONSTRAINT braid_steps_name_length CHECK (char_length(name) BETWEEN 1 AND 500),
    CONSTRAINT braid_steps_kind CHECK (kind IN ('step', 'delay', 'child')),
    CONSTRAINT braid_steps_status CHECK (status IN ('retrying', 'completed', 'failed', 'waiting', 'fired', 'cancelled')),
    CONSTRAINT braid_steps_delay_resume_at CHECK (kind <> 'delay' OR resume_at IS NOT NULL)
);

-- The delay processor's queue: delays that are still waiting, by due time.
CREATE INDEX braid_steps_waiting_delays ON braid_steps (resume_at) WHERE kind = 'delay' AND status = 'waiting';

-- Leases: named, time-bounded ownership with a fencing generation.
CREATE TABLE braid_leases (
    name            text        PRIMARY KEY,
    holder          text        NOT NULL,
    generation      bigint      NOT NULL DEFAULT 1,
    acquired_at     timestamptz NOT NULL DEFAULT now(),
    renewed_at      timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz NOT NULL,
    metadata        jsonb       NOT NULL DEFAULT '{}',
    CONSTRAINT braid_leases_name_length CHECK (char_length(name) BETWEEN 1 AND 200),
    CONSTRAINT braid_leases_holder_length CHECK (char_length(holder) BETWEEN 1 AND 200),
    CONSTRAINT braid_leases_generation_positive CHECK (generation >= 1)
);

-- Cron schedules: durable rows that start a workflow or enqueue a job.
CREATE TABLE braid_schedules (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name            text        NOT NULL UNIQUE,
    description     text        NOT NULL DEFAULT '',
    expression      text        NOT NULL,
    time_zone       text        NOT NULL DEFAULT 'UTC',
    target_type     text        NOT NULL,
    target          text        NOT NULL,
    args            jsonb       NOT NULL DEFAULT '{}',
    queue           text        NOT NULL DEFAULT 'default',
    priority        smallint    NOT NULL DEFAULT 3,
    max_attempts    integer,
    enabled         boolean     NOT NULL DEFAULT true,
    overlap_policy  text        NOT NULL DEFAULT 'skip',
    catch_up_policy text        NOT NULL DEFAULT 'once',
    next_run_at     timestamptz NOT NULL,
    last_run_at     timestamptz,
    last_job_id     bigint,
    last_run_id     uuid,
    created_by      text        NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT braid_schedules_name_length CHECK (char_length(name) BETWEEN 1 AND 200),
    CONSTRAINT braid_schedules_target_type CHECK (target_type IN ('job', 'workflow')),
    CONSTRAINT braid_schedules_target_length CHECK (char_length(target) BETWEEN 1 AND 200),
    CONSTRAINT braid_schedules_priority CHECK (priority BETWEEN 1 AND 4),
    CONSTRAINT braid_schedules_overlap_policy CHECK (overlap_policy IN ('skip', 'allow')),
    CONSTRAINT braid_schedules_catch_up_policy CHECK (catch_up_policy IN ('once', 'skip', 'all'))
);

CREATE INDEX braid_schedules_due ON braid_schedules (next_run_at) WHERE enabled;

-- Recurring jobs: one durable row per (kind, entity key), enabled and
-- disabled rather than created and deleted.
CREATE TABLE braid_recurring (
    id                   bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind                 text        NOT NULL,
    key                  text        NOT NULL,
    args                 jsonb       NOT NULL DEFAULT '{}',
    queue                text        NOT NULL DEFAULT 'default',
    priority             smallint    NOT NULL DEFAULT 3,
    enabled              boolean     NOT NULL DEFAULT true,
    next_run_at          timestamptz NOT NULL,
    running_since        timestamptz,
    job_id               bigint,
    last_run_at          timestamptz,
    last_error           text,
    consecutive_failures integer     NOT NULL DEFAULT 0,
    dead_at              timestamptz,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT braid_recurring_kind_key UNIQUE (kind, key),
    CONSTRAINT braid_recurring_kind_length CHECK (char_length(kind) BETWEEN 1 AND 200),
    CONSTRAINT braid_recurring_key_length CHECK (char_length(key) BETWEEN 1 AND 500),
    CONSTRAINT braid_recurring_priority CHECK (priority BETWEEN 1 AND 4),
    CONSTRAINT braid_recurring_failures_non_negative CHECK (consecutive_failures >= 0)
);

-- The scheduler's claim: enabled, live rows by due time.
CREATE INDEX braid_recurring_due ON braid_recurring (next_run_at) WHERE enabled AND dead_at IS NULL;

-- Progress and heartbeat of running River jobs, keyed by job ID.
CREATE TABLE braid_job_progress (
    job_id          bigint      PRIMARY KEY REFERENCES river_job (id) ON DELETE CASCADE,
    kind            text        NOT NULL,
    attempt         smallint    NOT NULL DEFAULT 0,
    percent         smallint,
    message         text,
    heartbeat_at    timestamptz,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT braid_job_progress_percent CHECK (percent IS NULL OR percent BETWEEN 0 AND 100)
);

CREATE INDEX braid_job_progress_heartbeat_at ON braid_job_progress (heartbeat_at) WHERE heartbeat_at IS NOT NULL;

-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DROP TABLE braid_job_progress;
DROP TABLE braid_recurring;
DROP TABLE braid_schedules;
DROP TABLE braid_leases;
DROP TABLE braid_steps;
DROP TABLE braid_tasks;
DROP TABLE braid_runs;
-- +goose StatementEnd
