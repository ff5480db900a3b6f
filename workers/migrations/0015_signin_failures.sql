-- Failed console sign-ins, counted per client address and per token prefix
-- (sagafleet.console.throttle): past a few failures in a window, further sign-ins of that
-- address or prefix are slowed. Shared in the database, not kept per process, so a console
-- run as several replicas behind a load balancer counts one attacker once. A key is a
-- sha256 digest (of "address:<address or IPv6 /64>" or "token:<a token's first
-- characters>"): no part of a token is kept in clear. A row counts one window from its first
-- failure; every failure deletes the rows whose window has passed.
CREATE TABLE fleet.signin_failures (
    key_digest        text PRIMARY KEY CHECK (length(key_digest) = 64),
    failures          integer NOT NULL CHECK (failures > 0),
    window_started_at timestamptz NOT NULL,
    last_failed_at    timestamptz NOT NULL
);
CREATE INDEX signin_failures_window_idx ON fleet.signin_failures (window_started_at);
