"""The grant of a gated step is re-checked when a worker claims it, on the real fleet
(PostgreSQL event store, Redis broker, sandbox providers): a grant that expired between the
approval and the claim claims nothing, calls no tool, and a person is asked again."""

from __future__ import annotations

from datetime import timedelta

from fleet_harness import events_of, shifted_fleet
from trip_inputs import TRIP_INPUT

from application.messages import StepCommand
from saga_core.access.roles import Principal, PrincipalKind
from saga_core.contracts import SagaStatus, StepKind
from saga_core.engine.events import ApprovalGranted, ApprovalRequested, StepStarted
from sagafleet.sandbox import ledger_for_saga

F = StepKind.FORWARD
CAPTURE = "capture_payment"
ALICE = Principal("default", "alice", PrincipalKind.PERSON, frozenset({"approver"}))


def _command(saga_id: str, step_id: str, attempt: int) -> StepCommand:
    return StepCommand(saga_id=saga_id, step_id=step_id, kind=F, attempt=attempt)


def _capture_claims(fleet, saga_id: str) -> list[StepStarted]:
    return [e for e in events_of(fleet, saga_id)
            if isinstance(e, StepStarted) and e.step_id == CAPTURE]


def test_a_grant_expired_between_approval_and_claim_runs_nothing_and_asks_again(
    fleet, database, broker
):
    # given an agent's trip above the capture gate's limit, its holds run by this process
    saga_id = fleet.client(actor="planner").start(
        "trip", {**TRIP_INPUT, "amount": 250_000}, key="grant-expiry").saga_id
    for step in ("hold_flight", "hold_hotel"):
        assert fleet.executor.handle(_command(saga_id, step, 1)).verdict == "executed"
    (asked,) = [e for e in events_of(fleet, saga_id) if isinstance(e, ApprovalRequested)]
    assert (asked.step_id, asked.role, asked.risk_class) == (CAPTURE, "approver", "money")
    # and a person approves it now: the capture is scheduled under a 15-minute grant
    fleet.client_for(ALICE).approve(saga_id, CAPTURE)
    assert fleet.repo.load(saga_id).state.run(CAPTURE, F).status == "scheduled"
    # when a worker whose clock says an hour later picks up the capture's command
    later = shifted_fleet(database, broker, timedelta(hours=1))
    try:
        outcome = later.executor.handle(_command(saga_id, CAPTURE, 1))
        # then nothing was claimed or executed, and a person is asked again
        assert outcome.verdict == "dropped" and "grant expired" in outcome.reason
        assert _capture_claims(later, saga_id) == []
        assert ledger_for_saga(later.sandbox_pool, saga_id).captures == 0
        events = events_of(later, saga_id)
        again = events[-1]
        assert isinstance(again, ApprovalRequested) and again.step_id == CAPTURE
        assert "grant expired" in again.evidence.reason
        assert later.client().status(saga_id).pending_approvals
        # and once a person answers the new request, the capture runs exactly once
        later.client_for(ALICE).approve(saga_id, CAPTURE)
        attempt = later.repo.load(saga_id).state.run(CAPTURE, F).attempt
        assert later.executor.handle(_command(saga_id, CAPTURE, attempt)).verdict == "executed"
        assert len([e for e in events_of(later, saga_id)
                    if isinstance(e, ApprovalGranted)]) == 2
        assert len(_capture_claims(later, saga_id)) == 1
        assert ledger_for_saga(later.sandbox_pool, saga_id).captures == 1
        assert later.repo.load(saga_id).state.status is SagaStatus.RUNNING
    finally:
        later.close()
