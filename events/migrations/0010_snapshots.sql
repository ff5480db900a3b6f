-- Snapshots of saga state (issue 21): a shortcut for loads, never the truth. One row per
-- stream: the state folded up to `version`, as JSON (saga_core.snapshots), written by code
-- whose schema fingerprint is `schema`, for the definition with content hash
-- `definition_hash`. A load ignores a row of another schema or definition, or one that
-- does not decode, and folds the whole stream; `sagafleet db drop-snapshots` empties the
-- table at any time.
CREATE TABLE eventstore.snapshots (
    stream_id       text PRIMARY KEY,
    version         bigint NOT NULL CHECK (version > 0),
    schema          text NOT NULL,
    definition_hash text NOT NULL,
    state           jsonb NOT NULL,
    taken_at        timestamptz NOT NULL
);
