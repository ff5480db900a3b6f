-- Saga definitions as data: stored by (name, version, hash) so that any process can
-- recover a saga from SagaStarted alone, without the original process or model.
CREATE TABLE eventstore.definitions (
    name          text NOT NULL,
    version       integer NOT NULL CHECK (version >= 1),
    hash          text NOT NULL,
    body          jsonb NOT NULL,
    registered_by text NOT NULL DEFAULT '',
    registered_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, version),
    CONSTRAINT definitions_hash_key UNIQUE (hash)
);
