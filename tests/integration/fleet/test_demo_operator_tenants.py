"""The demo's and the chaos run's operator answers every tenant's approval requests, each
with a person of that tenant, on the real fleet (PostgreSQL event store, Redis broker,
sandbox providers); a request it cannot answer is counted, never passed over silently.

Regression: the chaos run's operator was one approver of the default tenant, so every
request of the agent's (acme) sagas was refused as SagaNotFound -- another tenant's saga is
invisible -- and swallowed; each expired three times and 462 of 1000 sagas ended in
MANUAL_INTERVENTION ("approval expired; no usable approval after 3 requests")."""

from __future__ import annotations

from fleet_harness import events_of
from principal_support import authenticated
from trip_inputs import TRIP_INPUT

from application.messages import StepCommand
from saga_core.contracts import StepKind
from saga_core.engine.events import ApprovalDenied, ApprovalGranted, SagaEvent
from sagafleet.demo import Operator

CAPTURE = "capture_payment"
ABOVE_GATE = {**TRIP_INPUT, "amount": 150_000}  # over the catalogue's capture gate


def _awaiting_capture_approval(fleet, tenant: str, key: str) -> str:
    """A trip of ``tenant`` whose holds ran in this process, now asking for a person."""
    saga_id = fleet.client(tenant=tenant, actor="planner").start(
        "trip", ABOVE_GATE, key=key).saga_id
    for step in ("hold_flight", "hold_hotel"):
        command = StepCommand(saga_id=saga_id, step_id=step, kind=StepKind.FORWARD, attempt=1)
        assert fleet.executor.handle(command).verdict == "executed"
    assert fleet.repo.load(saga_id).state.run(CAPTURE, StepKind.FORWARD).status == (
        "awaiting_approval")
    return saga_id


def _answers(fleet, saga_id: str) -> list[tuple[str, str, str]]:
    found: list[SagaEvent] = [e for e in events_of(fleet, saga_id)
                              if isinstance(e, ApprovalGranted | ApprovalDenied)]
    return [(type(e).__name__, e.step_id, e.approver) for e in found]


def test_the_operator_answers_each_tenants_requests_with_a_person_of_that_tenant(fleet, broker):
    # given sagas of two tenants waiting for a capture approval (the first one reviewed is
    # the request the operator leaves to expire)
    expiring = _awaiting_capture_approval(fleet, "default", "op-expiring")
    ours = _awaiting_capture_approval(fleet, "default", "op-default")
    theirs = _awaiting_capture_approval(fleet, "acme", "op-acme")
    # and an operator with an approver in each tenant
    operator = Operator(authenticated(fleet, "demo-approver"),
                        approvers={"acme": authenticated(fleet, "demo-approver",
                                                         tenant="acme")})
    # when it reviews them
    for saga_id in (expiring, ours, theirs):
        operator.review(fleet, fleet.repo.load(saga_id))
    # then both tenants' requests were answered, each by that tenant's approver (the
    # operator's second answer is its denial), and nothing was refused
    assert _answers(fleet, expiring) == []
    assert _answers(fleet, ours) == [("ApprovalGranted", CAPTURE, "demo-approver")]
    assert _answers(fleet, theirs) == [("ApprovalDenied", CAPTURE, "demo-approver")]
    assert fleet.repo.load(theirs).tenant == "acme"
    assert operator.answered == {"approved": 1, "denied": 1}
    assert operator.refused == {}


def test_a_request_the_operator_cannot_answer_is_counted_by_why(fleet, broker):
    # given an acme saga waiting for a person, after a default saga left to expire
    expiring = _awaiting_capture_approval(fleet, "default", "op-expiring")
    theirs = _awaiting_capture_approval(fleet, "acme", "op-acme")
    # and an operator who has an approver of the default tenant only
    operator = Operator(authenticated(fleet, "demo-approver"))
    # when it reviews both
    for saga_id in (expiring, theirs):
        operator.review(fleet, fleet.repo.load(saga_id))
    # then it answered nothing and says why it could not
    assert _answers(fleet, theirs) == []
    assert operator.answered == {}
    assert operator.refused == {"no approver in tenant acme": 1}
    # and an approver of another tenant who tries anyway is refused by the fleet, counted
    # by the error's type (the saga is invisible to them)
    stray = Operator(authenticated(fleet, "demo-approver"),
                     approvers={"acme": authenticated(fleet, "demo-approver")},
                     expired_one=expiring)
    stray.review(fleet, fleet.repo.load(theirs))
    assert _answers(fleet, theirs) == []
    assert stray.refused == {"SagaNotFound": 1}
