-- The console's saga list (projections.saga_browse): one tenant's sagas, newest first, a
-- keyset page at a time, filtered by status, by definition, or to the stuck ones (not
-- terminal, no progress for a while). Each filter has an index that leads with the tenant
-- and ends with the page order, so a page is one index range scan whatever the table size.
-- The age filter is a range of that order and needs none (0002's index and these serve it).
-- Table sets copy the template's indexes when they are created; those created before this
-- migration get them here.
CREATE INDEX saga_summary_template_tenant_state_started_idx
    ON projections.saga_summary_template (tenant, state, started_at DESC, saga_id DESC);
CREATE INDEX saga_summary_template_tenant_definition_started_idx
    ON projections.saga_summary_template
       (tenant, definition_name, started_at DESC, saga_id DESC);
-- Only sagas still at work: small next to the terminal ones, and what "stuck" scans.
CREATE INDEX saga_summary_template_tenant_open_started_idx
    ON projections.saga_summary_template (tenant, started_at DESC, saga_id DESC)
    WHERE state NOT IN ('COMPLETED', 'COMPENSATED', 'PARTIALLY_COMPENSATED',
                        'COMMITTED_WITH_REPAIR');

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
                ' (tenant, state, started_at DESC, saga_id DESC)',
                summary || '_tenant_state_started_idx', summary);
            EXECUTE format(
                'CREATE INDEX IF NOT EXISTS %I ON projections.%I'
                ' (tenant, definition_name, started_at DESC, saga_id DESC)',
                summary || '_tenant_definition_started_idx', summary);
            EXECUTE format(
                'CREATE INDEX IF NOT EXISTS %I ON projections.%I'
                ' (tenant, started_at DESC, saga_id DESC)'
                ' WHERE state NOT IN (''COMPLETED'', ''COMPENSATED'','
                ' ''PARTIALLY_COMPENSATED'', ''COMMITTED_WITH_REPAIR'')',
                summary || '_tenant_open_started_idx', summary);
        END IF;
    END LOOP;
END $$;
