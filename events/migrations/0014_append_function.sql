-- The append function as events/eventstore/append.sql defines it, installed from that same
-- text (below this comment, verbatim). Until now the live function could only be read as the
-- last of its definitions in migrations (0001, then 0004, 0005, 0009 and 0011); from here on
-- it is read in that one file. The logic is 0011's, unchanged; only its comments say more.
-- tests/integration/events/test_append_function.py proves the live definition equals the
-- file's, and that this migration holds the file's text.

-- eventstore.append_events: the append function as it is live today, in one file to read.
--
-- The migrations install it (events/migrations/0014_append_function.sql holds this text, and
-- tests/integration/events/test_append_function.py proves the database's live definition
-- equals this file's). To change the function: edit this file, then add a migration that
-- holds the new text (an applied migration is never edited); the test fails until you do.
--
-- The general append (events.eventstore.appending): lock or create the stream's head, check
-- the expected version (SF409 otherwise, its detail the stream's actual version), chain each
-- event's hash onto its predecessor's, move the head, store the events, and answer what the
-- server assigned.
--
--   p_stream_id     the stream
--   p_expected      -1: any version; 0: the stream must not exist; n: exactly version n
--   p_events        a JSON array, one element per event: id, type, sv (schema version),
--                   data, meta, tenant, and the hash body around its version, before and
--                   after (events.eventstore.hashing.body_around_version)
--   p_notify        wake subscribers (one pg_notify per append transaction)
--   p_due_set       whether to set the head's due time to p_due_at (events migration 0009)
--   p_due_at        the head's new due time (NULL clears it) when p_due_set
--   p_recorded_at   the recording time the client hashed, stored on every event of the
--                   append (NULL: now(), for a client older than events migration 0011)
--   p_hash_version  the hash layout the client used (events.hashing.HASH_BODY_LAYOUTS)
CREATE OR REPLACE FUNCTION eventstore.append_events(
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
    v_version bigint;  -- the head's version before this append
    v_hash    text;    -- the hash the next event chains onto
    v_hashes  text[];  -- v_hashes[i] is event i's prev_hash, v_hashes[i + 1] its hash
    v_event   record;
BEGIN
    -- 1. Lock the head, or create it. The head lock is the first statement that assigns
    --    this transaction's id, so a stream's versions follow xid order whenever the append
    --    runs in its own transaction.
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

    -- 2. Check the precondition: the head is at the expected version (unless -1: any).
    IF p_expected >= 0 AND v_version <> p_expected THEN
        RAISE EXCEPTION USING ERRCODE = 'SF409', MESSAGE = 'wrong expected version',
            DETAIL = v_version::text;
    END IF;

    -- 3. Chain: each event's hash covers its predecessor's hash and its body, with its
    --    version spliced between the body's two halves.
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

    -- 4. Move the head to the last event, with its hash (and its due time when asked).
    UPDATE eventstore.streams
       SET version = v_version + cardinality(v_hashes) - 1, last_hash = v_hash,
           updated_at = now(), due_at = CASE WHEN p_due_set THEN p_due_at ELSE due_at END
     WHERE stream_id = p_stream_id;

    IF p_notify THEN
        -- One cheap wake-up per append transaction; readers poll for the data.
        PERFORM pg_notify('eventstore_events', '');
    END IF;

    -- 5. Store the events and answer what the server assigned them.
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
