-- The Prometheus exporter's windowed metrics (projections.window): every query it runs at
-- a scrape reads one of these indexes over the last window (SAGAFLEET_METRICS_WINDOW_SECONDS)
-- or over a set only live problems keep small, never the whole history. The last three
-- serve the business alerts (projections.alerts), which the exporter reads too.
-- Table sets copy the template's indexes when they are created; those created before this
-- migration get them here.
CREATE INDEX saga_summary_template_started_idx
    ON projections.saga_summary_template (started_at);
CREATE INDEX saga_summary_template_finished_idx
    ON projections.saga_summary_template (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX saga_summary_template_unfinished_idx
    ON projections.saga_summary_template (updated_at) WHERE finished_at IS NULL;
CREATE INDEX step_runs_template_changed_idx
    ON projections.step_runs_template (changed_at);
CREATE INDEX step_runs_template_duplicates_idx
    ON projections.step_runs_template (saga_id)
    WHERE successes > 1 OR distinct_receipts > 1;
CREATE INDEX step_runs_template_unapproved_idx
    ON projections.step_runs_template (saga_id) WHERE started_without_approval;
CREATE INDEX step_runs_template_in_doubt_idx
    ON projections.step_runs_template (changed_at)
    WHERE status IN ('unknown', 'reconciling', 'found', 'absent');
CREATE INDEX step_runs_template_open_compensation_idx
    ON projections.step_runs_template (changed_at)
    WHERE kind = 'compensation' AND status NOT IN ('succeeded', 'forced', 'skipped');

DO $$
DECLARE
    v integer;
    summary text;
    runs text;
BEGIN
    FOR v IN SELECT version FROM projections.table_sets WHERE name = 'sagas' LOOP
        summary := 'saga_summary_v' || v;
        runs := 'step_runs_v' || v;
        IF to_regclass(format('projections.%I', summary)) IS NOT NULL THEN
            EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON projections.%I (started_at)',
                           summary || '_started_idx', summary);
            EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON projections.%I (finished_at)'
                           ' WHERE finished_at IS NOT NULL', summary || '_finished_idx', summary);
            EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON projections.%I (updated_at)'
                           ' WHERE finished_at IS NULL', summary || '_unfinished_idx', summary);
        END IF;
        IF to_regclass(format('projections.%I', runs)) IS NOT NULL THEN
            EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON projections.%I (changed_at)',
                           runs || '_changed_idx', runs);
            EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON projections.%I (saga_id)'
                           ' WHERE successes > 1 OR distinct_receipts > 1',
                           runs || '_duplicates_idx', runs);
            EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON projections.%I (saga_id)'
                           ' WHERE started_without_approval', runs || '_unapproved_idx', runs);
            EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON projections.%I (changed_at)'
                           ' WHERE status IN (%L, %L, %L, %L)', runs || '_in_doubt_idx', runs,
                           'unknown', 'reconciling', 'found', 'absent');
            EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON projections.%I (changed_at)'
                           ' WHERE kind = %L AND status NOT IN (%L, %L, %L)',
                           runs || '_open_compensation_idx', runs,
                           'compensation', 'succeeded', 'forced', 'skipped');
        END IF;
    END LOOP;
END $$;
