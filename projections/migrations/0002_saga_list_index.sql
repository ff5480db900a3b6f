-- `sagafleet list`: one tenant's sagas, newest first, a keyset page at a time
-- (projections.listing). Table sets copy the template's indexes when they are created;
-- those created before this migration get the index here.
CREATE INDEX saga_summary_template_tenant_started_idx
    ON projections.saga_summary_template (tenant, started_at DESC, saga_id DESC);

DO $$
DECLARE
    summary text;
BEGIN
    FOR summary IN
        SELECT 'saga_summary_v' || version FROM projections.table_sets WHERE name = 'sagas'
    LOOP
        IF to_regclass(format('projections.%I', summary)) IS NOT NULL THEN
            EXECUTE format(
                'CREATE INDEX IF NOT EXISTS %I ON projections.%I'
                ' (tenant, started_at DESC, saga_id DESC)',
                summary || '_tenant_started_idx', summary);
        END IF;
    END LOOP;
END $$;
