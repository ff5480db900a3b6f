-- The principal directory (workers/principals.py): the people and agents of each tenant,
-- their roles, their API tokens and their signing keys. A token is kept only as its sha256
-- digest and a signing key only as its public half, so a copy of these tables lets nobody
-- act. Rows are never deleted: a revoked principal keeps its name (the log records it as an
-- actor) and its revoked tokens and keys stay as evidence of what once worked.
CREATE TABLE fleet.principals (
    tenant         text NOT NULL,
    name           text NOT NULL,
    kind           text NOT NULL CHECK (kind IN ('person', 'agent')),
    roles          text[] NOT NULL CHECK (cardinality(roles) > 0),
    created_at     timestamptz NOT NULL,
    revoked_at     timestamptz,
    revoked_reason text,
    PRIMARY KEY (tenant, name)
);

CREATE TABLE fleet.principal_tokens (
    token_digest text PRIMARY KEY CHECK (token_digest ~ '^[0-9a-f]{64}$'),
    tenant       text NOT NULL,
    name         text NOT NULL,
    issued_at    timestamptz NOT NULL,
    revoked_at   timestamptz,
    FOREIGN KEY (tenant, name) REFERENCES fleet.principals (tenant, name)
);
-- At most one live token per principal: a rotation revokes the old one in its transaction.
CREATE UNIQUE INDEX principal_tokens_live_idx
    ON fleet.principal_tokens (tenant, name) WHERE revoked_at IS NULL;

CREATE TABLE fleet.signing_keys (
    kid        text PRIMARY KEY,
    tenant     text NOT NULL,
    name       text NOT NULL,
    public_key bytea NOT NULL CHECK (length(public_key) = 32),
    created_at timestamptz NOT NULL,
    revoked_at timestamptz,
    FOREIGN KEY (tenant, name) REFERENCES fleet.principals (tenant, name)
);
CREATE INDEX signing_keys_owner_idx ON fleet.signing_keys (tenant, name);
