-- Secret values deposited ahead of a start (SagaClient.put_secret, the MCP put_secret tool,
-- `sagafleet secrets put`), so that a command crossing the broker carries a ref instead of
-- the value. Keyed by the sha256 of the ref (the table holds no usable ref), per tenant,
-- with an expiry. A start redeems a ref in its own transaction: the value moves into
-- fleet.secrets and the row keeps only who spent it (value NULL), until the sweeper
-- deletes every expired row, spent or not.
CREATE TABLE fleet.secret_refs (
    ref_digest text PRIMARY KEY,
    tenant     text NOT NULL,
    value      jsonb,
    expires_at timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    spent_by   text,
    spent_at   timestamptz,
    CHECK ((spent_by IS NULL) = (value IS NOT NULL))
);
CREATE INDEX secret_refs_expires_idx ON fleet.secret_refs (expires_at);
