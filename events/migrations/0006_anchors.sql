-- Whole-log tamper evidence (events.anchors): a chain of checkpoints, taken off the append
-- path, each naming the head (version, event hash) of every stream that changed in the
-- slice of the log it covers. The slice is in the subscriptions' cursor order,
-- (transaction_id, global_position), and ends at an event below the snapshot horizon, so no
-- late commit can ever land inside a slice already anchored.
--
-- The rows hold no secret: the signature is an HMAC whose key is kept outside the database.
-- Appends never touch these tables.
CREATE TABLE eventstore.anchors (
    seq            bigint PRIMARY KEY CHECK (seq >= 1),  -- two takers meet here
    prev_hash      text NOT NULL,          -- the previous checkpoint's anchor_hash
    after_xid      xid8 NOT NULL,          -- the slice: (after, upto] in cursor order
    after_position bigint NOT NULL,
    upto_xid       xid8 NOT NULL,
    upto_position  bigint NOT NULL,
    events         bigint NOT NULL CHECK (events >= 1),
    taken_at       timestamptz NOT NULL,
    anchor_hash    text NOT NULL,          -- sha256 of the canonical body (events.anchors)
    key_id         text,                   -- which key signed it; NULL: unsigned
    signature      text                    -- HMAC-SHA256(key, anchor_hash); NULL: unsigned
);

-- One row per stream that has events in a checkpoint's slice: how many, and the highest
-- version among them with its event hash.
CREATE TABLE eventstore.anchor_heads (
    seq            bigint NOT NULL,
    stream_id      text NOT NULL,
    stream_version bigint NOT NULL,
    events         bigint NOT NULL,
    event_hash     text NOT NULL,
    PRIMARY KEY (seq, stream_id)
);
