-- Whether a saga's last error was recovered from (projections.record.last_error_recovered): the
-- operation it was about has since succeeded, by a retry or by a lookup that found its
-- effect. Screens show such an error as recovered, not as a live problem (a COMPLETED saga
-- whose timeout was reconciled has no error to alarm anyone about).
-- Table sets copy the template's columns when they are created; those created before this
-- migration get the column here, false until `sagafleet projections rebuild` folds the log
-- again (this fold's meaning changed too: denied steps read `denied`, finished sagas'
-- phase `finished`).
ALTER TABLE projections.saga_summary_template
    ADD COLUMN last_error_recovered boolean NOT NULL DEFAULT false;

DO $$
DECLARE
    summary text;
BEGIN
    FOR summary IN
        SELECT 'saga_summary_v' || version FROM projections.table_sets WHERE name = 'sagas'
    LOOP
        IF to_regclass(format('projections.%I', summary)) IS NOT NULL THEN
            EXECUTE format(
                'ALTER TABLE projections.%I'
                ' ADD COLUMN IF NOT EXISTS last_error_recovered boolean NOT NULL DEFAULT false',
                summary);
        END IF;
    END LOOP;
END $$;
