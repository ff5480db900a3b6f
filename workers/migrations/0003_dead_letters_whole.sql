-- A dead letter keeps the whole message, so an operator can requeue it once whatever made it
-- fail is fixed (or discard it, saying why). Rows are never deleted: the number recorded is
-- a counter, the open ones are what waits for an operator.
ALTER TABLE fleet.dead_letters
    ALTER COLUMN body DROP NOT NULL,
    -- the message as it arrived: {"args": [...], "kwargs": {...}} (see workers.dead_letters)
    ADD COLUMN message     jsonb,
    -- the Celery task id: a requeue publishes the message again under the same id
    ADD COLUMN task_id     text,
    -- saga_core.errors.ErrorKind of the failure that made the command impossible
    ADD COLUMN error_kind  text,
    ADD COLUMN status      text NOT NULL DEFAULT 'open'
        CHECK (status IN ('open', 'requeued', 'discarded')),
    ADD COLUMN resolved_by text,
    ADD COLUMN resolved_at timestamptz,
    ADD COLUMN resolution  text,
    ADD CONSTRAINT dead_letters_resolved_when_closed
        CHECK ((status = 'open') = (resolved_at IS NULL));

COMMENT ON COLUMN fleet.dead_letters.body IS
    'before migration 0003 only: the message as text, truncated to 4000 characters';

-- A redelivered message that fails again while its letter is open adds no second letter.
CREATE UNIQUE INDEX dead_letters_open_message_idx
    ON fleet.dead_letters (task, task_id) WHERE status = 'open' AND task_id IS NOT NULL;
CREATE INDEX dead_letters_open_idx ON fleet.dead_letters (id) WHERE status = 'open';
