-- Read models of the saga log. Nothing here is a source of truth: every table set can be
-- rebuilt from eventstore.events. Table sets are versioned (<table>_v<N>) so a rebuild
-- builds v(N+1) beside vN under its own checkpoint and then takes over (blue/green).
-- The shape of every table lives in a *_template table; projections.create_table_set(N)
-- copies the templates, so a new version is data, not DDL hidden in application code.
CREATE SCHEMA IF NOT EXISTS projections;

-- Which table set readers use, per projection; switched in the rebuild's final transaction.
CREATE TABLE projections.active_versions (
    name        text PRIMARY KEY,
    version     integer NOT NULL CHECK (version >= 1),
    switched_at timestamptz NOT NULL DEFAULT now()
);

-- Every table set ever created: building (a rebuild is catching up), active, or retired.
CREATE TABLE projections.table_sets (
    name        text NOT NULL,
    version     integer NOT NULL CHECK (version >= 1),
    status      text NOT NULL CHECK (status IN ('building', 'active', 'retired')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    switched_at timestamptz,
    PRIMARY KEY (name, version)
);

-- One row per saga: where it stands, folded from its stream up to stream_version.
CREATE TABLE projections.saga_summary_template (
    saga_id                 text PRIMARY KEY,
    stream_version          bigint NOT NULL,
    tenant                  text NOT NULL,
    definition_name         text NOT NULL,
    definition_version      integer NOT NULL,
    definition_hash         text NOT NULL,
    state                   text NOT NULL,
    phase                   text NOT NULL,
    started_at              timestamptz NOT NULL,
    updated_at              timestamptz NOT NULL,
    finished_at             timestamptz,
    compensation_started_at timestamptz,
    current_steps           text[] NOT NULL,
    last_error              text NOT NULL,
    last_error_class        text,
    retry_budget_left       integer NOT NULL,
    cancel_requested        boolean NOT NULL,
    escalations             integer NOT NULL,
    escalation_reason       text
);
CREATE INDEX saga_summary_template_state_idx
    ON projections.saga_summary_template (state, definition_name);

-- One row per operation (a step's forward or compensation run) with its counters.
CREATE TABLE projections.step_runs_template (
    saga_id                  text NOT NULL,
    step_id                  text NOT NULL,
    kind                     text NOT NULL,
    tool                     text NOT NULL,
    tool_version             integer NOT NULL,
    semantics                text NOT NULL,
    status                   text NOT NULL,
    attempts                 integer NOT NULL,
    operation_key            text NOT NULL,
    receipt                  jsonb,
    error_class              text,
    error_message            text NOT NULL,
    worker_id                text,
    lease_expires_at         timestamptz,
    starts                   integer NOT NULL,
    successes                integer NOT NULL,
    distinct_receipts        integer NOT NULL,
    failures                 integer NOT NULL,
    ambiguous                integer NOT NULL,
    reconciliations_found    integer NOT NULL,
    reconciliations_absent   integer NOT NULL,
    reconciliations_unknown  integer NOT NULL,
    first_started_at         timestamptz,
    succeeded_at             timestamptz,
    changed_at               timestamptz,
    started_without_approval boolean NOT NULL,
    PRIMARY KEY (saga_id, step_id, kind)
);
CREATE INDEX step_runs_template_tool_idx ON projections.step_runs_template (tool, kind);

-- What waits for a human: manual interventions and pending approvals, with evidence.
CREATE TABLE projections.operator_queue_template (
    saga_id         text NOT NULL,
    entry           text NOT NULL CHECK (entry IN ('manual_intervention', 'approval')),
    step_id         text NOT NULL,
    kind            text NOT NULL,
    tenant          text NOT NULL,
    definition_name text NOT NULL,
    reason          text NOT NULL,
    action_hash     text,
    scope           text,
    evidence        jsonb NOT NULL,
    deadline        timestamptz,
    requested_at    timestamptz NOT NULL,
    PRIMARY KEY (saga_id, entry, step_id, kind)
);

CREATE FUNCTION projections.create_table_set(set_version integer) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    base text;
BEGIN
    FOREACH base IN ARRAY ARRAY['saga_summary', 'step_runs', 'operator_queue'] LOOP
        EXECUTE format(
            'CREATE TABLE IF NOT EXISTS projections.%I (LIKE projections.%I INCLUDING ALL)',
            base || '_v' || set_version, base || '_template');
    END LOOP;
END $$;

CREATE FUNCTION projections.drop_table_set(set_version integer) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    base text;
BEGIN
    FOREACH base IN ARRAY ARRAY['saga_summary', 'step_runs', 'operator_queue'] LOOP
        EXECUTE format('DROP TABLE IF EXISTS projections.%I', base || '_v' || set_version);
    END LOOP;
END $$;

SELECT projections.create_table_set(1);
INSERT INTO projections.table_sets (name, version, status, switched_at)
VALUES ('sagas', 1, 'active', now());
INSERT INTO projections.active_versions (name, version) VALUES ('sagas', 1);
