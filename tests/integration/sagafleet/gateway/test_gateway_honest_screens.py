"""What an agent reads over the gateway (the MCP tools' ``saga_status``) is honest: a denied
step reads denied and names who denied it, nothing waits once the saga finished, and an error
its step recovered from is told apart from a live one."""

from __future__ import annotations

from fleet_harness import drive, drive_until_it_asks
from gateway_support import TRIP_INPUT
from principal_support import person

from saga_core.access.roles import Principal
from saga_core.contracts import SagaStatus
from sagafleet.gateway import FunctionRouter, GatewayService
from sagafleet.sandbox.faults import Boundary


def _step(status: dict, step_id: str) -> dict:
    return next(s for s in status["steps"] if s["step"] == step_id and s["kind"] == "forward")


def test_saga_status_reads_a_denied_step_as_denied_once_the_saga_compensated(fleet):
    # given an agent's trip whose capture a person of its tenant denied
    router = FunctionRouter(GatewayService(fleet))
    agent = Principal.in_process_agent("acme", "fc-bot")
    started = router.call(agent, "start_trip", {"input": TRIP_INPUT | {"amount": 250_000},
                                                "idempotency_key": "deny-1", "reason": "r"})
    saga_id = started["saga_id"]
    drive_until_it_asks(fleet, saga_id)
    person(fleet, "bea", tenant="acme").deny(saga_id, "capture_payment", reason="no")
    assert drive(fleet, saga_id) is SagaStatus.COMPENSATED
    # when the agent reads its status
    status = router.call(agent, "saga_status", {"saga_id": saga_id})
    # then the capture is denied, by bea, and nothing is pending any more
    capture = _step(status, "capture_payment")
    assert (capture["status"], capture["denied_by"]) == ("denied", "bea")
    assert status["status"] == "COMPENSATED" and status["terminal"]
    assert status["pending"] == []
    assert not [s for s in status["steps"] if s["status"] in ("awaiting_approval", "scheduled")]


def test_saga_status_tells_a_recovered_error_from_a_live_one(fleet, faults):
    # given a trip whose flight hold failed once (503) and succeeded on its retry
    faults.add("flights", "hold", Boundary.FAIL_BEFORE_COMMIT, count=1)
    router = FunctionRouter(GatewayService(fleet))
    agent = Principal.in_process_agent("acme", "fc-bot")
    saga_id = router.call(agent, "start_trip", {"input": TRIP_INPUT, "idempotency_key": "rec-1",
                                                "reason": "r"})["saga_id"]
    assert drive(fleet, saga_id) is SagaStatus.COMPLETED
    # when the agent reads its status
    flight = _step(router.call(agent, "saga_status", {"saga_id": saga_id}), "hold_flight")
    # then the hold succeeded, and its earlier failure is history, not an error
    assert flight["status"] == "succeeded"
    assert "error" not in flight and flight["recovered_error"].startswith("Transient")
