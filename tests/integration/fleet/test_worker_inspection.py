"""The fleet's workers as the console lists them: Celery's remote control, asked once."""

from __future__ import annotations

import time

from trip_inputs import TRIP_INPUT

from saga_core.contracts import SagaStatus
from workers.celery_app import STEP_TASK
from workers.inspection import InspectionOutcome, inspect_fleet


def test_a_running_worker_answers_with_its_hostname_and_processed_counts(
    fleet, workers, wait_settled
):
    # given one real worker that has run a trip to completion
    [proc] = workers.start(1)
    saga = fleet.client().start("trip", TRIP_INPUT, key="inspected-trip")
    assert wait_settled(saga.saga_id) is SagaStatus.COMPLETED

    # when the fleet is inspected (looking again while the worker is still starting up)
    inspection = inspect_fleet(fleet.celery, remote_control=True, timeout_s=1.0)
    for _ in range(20):
        if inspection.outcome is InspectionOutcome.ANSWERED:
            break
        time.sleep(0.5)
        inspection = inspect_fleet(fleet.celery, remote_control=True, timeout_s=1.0)

    # then that worker is listed, by hostname and pid, with the step tasks it processed
    assert inspection.outcome is InspectionOutcome.ANSWERED, inspection.message
    [worker] = inspection.workers
    assert "@" in worker.hostname and worker.pid == proc.pid
    # (a worker runs the steps a commit claims for it in place: one message, at least)
    assert worker.processed.get(STEP_TASK, 0) >= 1
    assert worker.processed_total >= worker.processed[STEP_TASK]
    assert inspection.message == "1 worker(s) answered"


def test_with_remote_control_off_the_fleet_says_so_instead_of_listing_nobody(fleet):
    inspection = inspect_fleet(fleet.celery, remote_control=False)
    assert inspection.outcome is InspectionOutcome.REMOTE_CONTROL_OFF
    assert inspection.workers == []
    assert "SAGAFLEET_CELERY_REMOTE_CONTROL=false" in inspection.message


def test_with_no_worker_running_nobody_answers_and_the_wait_is_named(fleet):
    inspection = inspect_fleet(fleet.celery, remote_control=True, timeout_s=0.3)
    assert inspection.outcome is InspectionOutcome.NO_REPLY
    assert "no worker answered within 0.3 s" in inspection.message
