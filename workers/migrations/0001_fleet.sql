-- The fleet's own small tables. None is a source of truth: active_sagas is a projection of
-- the log kept by the sweeper (rebuildable), the others are operational counters/records.
CREATE SCHEMA IF NOT EXISTS fleet;

-- Sagas not yet finished, so the sweeper need not fold every stream ever written.
CREATE TABLE fleet.active_sagas (
    saga_id    text PRIMARY KEY,
    tenant     text NOT NULL,
    started_at timestamptz NOT NULL
);

-- Every re-enqueue by the sweeper, counted (retry amplification is a metric).
CREATE TABLE fleet.redeliveries (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    saga_id    text NOT NULL,
    step_id    text,
    kind       text,
    attempt    integer NOT NULL,
    action     text NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX redeliveries_saga_idx ON fleet.redeliveries (saga_id);

-- Broker messages that were not valid step commands: kept (truncated) for an operator.
CREATE TABLE fleet.dead_letters (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task        text NOT NULL,
    body        text NOT NULL,
    reason      text NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);
