-- Snapshots carry a seal (events.snapshots): the hash of the event they fold up to, and the
-- hash of their state as stored (sha256 of its jsonb text, computed by the statement that
-- stores it; a read hashes the text it gets back). A load refuses a snapshot whose event is
-- not the one now at its version, or whose state does not match its hash, and folds the
-- log; `sagafleet verify` re-folds every snapshot and compares.
--
-- The snapshots stored so far have no seal. They are a shortcut, never the truth, and may
-- be dropped at any time: they go, and loads write sealed ones as they fold.
TRUNCATE eventstore.snapshots;

ALTER TABLE eventstore.snapshots
    ADD COLUMN event_hash text NOT NULL,
    ADD COLUMN state_hash text NOT NULL;
