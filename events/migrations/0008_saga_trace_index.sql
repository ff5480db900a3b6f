-- Lineage (issue 19): every event of a saga started with a lineage carries the saga's trace
-- id in its metadata (saga_trace_id); `sagafleet find --trace` reads a tenant's events of
-- one trace through this index. Partial: events written before lineage existed (and the
-- definitions' and anchors' streams) carry none and take no room in it.
CREATE INDEX events_tenant_saga_trace_idx
    ON eventstore.events (tenant_id, (metadata ->> 'saga_trace_id'), global_position)
    WHERE metadata ? 'saga_trace_id';
