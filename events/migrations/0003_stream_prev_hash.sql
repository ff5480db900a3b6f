-- The single-event append (events.appending) moves a stream's head with one
-- UPDATE ... RETURNING instead of SELECT ... FOR UPDATE followed by UPDATE: the row lock
-- and the new row version are then one heap write, not two. RETURNING yields only the new
-- row, so the head also keeps the hash it replaced: the appended event's prev_hash.
-- NULL until the stream's next single-event append; nothing else reads it.
ALTER TABLE eventstore.streams ADD COLUMN prev_hash text;
