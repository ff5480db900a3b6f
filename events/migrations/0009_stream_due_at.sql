-- A stream's due time: the next wake-up its appender asks for (a sweeper reads only the
-- streams due by now, through a partial index, instead of every stream it tracks). Set by
-- the statement that moves the head, so it costs no statement and no round trip of its own:
-- the chained insert (events.appending) and, here, eventstore.append_events, which takes two
-- optional arguments: p_due_set (false: leave due_at as it is) and p_due_at (NULL clears).
--
-- Existing saga streams that have not finished are due at -infinity: the first pass visits
-- each and re-times it. Finished ones, and every other stream, have no due time.
ALTER TABLE eventstore.streams ADD COLUMN due_at timestamptz;

CREATE INDEX streams_due_at ON eventstore.streams (due_at) WHERE due_at IS NOT NULL;

UPDATE eventstore.streams s
   SET due_at = '-infinity'
 WHERE s.stream_id LIKE 'saga-%'
   AND NOT EXISTS (SELECT 1 FROM eventstore.events e
                    WHERE e.stream_id = s.stream_id AND e.event_type = 'SagaFinished');

-- The function as in 0005, with the due time set in the same UPDATE of the head.
DROP FUNCTION eventstore.append_events(text, bigint, jsonb, boolean);

CREATE FUNCTION eventstore.append_events(
    p_stream_id text,
    p_expected  bigint,
    p_events    jsonb,
    p_notify    boolean,
    p_due_set   boolean DEFAULT false,
    p_due_at    timestamptz DEFAULT NULL
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
           updated_at = now(), due_at = CASE WHEN p_due_set THEN p_due_at ELSE due_at END
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
