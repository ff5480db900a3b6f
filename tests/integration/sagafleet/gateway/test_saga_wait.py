"""The saga_wait tool through the function router: it returns once a saga a real worker runs
waits for an approval, says when it timed out, and names a bad timeout."""

from __future__ import annotations

import time

from gateway_support import TRIP_INPUT

from saga_core.access.roles import Principal
from sagafleet.gateway import FunctionRouter, GatewayService

# Generous bound on the whole wait; each saga_wait call blocks 60 s at most.
SETTLE_DEADLINE_S = 180.0


def test_saga_wait_returns_when_the_saga_needs_a_person(fleet, workers):
    # given an agent that starts a trip above the approval limit while no worker runs
    router = FunctionRouter(GatewayService(fleet))
    who = Principal.in_process_agent("acme", "waiter-bot")
    started = router.call(who, "start_trip", {
        "input": {**TRIP_INPUT, "amount": 250_000}, "idempotency_key": "wait-1",
        "reason": "wait for it"})
    saga_id = started["saga_id"]
    # when it waits briefly with nobody running the saga
    waited = router.call(who, "saga_wait", {"saga_id": saga_id, "timeout_seconds": 0.2})
    # then the tool says it timed out, with the status and what to do next
    assert waited["timed_out"] and not waited["settled"], waited
    assert waited["status"] == "RUNNING" and "saga_wait again" in waited["next"]
    # when a real worker runs it and the agent waits (calling again if a wait times out)
    workers.start(1)
    deadline = time.monotonic() + SETTLE_DEADLINE_S
    while not waited["settled"] and time.monotonic() < deadline:
        waited = router.call(who, "saga_wait", {"saga_id": saga_id, "timeout_seconds": 60})
    # then it returns settled at the approval, which it shows as pending
    assert waited["settled"] and not waited["terminal"], waited
    assert [p["step"] for p in waited["pending"]] == ["capture_payment"]
    assert "waits for a person" in waited["next"]
    assert TRIP_INPUT["card_token"] not in repr(waited)


def test_saga_wait_names_a_bad_timeout_and_hides_other_tenants(fleet):
    router = FunctionRouter(GatewayService(fleet))
    who = Principal.in_process_agent("acme", "waiter-bot")
    saga_id = router.call(who, "start_trip", {
        "input": TRIP_INPUT, "idempotency_key": "wait-2", "reason": "r"})["saga_id"]
    for bad in (-1, 61, "10", True):
        rejected = router.call(who, "saga_wait", {"saga_id": saga_id, "timeout_seconds": bad})
        assert rejected["error"] == "ArgumentsRejected", rejected
        assert rejected["problems"][0]["where"] == "timeout_seconds"
    other = router.call(Principal.in_process_agent("beta", "x"), "saga_wait",
                        {"saga_id": saga_id, "timeout_seconds": 0})
    assert other["error"] == "SagaNotFound"
    # and a timeout of 0 only looks
    looked = router.call(who, "saga_wait", {"saga_id": saga_id, "timeout_seconds": 0})
    assert looked["timed_out"] and looked["saga_id"] == saga_id
