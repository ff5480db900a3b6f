-- Tenant windows of gated amounts (a risk gate's `tenant_window`, saga_core.totals): every
-- claim of a call whose gate declares one reserves its amount here, in the claim's own
-- transaction, and only if the window's total over its sliding period stays within the
-- limit (or a person approved going over it). The window's row in gate_windows is locked
-- (SELECT ... FOR UPDATE) for the sum and the insert, so two sagas of the tenant claiming at
-- once are ordered: the second sums after the first committed, and never both slip under.
-- A reservation stops counting (released_at) when its call turns out to have had no effect
-- (a definite failure, or its compensation done); rows older than the longest window
-- (31 days) are deleted by the next reservation in the same window.
CREATE TABLE fleet.gate_windows (
    tenant     text NOT NULL,
    window_key text NOT NULL,  -- "<tool>:<amount argument>"
    PRIMARY KEY (tenant, window_key)
);
CREATE TABLE fleet.gate_window_reservations (
    operation_key text PRIMARY KEY,
    tenant        text NOT NULL,
    window_key    text NOT NULL,
    amount        numeric NOT NULL CHECK (amount >= 0),
    reserved_at   timestamptz NOT NULL,
    released_at   timestamptz,
    FOREIGN KEY (tenant, window_key) REFERENCES fleet.gate_windows (tenant, window_key)
);
CREATE INDEX gate_window_reservations_window_idx
    ON fleet.gate_window_reservations (tenant, window_key, reserved_at);
