"""SagaClient.wait in the test kit: the in-memory log wakes a waiter on its own appends."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from trip_inputs import TRIP_INPUT

from saga_core.contracts import SagaStatus
from sagafleet.testing import TestFleet

# Generous bound: the wait returns as soon as the saga pauses.
SETTLE_DEADLINE_S = 60.0


def test_a_wait_returns_when_the_test_fleet_runs_the_saga_to_its_approval():
    # given a trip above the approval limit, started but not yet run
    fleet = TestFleet()
    client = fleet.client(tenant="acme")
    saga = client.start("trip", {**TRIP_INPUT, "amount": 250_000}, key="kit-wait")
    # then a wait that only looks says it timed out
    assert not client.wait(saga.saga_id, 0).settled
    # when an agent waits in another thread while the fleet runs the saga
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(client.wait, saga.saga_id, SETTLE_DEADLINE_S)
        fleet.run_until_idle()
        waited = waiting.result()
    # then the wait returns settled at the approval
    assert waited.settled and waited.saga.status == SagaStatus.RUNNING
    assert [p["step_id"] for p in waited.saga.pending_approvals] == ["capture_payment"]
    # and once approved and run to the end, a wait returns the finished saga
    fleet.person("alice", tenant="acme").approve(saga.saga_id, "capture_payment")
    fleet.run_until_idle()
    done = client.wait(saga.saga_id, 0)
    assert done.settled and done.saga.status == SagaStatus.COMPLETED
