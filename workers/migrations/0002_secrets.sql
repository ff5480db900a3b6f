-- Values of input fields a definition marks secret. They never enter the event log: the
-- log holds a {"$secret": name} placeholder, and a worker reveals the value only in the
-- arguments it hands to the tool. Rows are deleted once the saga has finished.
CREATE TABLE fleet.secrets (
    saga_id    text NOT NULL,
    name       text NOT NULL,
    value      jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (saga_id, name)
);
