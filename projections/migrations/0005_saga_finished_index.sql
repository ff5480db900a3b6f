-- The console's health charts (projections.trends): one tenant's sagas that finished in a
-- window, bucketed by when they finished (throughput, compensation rate, time to terminal).
-- An index that leads with the tenant and orders by finished_at makes that one index range
-- scan over the window, whatever the table size; sagas still running (finished_at NULL) are
-- not in it. The charts by start time use 0002's (tenant, started_at) index.
-- Table sets copy the template's indexes when they are created; those created before this
-- migration get it here. (Numbered 0005: 0003 is the metrics windows' indexes, and the saga
-- list's filters take the next free number.)
CREATE INDEX saga_summary_template_tenant_finished_idx
    ON projections.saga_summary_template (tenant, finished_at)
    WHERE finished_at IS NOT NULL;

DO $$
DECLARE
    summary text;
BEGIN
    FOR summary IN
        SELECT 'saga_summary_v' || version FROM projections.table_sets WHERE name = 'sagas'
    LOOP
        IF to_regclass(format('projections.%I', summary)) IS NOT NULL THEN
            EXECUTE format(
                'CREATE INDEX IF NOT EXISTS %I ON projections.%I (tenant, finished_at)'
                ' WHERE finished_at IS NOT NULL',
                summary || '_tenant_finished_idx', summary);
        END IF;
    END LOOP;
END $$;
