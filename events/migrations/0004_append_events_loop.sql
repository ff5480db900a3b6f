-- eventstore.append_events, same contract as in 0001 (read its comments there): the hash
-- bodies are built whole, and the chain loop writes one array element per event, which
-- makes a 100-event append cheaper on the server. The hashes themselves are unchanged.
CREATE OR REPLACE FUNCTION eventstore.append_events(
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
    v_bodies  text[];
    v_hashes  text[];
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

    -- Each hash body in canonical key order (must equal events.hashing.hash_body), whole:
    -- the versions are known once the head is locked. json (not jsonb) keeps the text.
    SELECT array_agg('{"data":' || x.data::text || ',"event_id":"' || x.id::text
                     || '","metadata":' || x.meta::text || ',"schema_version":' || x.sv::text
                     || ',"stream_id":' || p_stream_json || ',"stream_version":'
                     || (v_version + x.ord)::text || ',"type":' || x.type::text || '}'
                     ORDER BY x.ord)
      INTO v_bodies
      FROM ROWS FROM (json_to_recordset(p_events)
                      AS (id uuid, type json, sv integer, data json, meta json))
           WITH ORDINALITY AS x(id, type, sv, data, meta, ord);
    -- v_hashes[i] is event i's prev_hash and v_hashes[i + 1] its hash: one in-place
    -- element write per event instead of two growing arrays.
    v_hashes := array_fill(NULL::text, ARRAY[cardinality(v_bodies) + 1]);
    v_hashes[1] := v_hash;
    FOR i IN 1 .. cardinality(v_bodies) LOOP
        v_hash := encode(sha256(convert_to(v_hash || v_bodies[i], 'UTF8')), 'hex');
        v_hashes[i + 1] := v_hash;
    END LOOP;

    UPDATE eventstore.streams
       SET version = v_version + cardinality(v_bodies), last_hash = v_hash, updated_at = now()
     WHERE stream_id = p_stream_id;

    IF p_notify THEN
        -- One cheap wake-up per append transaction; readers poll for the data.
        PERFORM pg_notify('eventstore_events', '');
    END IF;

    RETURN QUERY
    INSERT INTO eventstore.events AS e (stream_id, stream_version, event_id, event_type,
        schema_version, data, metadata, tenant_id, prev_hash, event_hash)
    SELECT p_stream_id, v_version + x.ord, x.id, x.type, x.sv, x.data, x.meta, x.tenant,
           v_hashes[x.ord], v_hashes[x.ord + 1]
      FROM ROWS FROM (json_to_recordset(p_events)
                      AS (id uuid, type text, sv integer, data jsonb, meta jsonb, tenant text))
           WITH ORDINALITY AS x(id, type, sv, data, meta, tenant, ord)
    RETURNING e.stream_version, e.global_position, e.transaction_id::text, e.recorded_at,
              e.prev_hash, e.event_hash;
END
$$;
