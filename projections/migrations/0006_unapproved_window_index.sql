-- The executed_before_approval alert is an incident window (projections.alerts): the steps
-- run without their approval whose first start is within the metrics window. A partial
-- index on first_started_at over those runs only makes that one short range scan, however
-- many such runs history holds (0003's partial index on saga_id served the alert when it
-- never cleared; it is kept, it costs nothing while such runs are rare).
-- Table sets copy the template's indexes when they are created; those created before this
-- migration get it here.
CREATE INDEX step_runs_template_unapproved_started_idx
    ON projections.step_runs_template (first_started_at) WHERE started_without_approval;

DO $$
DECLARE
    runs text;
BEGIN
    FOR runs IN
        SELECT 'step_runs_v' || version FROM projections.table_sets WHERE name = 'sagas'
    LOOP
        IF to_regclass(format('projections.%I', runs)) IS NOT NULL THEN
            EXECUTE format(
                'CREATE INDEX IF NOT EXISTS %I ON projections.%I (first_started_at)'
                ' WHERE started_without_approval',
                runs || '_unapproved_started_idx', runs);
        END IF;
    END LOOP;
END $$;
