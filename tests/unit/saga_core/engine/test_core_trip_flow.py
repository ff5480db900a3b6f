"""Scenarios on the shipped trip saga: happy path, rejections, approvals, cancel."""

from __future__ import annotations

from datetime import timedelta

import pytest
from core_harness import RECEIPTS, C, F, Saga, kinds, person, trip_input

from saga_core import (
    ApprovalAltered,
    ApprovalDenied,
    ApprovalExpired,
    ApprovalNotPending,
    ApprovalReplayed,
    BeginCompensation,
    CancelRequested,
    ErrorClass,
    Finish,
    RequestApproval,
    SagaStatus,
    ScheduleCompensation,
    ScheduleStep,
    check_approval,
    resolve_arguments,
)
from sagafleet.example_sagas import trip_definition


@pytest.fixture
def trip() -> Saga:
    return Saga(trip_definition(), trip_input())


def test_happy_path_runs_holds_in_parallel_then_payment_then_itinerary(trip: Saga) -> None:
    # given a started trip; when the orchestrator decides
    first = trip.record()
    # then both holds are scheduled together (they are independent)
    assert first == [
        ScheduleStep("hold_flight", 1, trip.now, "dependencies done"),
        ScheduleStep("hold_hotel", 1, trip.now, "dependencies done"),
    ]
    trip.run_ok("hold_flight")
    assert trip.record() == []  # payment waits for the hotel
    trip.run_ok("hold_hotel")
    assert [d.step_id for d in trip.record()] == ["capture_payment"]  # type: ignore[attr-defined]
    args = resolve_arguments(trip.state, "capture_payment", F)
    assert args["amount"] == 45000 and isinstance(args["amount"], int)
    assert args["reference"] == "trip saga-1: flight FH-1, hotel HH-1"
    trip.run_ok("capture_payment")
    assert [d.step_id for d in trip.record()] == ["send_itinerary"]  # type: ignore[attr-defined]
    trip.run_ok("send_itinerary")
    # then the saga finishes COMPLETED, once
    done = trip.record()
    assert kinds(done) == ["Finish"]
    assert trip.state.status is SagaStatus.COMPLETED
    assert trip.decide() == []


def test_hotel_rejection_releases_only_the_flight(trip: Saga) -> None:
    trip.record()
    trip.run_ok("hold_flight")
    trip.claim("hold_hotel")
    trip.fail("hold_hotel", ErrorClass.BUSINESS_REJECTION, msg="sold out")
    assert trip.record() == [BeginCompensation("business rejection: sold out", "hold_hotel")]
    comp = trip.record()
    assert comp == [ScheduleCompensation("hold_flight", 1, trip.now, "dependents compensated")]
    # the compensation releases exactly the held resource, with its own stable key
    assert resolve_arguments(trip.state, "hold_flight", C) == {"hold_id": "FH-1"}
    forward_key = trip.state.run("hold_flight", F).operation_key
    assert trip.state.run("hold_flight", C).operation_key != forward_key
    trip.run_ok("hold_flight", C)
    assert trip.record() == [
        Finish(SagaStatus.COMPENSATED, "compensated: hold_flight (business rejection: sold out)")
    ]


def test_payment_rejection_compensates_both_holds_together(trip: Saga) -> None:
    trip.record()
    trip.run_ok("hold_flight")
    trip.run_ok("hold_hotel")
    trip.record()
    trip.claim("capture_payment")
    trip.fail("capture_payment", ErrorClass.BUSINESS_REJECTION, msg="card declined")
    trip.record()
    assert kinds(trip.record()) == ["ScheduleCompensation", "ScheduleCompensation"]
    trip.run_ok("hold_hotel", C)
    trip.run_ok("hold_flight", C)
    trip.record()
    assert trip.state.status is SagaStatus.COMPENSATED


def _at_payment(amount: int) -> Saga:
    saga = Saga(trip_definition(), trip_input(amount=amount))
    saga.record()
    saga.run_ok("hold_flight")
    saga.run_ok("hold_hotel")
    return saga


def test_payment_above_limit_waits_for_an_approval_bound_to_the_action() -> None:
    saga = _at_payment(250_000)
    (request,) = saga.record()
    assert isinstance(request, RequestApproval)
    # the evidence shows the action but never the secret card token
    assert "tok_secret_4242" not in request.evidence.model_dump_json()
    assert request.evidence.details["args"]["card_token"] == "<redacted>"
    assert saga.record() == []  # waiting for a human, asked once
    # an altered action is refused
    with pytest.raises(ApprovalAltered):
        check_approval(saga.state, "capture_payment", F, "0" * 64, person("bob"), saga.now)
    grant = check_approval(
        saga.state, "capture_payment", F, request.action_hash, person("bob"), saga.now
    )
    assert grant is not None
    saga.append(grant)
    # a second identical click is a no-op
    assert (
        check_approval(
            saga.state, "capture_payment", F, request.action_hash, person("bob"), saga.now
        )
        is None
    )
    assert saga.record() == [ScheduleStep("capture_payment", 1, saga.now, "approved")]
    with pytest.raises(ApprovalNotPending):
        check_approval(saga.state, "hold_hotel", F, request.action_hash, person("bob"), saga.now)


def test_expired_approval_request_is_asked_again_and_late_grant_refused() -> None:
    saga = _at_payment(250_000)
    (request,) = saga.record()
    saga.tick(3601)
    with pytest.raises(ApprovalExpired):
        check_approval(
            saga.state, "capture_payment", F, request.action_hash, person("bob"), saga.now
        )
    (again,) = saga.record()
    assert isinstance(again, RequestApproval) and again.evidence.reason == "approval expired"
    assert again.expires_at > request.expires_at


def test_denied_approval_before_pivot_is_a_business_rejection() -> None:
    saga = _at_payment(250_000)
    (request,) = saga.record()
    saga.append(
        ApprovalDenied(
            at=saga.now,
            step_id="capture_payment",
            kind=F,
            action_hash=request.action_hash,
            approver="bob",
            reason="too expensive",
        )
    )
    with pytest.raises(ApprovalReplayed):
        check_approval(
            saga.state, "capture_payment", F, request.action_hash, person("eve"), saga.now
        )
    assert kinds(saga.record()) == ["BeginCompensation"]
    assert kinds(saga.record()) == ["ScheduleCompensation", "ScheduleCompensation"]


def test_cancel_before_pivot_stops_forward_work_and_compensates(trip: Saga) -> None:
    trip.record()
    trip.run_ok("hold_flight")
    trip.claim("hold_hotel")  # in flight when the cancel arrives
    trip.append(CancelRequested(at=trip.now, actor="op", reason="customer changed plans"))
    assert kinds(trip.record()) == ["BeginCompensation"]
    # the in-flight hotel hold blocks nothing else but must settle before it is judged
    assert kinds(trip.record()) == ["ScheduleCompensation"]
    trip.succeed("hold_hotel")  # a receipt is a fact even during compensation
    assert kinds(trip.record()) == ["ScheduleCompensation"]
    trip.run_ok("hold_flight", C)
    trip.run_ok("hold_hotel", C)
    trip.record()
    assert trip.state.status is SagaStatus.COMPENSATED
    assert trip.state.forward["capture_payment"].status == "pending"  # never started


def test_cancel_after_pivot_cannot_roll_back(trip: Saga) -> None:
    trip.record()
    trip.run_ok("hold_flight")
    trip.run_ok("hold_hotel")
    trip.record()
    trip.run_ok("capture_payment")
    trip.record()
    trip.run_ok("send_itinerary")
    trip.append(CancelRequested(at=trip.now, actor="op"))
    (finish,) = trip.record()
    assert isinstance(finish, Finish) and finish.state is SagaStatus.COMPLETED
    assert "cancel arrived after the pivot" in finish.summary
    assert not any(r.status != "pending" for r in trip.state.compensation.values())


def test_cancel_while_pivot_in_flight_waits_for_its_outcome(trip: Saga) -> None:
    trip.record()
    trip.run_ok("hold_flight")
    trip.run_ok("hold_hotel")
    trip.record()
    trip.run_ok("capture_payment")
    trip.record()
    trip.claim("send_itinerary")
    trip.append(CancelRequested(at=trip.now, actor="op"))
    assert trip.record() == []  # no compensation while the point of no return is unknown
    trip.succeed("send_itinerary")
    assert trip.record()[0].state is SagaStatus.COMPLETED  # type: ignore[attr-defined]


def _payment_in_doubt_then_cancel() -> Saga:
    saga = Saga(trip_definition(), trip_input())
    saga.record()
    saga.run_ok("hold_flight")
    saga.run_ok("hold_hotel")
    saga.record()
    saga.claim("capture_payment")
    saga.unknown("capture_payment")
    saga.append(CancelRequested(at=saga.now, actor="op"))
    assert kinds(saga.record()) == ["BeginCompensation"]
    return saga


def test_compensation_waits_while_a_dependent_is_in_doubt_then_refunds_first() -> None:
    saga = _payment_in_doubt_then_cancel()
    # the holds are not released while the payment might have been captured
    assert kinds(saga.record()) == ["Reconcile"]
    saga.lookup("capture_payment", "found", receipt=RECEIPTS["capture_payment"])
    saga.record()  # accept the found receipt
    assert [d.step_id for d in saga.record()] == ["capture_payment"]  # type: ignore[attr-defined]
    assert resolve_arguments(saga.state, "capture_payment", C) == {
        "capture_id": "CP-1",
        "amount": 45000,
        "currency": "EUR",
    }
    saga.run_ok("capture_payment", C)
    assert [d.step_id for d in saga.record()] == ["hold_flight", "hold_hotel"]  # type: ignore[attr-defined]


def test_compensation_trusts_absence_only_after_the_commit_horizon() -> None:
    saga = _payment_in_doubt_then_cancel()
    unknown_at = saga.now
    saga.record()
    saga.lookup("capture_payment", "absent")
    (wait,) = saga.record()
    assert wait.not_before == unknown_at + timedelta(seconds=60)  # type: ignore[attr-defined]
    assert saga.state.run("hold_flight", C).status == "pending"
    saga.now = wait.not_before  # type: ignore[attr-defined]
    saga.lookup("capture_payment", "absent")
    assert kinds(saga.record()) == ["ScheduleCompensation", "ScheduleCompensation"]
    saga.run_ok("hold_flight", C)
    saga.run_ok("hold_hotel", C)
    (finish,) = saga.record()
    assert finish.state is SagaStatus.COMPENSATED  # type: ignore[attr-defined]
