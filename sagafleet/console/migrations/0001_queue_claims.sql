-- "I'm on it": who took a queue request in hand (sagafleet.console.claims). A row per claim,
-- kept after it ends, so the record says who claimed, when, and how it ended (released by
-- its holder, or taken over by whom and when). At most one open claim per request and tenant.
CREATE SCHEMA IF NOT EXISTS fleet;

CREATE TABLE fleet.queue_claims (
    claim_id     bigserial PRIMARY KEY,
    tenant       text NOT NULL,
    saga_id      text NOT NULL,
    entry        text NOT NULL,
    step_id      text NOT NULL,
    kind         text NOT NULL,
    claimed_by   text NOT NULL,
    claimed_at   timestamptz NOT NULL,
    ended_at     timestamptz,
    ended_by     text,
    ending       text CHECK (ending IN ('released', 'taken_over')),
    CHECK ((ended_at IS NULL) = (ending IS NULL) AND (ended_at IS NULL) = (ended_by IS NULL))
);

CREATE UNIQUE INDEX queue_claims_open_idx
    ON fleet.queue_claims (tenant, saga_id, entry, step_id, kind) WHERE ended_at IS NULL;
CREATE INDEX queue_claims_request_idx
    ON fleet.queue_claims (tenant, saga_id, entry, step_id, kind, claimed_at);
