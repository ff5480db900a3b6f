-- A hash version per event (events.hashing.HASH_BODY_LAYOUTS): which fields its hash covers.
-- Every event stored so far was hashed with layout 1 (the content); appends now write
-- layout 2, which also covers the tenant column, the recording time and the version itself,
-- so an edited tenant_id or recorded_at no longer verifies. The append sets both values
-- explicitly: the client reads its clock once per append and hashes that time, and the
-- database keeps it (the column's now() default is only for an insert that names no time).
--
-- The default of 1 labels what a writer that does not know about versions inserts (an
-- older client during an upgrade) as what it is: a layout-1 hash. A constant default and
-- no CHECK: adding the column rewrites nothing and scans nothing, however long the log
-- (verification refuses a version no layout defines).
ALTER TABLE eventstore.events ADD COLUMN hash_version smallint NOT NULL DEFAULT 1;

-- The function as in 0009, with two optional arguments more: the recording time the client
-- hashed (p_recorded_at) and the hash version (p_hash_version), once per append, stored on
-- every event of it. A caller that gives neither (an older client) stores now() and
-- layout 1, as before.
DROP FUNCTION eventstore.append_events(text, bigint, jsonb, boolean, boolean, timestamptz);

CREATE FUNCTION eventstore.append_events(
    p_stream_id     text,
    p_expected      bigint,
    p_events        jsonb,
    p_notify        boolean,
    p_due_set       boolean DEFAULT false,
    p_due_at        timestamptz DEFAULT NULL,
    p_recorded_at   timestamptz DEFAULT NULL,
    p_hash_version  smallint DEFAULT 1
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
        schema_version, data, metadata, tenant_id, recorded_at, hash_version, prev_hash,
        event_hash)
    SELECT p_stream_id, v_version + x.ord, x.id, x.type, x.sv, x.data, x.meta, x.tenant,
           coalesce(p_recorded_at, now()), p_hash_version, v_hashes[x.ord],
           v_hashes[x.ord + 1]
      FROM ROWS FROM (jsonb_to_recordset(p_events)
                      AS (id uuid, type text, sv integer, data jsonb, meta jsonb, tenant text))
           WITH ORDINALITY AS x(id, type, sv, data, meta, tenant, ord)
    RETURNING e.stream_version, e.global_position, e.transaction_id::text, e.recorded_at,
              e.prev_hash, e.event_hash;
END
$$;
