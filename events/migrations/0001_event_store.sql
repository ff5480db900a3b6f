-- The event store: one append-only log, a head row per stream, subscription checkpoints.
-- Applied by events.migrate (namespace "events"); never edit once released, add a file.

DO $$
BEGIN
    -- The hash chain hashes UTF-8 text inside append_events; other encodings would differ.
    IF current_setting('server_encoding') <> 'UTF8' THEN
        RAISE EXCEPTION 'the event store needs a UTF8 database, not %',
            current_setting('server_encoding');
    END IF;
END $$;

CREATE SCHEMA IF NOT EXISTS eventstore;

-- One row per stream: the expected-version check locks it, so it is also the per-stream
-- mutex. last_hash is the tip of the stream's hash chain.
CREATE TABLE eventstore.streams (
    stream_id   text PRIMARY KEY,
    version     bigint NOT NULL CHECK (version >= 0),
    last_hash   text NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE eventstore.events (
    -- CACHE 1: positions are handed out in call order, never in per-backend blocks.
    global_position bigint GENERATED ALWAYS AS IDENTITY (CACHE 1) PRIMARY KEY,
    -- The writer's transaction id: readers stay below the snapshot horizon (gap-safe).
    transaction_id  xid8 NOT NULL DEFAULT pg_current_xact_id(),
    stream_id       text NOT NULL,
    stream_version  bigint NOT NULL CHECK (stream_version >= 1),
    event_id        uuid NOT NULL,
    event_type      text NOT NULL,
    schema_version  integer NOT NULL CHECK (schema_version >= 1),
    data            jsonb NOT NULL,
    metadata        jsonb NOT NULL DEFAULT '{}',
    tenant_id       text,
    prev_hash       text NOT NULL,
    event_hash      text NOT NULL,
    recorded_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT events_stream_version_key UNIQUE (stream_id, stream_version),
    CONSTRAINT events_event_id_key UNIQUE (event_id)
);

-- The subscription cursor: (transaction_id, global_position) row comparisons use it.
CREATE INDEX events_transaction_position_idx
    ON eventstore.events (transaction_id, global_position);

-- An append-only table never needs vacuuming for dead rows; analyze it as it grows.
ALTER TABLE eventstore.events SET (
    autovacuum_vacuum_scale_factor = 0.5,
    autovacuum_analyze_scale_factor = 0.01
);

CREATE TABLE eventstore.checkpoints (
    name          text PRIMARY KEY,
    last_xid      xid8 NOT NULL DEFAULT '0',
    last_position bigint NOT NULL DEFAULT 0,
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- Append a batch to one stream in a single statement (one round trip, as cheap as a raw
-- INSERT). p_events is a JSON array of {id, type, sv, data, meta, tenant} whose data and
-- meta are canonical JSON text (sorted keys, no spaces). It is typed json, not jsonb, on
-- purpose: json keeps the text verbatim, so each event's hash body is assembled here from
-- the exact bytes the client canonicalised (json_to_recordset parses it in one pass), and
-- sha256(prev_hash || body) is chained from the stream's last hash under the head lock
-- (the client cannot know the versions).
-- p_stream_json is the stream id as a JSON string literal, as the client encodes it.
-- p_expected: -1 = any version, 0 = stream must not exist, n = current version must be n.
-- A wrong version raises SQLSTATE SF409 with the actual version as DETAIL; nothing is
-- written. A duplicate event id raises unique_violation on events_event_id_key.
CREATE FUNCTION eventstore.append_events(
    p_stream_id   text,
    p_stream_json text,
    p_expected    bigint,
    p_events      json,
    p_notify      boolean
) RETURNS TABLE (
    stream_version  bigint,
    global_position bigint,
    transaction_id  text,
    recorded_at     timestamptz,
    prev_hash       text,
    event_hash      text
)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_version bigint;
    v_hash    text;
    v_heads   text[];
    v_tails   text[];
    v_prevs   text[] := '{}';
    v_hashes  text[] := '{}';
BEGIN
    -- The head lock is the first statement that assigns this transaction's id, so a
    -- stream's versions follow xid order whenever the append runs in its own transaction.
    SELECT s.version, s.last_hash INTO v_version, v_hash
      FROM eventstore.streams s WHERE s.stream_id = p_stream_id FOR UPDATE;
    IF NOT FOUND THEN
        IF p_expected > 0 THEN
            RAISE EXCEPTION USING ERRCODE = 'SF409', MESSAGE = 'wrong expected version',
                DETAIL = '0';
        END IF;
        -- Concurrent creators meet on the primary key; the loser waits, then re-reads.
        INSERT INTO eventstore.streams (stream_id, version, last_hash)
            VALUES (p_stream_id, 0, repeat('0', 64)) ON CONFLICT (stream_id) DO NOTHING;
        SELECT s.version, s.last_hash INTO v_version, v_hash
          FROM eventstore.streams s WHERE s.stream_id = p_stream_id FOR UPDATE;
    END IF;
    IF p_expected >= 0 AND v_version <> p_expected THEN
        RAISE EXCEPTION USING ERRCODE = 'SF409', MESSAGE = 'wrong expected version',
            DETAIL = v_version::text;
    END IF;

    -- Each hash body in canonical key order (must equal events.hashing.hash_body), split
    -- around the stream_version. json (not jsonb) columns keep the client's text verbatim.
    SELECT array_agg('{"data":' || x.data::text || ',"event_id":"' || x.id::text
                     || '","metadata":' || x.meta::text || ',"schema_version":' || x.sv::text
                     || ',"stream_id":' || p_stream_json || ',"stream_version":'
                     ORDER BY x.ord),
           array_agg(',"type":' || x.type::text || '}' ORDER BY x.ord)
      INTO v_heads, v_tails
      FROM ROWS FROM (json_to_recordset(p_events)
                      AS (id uuid, type json, sv integer, data json, meta json))
           WITH ORDINALITY AS x(id, type, sv, data, meta, ord);
    FOR i IN 1 .. cardinality(v_heads) LOOP
        v_prevs := v_prevs || v_hash;
        v_hash := encode(sha256(convert_to(
            v_hash || v_heads[i] || (v_version + i)::text || v_tails[i], 'UTF8')), 'hex');
        v_hashes := v_hashes || v_hash;
    END LOOP;

    UPDATE eventstore.streams
       SET version = v_version + cardinality(v_heads), last_hash = v_hash, updated_at = now()
     WHERE stream_id = p_stream_id;

    IF p_notify THEN
        -- One cheap wake-up per append transaction; readers poll for the data.
        PERFORM pg_notify('eventstore_events', '');
    END IF;

    RETURN QUERY
    INSERT INTO eventstore.events AS e (stream_id, stream_version, event_id, event_type,
        schema_version, data, metadata, tenant_id, prev_hash, event_hash)
    SELECT p_stream_id, v_version + x.ord, x.id, x.type, x.sv, x.data, x.meta, x.tenant,
           v_prevs[x.ord], v_hashes[x.ord]
      FROM ROWS FROM (json_to_recordset(p_events)
                      AS (id uuid, type text, sv integer, data jsonb, meta jsonb, tenant text))
           WITH ORDINALITY AS x(id, type, sv, data, meta, tenant, ord)
    RETURNING e.stream_version, e.global_position, e.transaction_id::text, e.recorded_at,
              e.prev_hash, e.event_hash;
END
$$;
