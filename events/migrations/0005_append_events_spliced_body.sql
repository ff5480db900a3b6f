-- eventstore.append_events, the general append (the client does not know the stream's tip):
-- lock or create the stream's head, check the expected version, chain each event's hash
-- from the tip, move the head, store the events.
--
-- The client sends each hash body split around the stream version, the one field it
-- cannot know (events.hashing.body_around_version, built from HASH_BODY_FIELDS): this
-- function only splices the version in, sha256(prev_hash || before || version || after),
-- and names no hashed field, so the field list has one owner. The bodies, and so the
-- hashes of every stored event, are unchanged. p_events is jsonb: the data need not stay
-- verbatim here any more, so the document is parsed once.
--
-- p_expected: -1 = any version, 0 = stream must not exist, n = current version must be n.
-- A wrong version raises SQLSTATE SF409 with the actual version as DETAIL; nothing is
-- written. A duplicate event id raises unique_violation on events_event_id_key.
-- Each element of p_events: {id, type, sv, data, meta, tenant, before, after}.
DROP FUNCTION eventstore.append_events(text, text, bigint, json, boolean);

-- Only the single-event statement that this replaces read it (see 0003).
ALTER TABLE eventstore.streams DROP COLUMN prev_hash;

CREATE FUNCTION eventstore.append_events(
    p_stream_id text,
    p_expected  bigint,
    p_events    jsonb,
    p_notify    boolean
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
    v_hashes  text[];  -- v_hashes[i] is event i's prev_hash, v_hashes[i + 1] its hash
    v_event   record;
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

    v_hashes := ARRAY[v_hash];
    FOR v_event IN
        SELECT x.before, x.after, x.ord
          FROM ROWS FROM (jsonb_to_recordset(p_events) AS (before text, after text))
               WITH ORDINALITY AS x(before, after, ord)
         ORDER BY x.ord
    LOOP
        v_hash := encode(sha256(convert_to(
            v_hash || v_event.before || (v_version + v_event.ord)::text || v_event.after,
            'UTF8')), 'hex');
        v_hashes := v_hashes || v_hash;
    END LOOP;

    UPDATE eventstore.streams
       SET version = v_version + cardinality(v_hashes) - 1, last_hash = v_hash,
           updated_at = now()
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
      FROM ROWS FROM (jsonb_to_recordset(p_events)
                      AS (id uuid, type text, sv integer, data jsonb, meta jsonb, tenant text))
           WITH ORDINALITY AS x(id, type, sv, data, meta, tenant, ord)
    RETURNING e.stream_version, e.global_position, e.transaction_id::text, e.recorded_at,
              e.prev_hash, e.event_hash;
END
$$;
