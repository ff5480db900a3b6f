-- Sandbox providers: each external system keeps its own ledger in its own schema,
-- separate from the event store. Every ledger row records the saga_id it was made for
-- so invariants ("one trip and one net charge, or nothing") can be checked per saga.
-- Each provider's idempotency_keys row is written in the same transaction as the effect.

CREATE SCHEMA IF NOT EXISTS sandbox_control;
CREATE SCHEMA IF NOT EXISTS sandbox_flights;
CREATE SCHEMA IF NOT EXISTS sandbox_hotels;
CREATE SCHEMA IF NOT EXISTS sandbox_payments;
CREATE SCHEMA IF NOT EXISTS sandbox_email;

-- Fault rules are data so a test process can arm faults inside worker subprocesses.
CREATE TABLE IF NOT EXISTS sandbox_control.fault_rules (
    rule_id      bigserial PRIMARY KEY,
    provider     text NOT NULL,                 -- 'flights' | ... | '*'
    operation    text NOT NULL,                 -- 'hold' | 'release' | ... | '*'
    boundary     text NOT NULL CHECK (boundary IN (
                     'fail_before_commit', 'timeout_before_dispatch', 'commit_then_timeout',
                     'slow_visibility', 'business_rejection', 'compensation_failure',
                     'target_changed', 'lookup_unavailable')),
    saga_id      text,                          -- NULL: any saga
    key_prefix   text,                          -- NULL: any key
    remaining    integer CHECK (remaining IS NULL OR remaining >= 0),  -- count-based
    probability  double precision CHECK (probability IS NULL
                                         OR (probability >= 0 AND probability <= 1)),
    seed         text NOT NULL DEFAULT '',
    params       jsonb NOT NULL DEFAULT '{}'::jsonb,
    fired        integer NOT NULL DEFAULT 0,
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- How many times a probability rule was evaluated for a key: the "attempt" in the
-- deterministic draw hash(seed, rule, key, attempt), shared by every worker process.
CREATE TABLE IF NOT EXISTS sandbox_control.fault_draws (
    rule_id  bigint NOT NULL REFERENCES sandbox_control.fault_rules (rule_id) ON DELETE CASCADE,
    op_key   text NOT NULL,
    draws    integer NOT NULL,
    PRIMARY KEY (rule_id, op_key)
);

-- Every fault that fired, for the demo summary and for test evidence.
CREATE TABLE IF NOT EXISTS sandbox_control.fault_hits (
    hit_id     bigserial PRIMARY KEY,
    rule_id    bigint NOT NULL,
    provider   text NOT NULL,
    operation  text NOT NULL,
    boundary   text NOT NULL,
    saga_id    text,
    op_key     text NOT NULL,
    fired_at   timestamptz NOT NULL DEFAULT now()
);

-- ---------------------------------------------------------------- flights
CREATE TABLE IF NOT EXISTS sandbox_flights.idempotency_keys (
    key           text PRIMARY KEY,
    operation     text NOT NULL,
    request_hash  text NOT NULL,
    saga_id       text,
    response      jsonb,
    created_at    timestamptz NOT NULL DEFAULT now(),
    visible_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS sandbox_flights.holds (
    hold_id         text PRIMARY KEY,
    saga_id         text NOT NULL,
    op_key          text NOT NULL,
    flight_id       text NOT NULL,
    customer_email  text NOT NULL,
    seat            text NOT NULL,
    price           bigint NOT NULL,            -- minor units
    status          text NOT NULL CHECK (status IN ('held', 'released')),
    version         integer NOT NULL DEFAULT 1,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS holds_saga_idx ON sandbox_flights.holds (saga_id);

-- ---------------------------------------------------------------- hotels
CREATE TABLE IF NOT EXISTS sandbox_hotels.idempotency_keys (
    key           text PRIMARY KEY,
    operation     text NOT NULL,
    request_hash  text NOT NULL,
    saga_id       text,
    response      jsonb,
    created_at    timestamptz NOT NULL DEFAULT now(),
    visible_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS sandbox_hotels.holds (
    hold_id     text PRIMARY KEY,
    saga_id     text NOT NULL,
    op_key      text NOT NULL,
    hotel_id    text NOT NULL,
    nights      integer NOT NULL CHECK (nights > 0),
    price       bigint NOT NULL,                -- minor units
    status      text NOT NULL CHECK (status IN ('held', 'released')),
    version     integer NOT NULL DEFAULT 1,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS holds_saga_idx ON sandbox_hotels.holds (saga_id);

-- ---------------------------------------------------------------- payments
CREATE TABLE IF NOT EXISTS sandbox_payments.idempotency_keys (
    key           text PRIMARY KEY,
    operation     text NOT NULL,
    request_hash  text NOT NULL,
    saga_id       text,
    response      jsonb,
    created_at    timestamptz NOT NULL DEFAULT now(),
    visible_at    timestamptz NOT NULL DEFAULT now()
);

-- The card token is never stored: only a fingerprint (sha256 prefix) and the last four.
CREATE TABLE IF NOT EXISTS sandbox_payments.charges (
    charge_id         text PRIMARY KEY,
    saga_id           text NOT NULL,
    op_key            text NOT NULL,
    amount            bigint NOT NULL CHECK (amount > 0),   -- minor units
    currency          text NOT NULL,
    card_fingerprint  text NOT NULL,
    card_last4        text NOT NULL,
    status            text NOT NULL CHECK (status IN ('captured', 'refunded')),
    version           integer NOT NULL DEFAULT 1,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS charges_saga_idx ON sandbox_payments.charges (saga_id);

-- Refunds are offsets: new rows; the charge row and its history remain.
CREATE TABLE IF NOT EXISTS sandbox_payments.refunds (
    refund_id   text PRIMARY KEY,
    charge_id   text NOT NULL REFERENCES sandbox_payments.charges (charge_id),
    saga_id     text NOT NULL,
    op_key      text NOT NULL,
    amount      bigint NOT NULL CHECK (amount > 0),
    currency    text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS refunds_saga_idx ON sandbox_payments.refunds (saga_id);

-- ---------------------------------------------------------------- email
CREATE TABLE IF NOT EXISTS sandbox_email.idempotency_keys (
    key           text PRIMARY KEY,
    operation     text NOT NULL,
    request_hash  text NOT NULL,
    saga_id       text,
    response      jsonb,
    created_at    timestamptz NOT NULL DEFAULT now(),
    visible_at    timestamptz NOT NULL DEFAULT now()
);

-- Sent mail is irreversible: a correction is another message that refers to the first.
CREATE TABLE IF NOT EXISTS sandbox_email.messages (
    message_id   text PRIMARY KEY,
    saga_id      text NOT NULL,
    op_key       text NOT NULL,
    kind         text NOT NULL CHECK (kind IN ('itinerary', 'correction')),
    to_address   text NOT NULL,
    in_reply_to  text REFERENCES sandbox_email.messages (message_id),
    body         jsonb NOT NULL,
    sent_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS messages_saga_idx ON sandbox_email.messages (saga_id);
