-- The feed reader's own tables, beside braid's. Versions are recorded in
-- feedfetcher_schema_version, not in braid_schema_version.

-- +goose Up
CREATE TABLE users (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       text NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 100),
    email      text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now()
);

-- One row per feed URL. next_fetch_at mirrors the next_run_at of the feed's
-- fetch_feed recurring job while the job is enabled, and is NULL while it is
-- disabled; braid_recurring holds the schedule itself.
CREATE TABLE feeds (
    id                   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    url                  text NOT NULL UNIQUE CHECK (length(url) BETWEEN 1 AND 2048),
    title                text NOT NULL DEFAULT '',
    etag                 text,
    last_modified        text,
    ttl_seconds          integer CHECK (ttl_seconds >= 0),
    next_fetch_at        timestamptz,
    last_fetched_at      timestamptz,
    consecutive_failures integer NOT NULL DEFAULT 0,
    last_error           text,
    fetch_count          bigint NOT NULL DEFAULT 0,
    not_modified_count   bigint NOT NULL DEFAULT 0,
    failure_count        bigint NOT NULL DEFAULT 0,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now()
);

-- Subscriptions are soft-deleted: unsubscribing sets unsubscribed_at, and
-- subscribing again adds a new row. A user has at most one active
-- subscription per feed.
CREATE TABLE subscriptions (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id         bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    feed_id         bigint NOT NULL REFERENCES feeds (id) ON DELETE CASCADE,
    subscribed_at   timestamptz NOT NULL DEFAULT now(),
    unsubscribed_at timestamptz,
    CHECK (unsubscribed_at IS NULL OR unsubscribed_at >= subscribed_at)
);
CREATE UNIQUE INDEX subscriptions_active_idx ON subscriptions (user_id, feed_id) WHERE unsubscribed_at IS NULL;
CREATE INDEX subscriptions_feed_active_idx ON subscriptions (feed_id) WHERE unsubscribed_at IS NULL;

-- Entries are deduplicated per feed by key: the GUID, else the link, else a
-- hash of title and publication time.
CREATE TABLE entries (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    feed_id      bigint NOT NULL REFERENCES feeds (id) ON DELETE CASCADE,
    key          text NOT NULL,
    guid         text NOT NULL DEFAULT '',
    link         text NOT NULL DEFAULT '',
    title        text NOT NULL DEFAULT '',
    summary      text NOT NULL DEFAULT '',
    published_at timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (feed_id, key)
);

-- A digest is sent once per idempotency key: the send step's key, stable
-- across every turn and retry of the digest run.
CREATE TABLE digests (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    idempotency_key text NOT NULL UNIQUE,
    run_id          text NOT NULL,
    user_id         bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    feed_id         bigint NOT NULL REFERENCES feeds (id) ON DELETE CASCADE,
    entry_ids       bigint[] NOT NULL,
    subject         text NOT NULL,
    body            text NOT NULL,
    sent_at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX digests_user_idx ON digests (user_id, sent_at);
CREATE INDEX digests_feed_idx ON digests (feed_id);
CREATE INDEX digests_run_idx ON digests (run_id);

-- WebSub subscriptions at a feed's hub, and a record of every renewal.
CREATE TABLE websub_subscriptions (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    feed_id       bigint NOT NULL UNIQUE REFERENCES feeds (id) ON DELETE CASCADE,
    hub_url       text NOT NULL CHECK (length(hub_url) BETWEEN 1 AND 2048),
    lease_seconds integer NOT NULL CHECK (lease_seconds > 0),
    expires_at    timestamptz NOT NULL,
    renewed_at    timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX websub_subscriptions_expires_idx ON websub_subscriptions (expires_at);

CREATE TABLE websub_renewals (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    subscription_id     bigint NOT NULL REFERENCES websub_subscriptions (id) ON DELETE CASCADE,
    previous_expires_at timestamptz NOT NULL,
    expires_at          timestamptz NOT NULL,
    renewed_at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX websub_renewals_subscription_idx ON websub_renewals (subscription_id, renewed_at);

-- +goose Down
DROP TABLE websub_renewals;
DROP TABLE websub_subscriptions;
DROP TABLE digests;
DROP TABLE entries;
DROP TABLE subscriptions;
DROP TABLE feeds;
DROP TABLE users;
