-- The article pipeline's index: one row per entry, written by the index
-- node of the entry's article_pipeline run.

-- +goose Up
CREATE TABLE articles (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    entry_id   bigint NOT NULL UNIQUE REFERENCES entries (id) ON DELETE CASCADE,
    feed_id    bigint NOT NULL REFERENCES feeds (id) ON DELETE CASCADE,
    run_id     text NOT NULL,
    title      text NOT NULL DEFAULT '',
    chars      integer NOT NULL CHECK (chars >= 0),
    words      integer NOT NULL CHECK (words >= 0),
    -- The detected language's ISO 639-1 code, or 'und' when undetermined.
    language   text NOT NULL,
    -- NULL when the summary node was skipped: not a language the reader
    -- wants.
    summary    text,
    indexed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX articles_feed_idx ON articles (feed_id, indexed_at);

-- +goose Down
DROP TABLE articles;
