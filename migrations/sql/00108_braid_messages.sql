-- Messages to and from running workflows.
--
-- A wait on a message is a step, like a delay: kind signal (a signal sent
-- to the task's run, by name) or event (an event published on a topic,
-- matched by a filter). It is recorded waiting when its task suspends,
-- with resume_at set when the wait has a timeout; exactly one wake source
-- settles it: the message sets it completed with the payload as output,
-- or the delay processor sets it fired when its timeout passes. wait_on is
-- the signal's name or the topic, wait_run the run whose mailbox a signal
-- wait reads, wait_filter an event wait's filter, and woken_by the W3C
-- traceparent of the send or publish that settled it.
--
-- braid_signals is each run's mailbox: signals in the order they were
-- sent, kept until a wait takes them (delivered_at, task_id, step).
-- braid_events keeps what was published on each topic, so that a wait
-- recorded after a publish that followed the start of its turn still sees
-- it; retention deletes old events. braid_run_events is the state a run
-- publishes with SetEvent, one value per key.

-- +goose Up
-- +goose StatementBegin
ALTER TABLE braid_steps DROP CONSTRAINT braid_steps_kind;
ALTER TABLE braid_steps ADD CONSTRAINT braid_steps_kind
    CHECK (kind IN ('step', 'delay', 'child', 'signal', 'event', 'set_event'));
ALTER TABLE braid_steps ADD COLUMN wait_on text;
ALTER TABLE braid_steps ADD COLUMN wait_run uuid;
ALTER TABLE braid_steps ADD COLUMN wait_filter text;
ALTER TABLE braid_steps ADD COLUMN woken_by text;
ALTER TABLE braid_steps ADD CONSTRAINT braid_steps_message_wait
    CHECK (kind NOT IN ('signal', 'event') OR wait_on IS NOT NULL);

-- The delay processor's queue: every waiting step with a due time, delays
-- and the timeouts of waits on messages alike.
CREATE INDEX braid_steps_timers ON braid_steps (resume_at)
    WHERE status = 'waiting' AND resume_at IS NOT NULL;
DROP INDEX braid_steps_waiting_delays;

-- A send finds the waits on its signal in its run; a publish, the waits on
-- its topic, and no other rows.
CREATE INDEX braid_steps_signal_waits ON braid_steps (wait_run, wait_on, created_at)
    WHERE kind = 'signal' AND status = 'waiting';
CREATE INDEX braid_steps_event_waits ON braid_steps (wait_on, created_at)
    WHERE kind = 'event' AND status = 'waiting';

CREATE TABLE braid_signals (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id          uuid        NOT NULL REFERENCES braid_runs (id) ON DELETE CASCADE,
    name            text        NOT NULL,
    payload         jsonb       NOT NULL,
    idempotency_key text,
    trace_parent    text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    delivered_at    timestamptz,
    task_id         uuid,
    step            text,
    CONSTRAINT braid_signals_name_length CHECK (char_length(name) BETWEEN 1 AND 200),
    CONSTRAINT braid_signals_idempotency_key_length CHECK (idempotency_key IS NULL OR char_length(idempotency_key) BETWEEN 1 AND 500)
);
CREATE UNIQUE INDEX braid_signals_idempotency_key ON braid_signals (run_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
-- A wait takes the oldest undelivered signal of its name.
CREATE INDEX braid_signals_mailbox ON braid_signals (run_id, name, id) WHERE delivered_at IS NULL;

CREATE TABLE braid_events (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    topic           text        NOT NULL,
    payload         jsonb       NOT NULL,
    trace_parent    text,
    published_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT braid_events_topic_length CHECK (char_length(topic) BETWEEN 1 AND 200)
);
CREATE INDEX braid_events_topic ON braid_events (topic, published_at);
CREATE INDEX braid_events_published_at ON braid_events (published_at);

CREATE TABLE braid_run_events (
    run_id          uuid        NOT NULL REFERENCES braid_runs (id) ON DELETE CASCADE,
    key             text        NOT NULL,
    value           jsonb       NOT NULL,
    task_id         uuid        NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, key),
    CONSTRAINT braid_run_events_key_length CHECK (char_length(key) BETWEEN 1 AND 200)
);
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DROP TABLE braid_run_events;
DROP TABLE braid_events;
DROP TABLE braid_signals;
DROP INDEX braid_steps_event_waits;
DROP INDEX braid_steps_signal_waits;
CREATE INDEX braid_steps_waiting_delays ON braid_steps (resume_at) WHERE kind = 'delay' AND status = 'waiting';
DROP INDEX braid_steps_timers;
ALTER TABLE braid_steps DROP CONSTRAINT braid_steps_message_wait;
ALTER TABLE braid_steps DROP COLUMN woken_by;
ALTER TABLE braid_steps DROP COLUMN wait_filter;
ALTER TABLE braid_steps DROP COLUMN wait_run;
ALTER TABLE braid_steps DROP COLUMN wait_on;
DELETE FROM braid_steps WHERE kind IN ('signal', 'event', 'set_event');
ALTER TABLE braid_steps DROP CONSTRAINT braid_steps_kind;
ALTER TABLE braid_steps ADD CONSTRAINT braid_steps_kind CHECK (kind IN ('step', 'delay', 'child'));
-- +goose StatementEnd
