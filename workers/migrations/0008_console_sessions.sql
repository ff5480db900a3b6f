-- The operator console's sign-in sessions (sagafleet.console.sessions). Numbered 0008: the
-- metrics branch brings 0007 (redeliveries index); the two are independent. The browser holds a
-- random session id in an HttpOnly cookie; the table keeps only its sha256 digest, so a copy
-- of the table signs nobody in. A session names its principal (tenant, name) and when that
-- principal's token was issued: every request re-reads the principal, and a revoked principal
-- or a rotated token ends the session at once. idle and absolute expiry are checked on every
-- request (last_seen_at, expires_at); sign-out deletes the row.
CREATE TABLE fleet.console_sessions (
    id_digest       text PRIMARY KEY CHECK (length(id_digest) = 64),
    tenant          text NOT NULL,
    name            text NOT NULL,
    token_issued_at timestamptz,
    created_at      timestamptz NOT NULL,
    last_seen_at    timestamptz NOT NULL,
    expires_at      timestamptz NOT NULL,
    FOREIGN KEY (tenant, name) REFERENCES fleet.principals (tenant, name)
);
CREATE INDEX console_sessions_expires_idx ON fleet.console_sessions (expires_at);
CREATE INDEX console_sessions_owner_idx ON fleet.console_sessions (tenant, name);
