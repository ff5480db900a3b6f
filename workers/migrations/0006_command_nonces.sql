-- Signed agent commands are single-use (workers.signed_commands, README "Signed commands"):
-- the first message carrying a (kid, command_id) records its Celery task id here; a later
-- message with the same pair and the same task id is a redelivery of that message (acks
-- late, a killed worker, a requeued dead letter) and proceeds, one with another task id is
-- a replay and is refused. A row is needed only while a copy could still pass the time
-- window: the sweeper deletes it once kept_until (expires_at plus the clock skew) is past,
-- so the table holds at most the commands of the last MAX_LIFETIME.
CREATE TABLE fleet.command_nonces (
    kid         text NOT NULL,
    command_id  text NOT NULL,
    task_id     text NOT NULL,
    task        text NOT NULL,
    kept_until  timestamptz NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kid, command_id)
);
CREATE INDEX command_nonces_kept_until_idx ON fleet.command_nonces (kept_until);

-- Why a signed command was refused (saga_core.signed_commands.Refusal: unsigned,
-- bad_signature, replayed, expired, ...), NULL for every other dead letter: counted per
-- refusal by the metrics, shown by `sagafleet dead-letters`.
ALTER TABLE fleet.dead_letters ADD COLUMN refusal text;
CREATE INDEX dead_letters_refusal_idx ON fleet.dead_letters (refusal) WHERE refusal IS NOT NULL;
