-- The exporter counts the sweeper's re-enqueues of the last window (projections.window).
CREATE INDEX IF NOT EXISTS redeliveries_recorded_idx ON fleet.redeliveries (recorded_at);
