-- One saga's audit checks the checkpoints that bear on its stream only (events.anchor_reading),
-- so its cost follows the stream, not the log: the checkpoint whose slice holds an event is
-- the first whose slice ends at or after it, and the checkpoints naming a stream are found by
-- the stream. Checkpoints are written off the append path: these indexes cost appends nothing.
CREATE INDEX anchors_upto_idx ON eventstore.anchors (upto_xid, upto_position);

CREATE INDEX anchor_heads_stream_idx ON eventstore.anchor_heads (stream_id, seq);
