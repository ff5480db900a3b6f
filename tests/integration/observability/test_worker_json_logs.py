"""A real ``sagafleet worker`` with ``SAGAFLEET_LOG_FORMAT=json`` logs JSON lines that name
the saga and step each tool call was for."""

from __future__ import annotations

import json

from fleet_harness import SandboxFleet, WorkerProcesses, settle
from trip_inputs import TRIP_INPUT

from saga_core.contracts import SagaStatus


def test_a_worker_logs_json_lines_with_saga_and_step_ids(
        fleet: SandboxFleet, workers: WorkerProcesses) -> None:
    # given a worker logging JSON at INFO
    [worker] = workers.start(1, extra_env={"SAGAFLEET_LOG_FORMAT": "json"},
                             args=("--loglevel", "INFO"))
    # when it runs a trip
    saga = fleet.client().start("trip", TRIP_INPUT, key="json-logs").saga_id
    assert settle(fleet, [saga]) == {saga: SagaStatus.COMPLETED}
    workers.stop()
    # then its log records are JSON objects (Celery's own among them)
    log = (workers.log_dir / "worker-0.log").read_text()
    records = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    assert any(r["logger"].startswith("celery") for r in records)
    # and each tool call's line names the saga, its step, kind and attempt
    calls = [r for r in records if r["logger"] == "workers.executor"]
    assert {r["step_id"] for r in calls} == {
        "hold_flight", "hold_hotel", "capture_payment", "send_itinerary"}
    assert all(r["saga_id"] == saga and r["kind"] == "forward" and r["attempt"] == 1
               and r["level"] == "INFO" and "succeeded" in r["message"] for r in calls)
    assert worker.returncode is not None
