-- The Prometheus exporter's windowed metrics (projections.window): every query it runs at
-- a scrape reads one of these indexes over the last window (SAGAFLEET_METRICS_WINDOW_SECONDS)
-- or over a set that only live problems keep small, never the whole history.
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

DO $$
DECLARE
    v integer;
BEGIN
    FOR v IN SELECT version FROM projections.table_sets WHERE name = 'sagas' LOOP
        IF to_regclass(format('projections.saga_summary_v%s', v)) IS NOT NULL THEN
            EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON projections.%I (started_at)',
                           'saga_summary_v' || v || '_started_idx', 'saga_summary_v' || v);
            EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON projections.%I (finished_at)'
                           ' WHERE finished_at IS NOT NULL',
                           'saga_summary_v' || v || '_finished_idx', 'saga_summary_v' || v);
            EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON projections.%I (updated_at)'
                           ' WHERE finished_at IS NULL',
                           'saga_summary_v' || v || '_unfinished_idx', 'saga_summary_v' || v);
        END IF;
        IF to_regclass(format('projections.step_runs_v%s', v)) IS NOT NULL THEN
            EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON projections.%I (changed_at)',
                           'step_runs_v' || v || '_changed_idx', 'step_runs_v' || v);
            EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON projections.%I (saga_id)'
                           ' WHERE successes > 1 OR distinct_receipts > 1',
                           'step_runs_v' || v || '_duplicates_idx', 'step_runs_v' || v);
        END IF;
    END LOOP;
END $$;
