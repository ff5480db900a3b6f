"""Fleet paths of tests/integration/fleet/test_fleet_paths.py and security/test_security.py
that are about the engine's decisions, not the servers: the same scenarios on TestFleet."""

from __future__ import annotations

import pytest
from trip_inputs import BOUNCING_INPUT, TRIP_INPUT

from application.client import IdempotencyConflict, InvalidRequest, SagaClient
from application.messages import StepCommand
from events.saga_log.streams import SagaNotFound
from saga_core.contracts import SagaStatus, StepKind
from saga_core.engine.events import (
    ApprovalGranted,
    ApprovalRequested,
    CancelRequested,
    StepStarted,
    StepSucceeded,
)
from saga_core.errors import ApprovalAltered, ApprovalExpired, ApprovalReplayed, NothingToResolve
from sagafleet.testing import TestFleet, TripTools

EXPENSIVE = {**TRIP_INPUT, "amount": 250_000}  # the capture waits for a human



def _books(fleet: TestFleet) -> TripTools:
    assert isinstance(fleet.tools, TripTools)
    return fleet.tools


def _awaiting_approval(fleet: TestFleet, tenant: str = "default") -> tuple[SagaClient, str]:
    client = fleet.client(tenant=tenant)
    saga_id = client.start("trip", EXPENSIVE, key="approval").saga_id
    fleet.run_until_idle()
    assert client.status(saga_id).pending_approvals
    return client, saga_id


def test_every_step_records_intent_before_its_result() -> None:
    fleet = TestFleet()
    saga_id = fleet.client().start("trip", TRIP_INPUT, key="happy").saga_id
    fleet.run_until_idle()
    events = fleet.events(saga_id)
    for step in ("hold_flight", "hold_hotel", "capture_payment", "send_itinerary"):
        started = [i for i, e in enumerate(events)
                   if isinstance(e, StepStarted) and e.step_id == step]
        done = [i for i, e in enumerate(events)
                if isinstance(e, StepSucceeded) and e.step_id == step]
        assert started and done and started[0] < done[0]


def test_same_key_returns_same_saga_other_input_is_refused() -> None:
    fleet = TestFleet()
    client = fleet.client()
    first = client.start("trip", TRIP_INPUT, key="same")
    again = client.start("trip", TRIP_INPUT, key="same")
    assert again.saga_id == first.saga_id and first.created and not again.created
    with pytest.raises(IdempotencyConflict):
        client.start("trip", {**TRIP_INPUT, "nights": 5}, key="same")


def test_rejection_at_the_pivot_compensates_in_dependency_order() -> None:
    fleet = TestFleet()
    saga_id = fleet.client().start("trip", BOUNCING_INPUT, key="reject").saga_id
    fleet.run_until_idle()
    assert fleet.state(saga_id).status is SagaStatus.COMPENSATED
    ledger = _books(fleet).ledger(saga_id)
    assert ledger.is_unwound and ledger.captured == TRIP_INPUT["amount"]
    order = [e.step_id for e in fleet.events(saga_id)
             if isinstance(e, StepSucceeded) and e.kind is StepKind.COMPENSATION]
    assert order[0] == "capture_payment"  # the refund before the holds it depends on
    assert set(order) == {"capture_payment", "hold_flight", "hold_hotel"}


def test_approval_granted_then_completed_and_a_second_click_is_a_no_op() -> None:
    fleet = TestFleet()
    _, saga_id = _awaiting_approval(fleet)
    assert _books(fleet).ledger(saga_id).captures == 0
    alice = fleet.person("alice")
    alice.approve(saga_id, "capture_payment")
    version = fleet.state(saga_id).version
    alice.approve(saga_id, "capture_payment")
    assert fleet.state(saga_id).version == version
    fleet.run_until_idle()
    assert fleet.state(saga_id).status is SagaStatus.COMPLETED
    assert _books(fleet).ledger(saga_id).captures == 1


def test_approval_denied_compensates_the_holds() -> None:
    fleet = TestFleet()
    _, saga_id = _awaiting_approval(fleet)
    fleet.person("bob").deny(saga_id, "capture_payment", reason="too expensive")
    fleet.run_until_idle()
    assert fleet.state(saga_id).status is SagaStatus.COMPENSATED
    assert _books(fleet).ledger(saga_id).is_unwound


def test_a_duplicate_message_has_no_second_effect() -> None:
    fleet = TestFleet()
    saga_id = fleet.client().start("trip", TRIP_INPUT, key="dup").saga_id
    command = StepCommand(saga_id=saga_id, step_id="hold_flight", kind=StepKind.FORWARD,
                          attempt=1)
    fleet.publisher.publish([command, command])
    fleet.run_until_idle()
    assert fleet.state(saga_id).status is SagaStatus.COMPLETED
    assert _books(fleet).ledger(saga_id).flight_holds == 1
    claims = [e for e in fleet.events(saga_id)
              if isinstance(e, StepStarted) and e.step_id == "hold_flight"]
    assert len(claims) == 1


def test_a_second_executor_handling_a_claimed_step_drops_it() -> None:
    fleet = TestFleet()
    saga_id = fleet.client().start("trip", TRIP_INPUT, key="race").saga_id
    command = StepCommand(saga_id=saga_id, step_id="hold_hotel", kind=StepKind.FORWARD,
                          attempt=1)
    verdicts = [fleet.executor.handle(command).verdict for _ in range(2)]
    assert verdicts == ["executed", "dropped"]
    assert _books(fleet).ledger(saga_id).hotel_holds == 1


def test_cancel_while_waiting_for_approval_releases_the_holds() -> None:
    fleet = TestFleet()
    client, saga_id = _awaiting_approval(fleet)
    client.as_actor("carol").cancel(saga_id, reason="customer changed plans")
    client.as_actor("carol").cancel(saga_id, reason="customer changed plans")
    fleet.run_until_idle()
    assert fleet.state(saga_id).status is SagaStatus.COMPENSATED
    assert _books(fleet).ledger(saga_id).is_unwound
    cancels = [e for e in fleet.events(saga_id) if isinstance(e, CancelRequested)]
    assert len(cancels) == 1 and cancels[0].actor == "carol"


def test_operator_actions_are_typed_before_anything_is_recorded() -> None:
    fleet = TestFleet()
    saga_id = fleet.client().start("trip", TRIP_INPUT, key="typed-resolve").saga_id
    operator = fleet.person("dana", roles={"operator"})
    before = fleet.state(saga_id).version
    with pytest.raises(InvalidRequest, match="delete_everything"):
        operator.resolve(saga_id, "delete_everything", reason="oops")
    with pytest.raises(InvalidRequest, match="no_such_step"):
        operator.resolve(saga_id, "skip", step_id="no_such_step", reason="oops")
    # nothing waits for a human yet, so even a valid action is refused and records nothing
    with pytest.raises(NothingToResolve):
        operator.resolve(saga_id, "skip", step_id="hold_flight", reason="not needed")
    assert fleet.state(saga_id).version == before


def test_one_tenant_cannot_read_approve_cancel_or_resolve_anothers_saga() -> None:
    fleet = TestFleet()
    _, saga_id = _awaiting_approval(fleet, tenant="acme")
    # an authenticated person of another tenant, holding every role there
    intruder = fleet.person("mallory", roles={"agent", "approver", "operator"},
                            tenant="globex")
    assert intruder.find("approval") is None
    for attempt in (
        lambda: intruder.status(saga_id),
        lambda: intruder.approve(saga_id, "capture_payment"),
        lambda: intruder.deny(saga_id, "capture_payment", reason="mine now"),
        lambda: intruder.cancel(saga_id, reason="mine now"),
        lambda: intruder.resolve(saga_id, "resume", reason="mine now"),
    ):
        with pytest.raises(SagaNotFound):
            attempt()
    assert all(getattr(e, "actor", "") != "mallory" for e in fleet.events(saga_id))
    fleet.person("acme-ops", tenant="acme").approve(saga_id, "capture_payment")
    fleet.run_until_idle()
    assert fleet.state(saga_id).status is SagaStatus.COMPLETED


def test_same_key_in_two_tenants_is_two_sagas() -> None:
    fleet = TestFleet()
    one = fleet.client(tenant="acme").start("trip", TRIP_INPUT, key="shared-key")
    two = fleet.client(tenant="globex").start("trip", TRIP_INPUT, key="shared-key")
    assert one.saga_id != two.saga_id and (one.tenant, two.tenant) == ("acme", "globex")


# -- approvals bound to identity, hash, scope and expiry (security/test_security.py and
#    reliability/test_recovery_paths.py, the parts about the engine's decisions)


def test_an_approval_is_bound_to_its_action_hash_its_expiry_and_a_single_grant() -> None:
    fleet = TestFleet()
    client, saga_id = _awaiting_approval(fleet)
    (pending,) = client.status(saga_id).pending_approvals
    assert pending["scope"] and pending["expires_at"]
    alice = fleet.person("alice")
    with pytest.raises(ApprovalAltered):
        alice.approve(saga_id, "capture_payment", action_hash="0" * 64)
    alice.approve(saga_id, "capture_payment", action_hash=pending["action_hash"])
    version = fleet.state(saga_id).version
    alice.approve(saga_id, "capture_payment", action_hash=pending["action_hash"])
    assert fleet.state(saga_id).version == version  # a replayed click records nothing
    grants = [e for e in fleet.events(saga_id) if isinstance(e, ApprovalGranted)]
    assert [(g.approver, g.action_hash) for g in grants] == [("alice", pending["action_hash"])]
    fleet.run_until_idle()
    assert fleet.state(saga_id).status is SagaStatus.COMPLETED
    assert _books(fleet).ledger(saga_id).captures == 1


def test_a_denied_approval_cannot_be_replayed_as_a_grant() -> None:
    fleet = TestFleet()
    client, saga_id = _awaiting_approval(fleet)
    (pending,) = client.status(saga_id).pending_approvals
    fleet.person("bob").deny(saga_id, "capture_payment", reason="no")
    with pytest.raises(ApprovalReplayed):
        fleet.person("alice").approve(saga_id, "capture_payment",
                                      action_hash=pending["action_hash"])
    fleet.run_until_idle()
    assert fleet.state(saga_id).status is SagaStatus.COMPENSATED
    assert _books(fleet).ledger(saga_id).captures == 0


def test_an_approval_expiring_while_nothing_runs_is_refused_late_and_asked_again() -> None:
    fleet = TestFleet()
    client, saga_id = _awaiting_approval(fleet)
    (first,) = client.status(saga_id).pending_approvals
    fleet.clock.advance(2 * 3600)  # two hours pass with no sweeper and no worker
    alice = fleet.person("alice")
    with pytest.raises(ApprovalExpired):
        alice.approve(saga_id, "capture_payment", action_hash=first["action_hash"])
    fleet.sweep()  # recovery asks again, with a fresh expiry and the reason as evidence
    requests = [e for e in fleet.events(saga_id) if isinstance(e, ApprovalRequested)]
    assert len(requests) == 2 and requests[1].expires_at > requests[0].expires_at
    assert requests[1].evidence.reason == "approval expired"
    alice.approve(saga_id, "capture_payment")
    fleet.run_until_idle()
    events = fleet.events(saga_id)
    (grant,) = [e for e in events if isinstance(e, ApprovalGranted)]
    capture = next(e for e in events
                   if isinstance(e, StepStarted) and e.step_id == "capture_payment")
    assert events.index(capture) > events.index(grant)
    ledger = _books(fleet).ledger(saga_id)
    assert ledger.is_complete_trip and ledger.captures == 1 and not ledger.duplicates
