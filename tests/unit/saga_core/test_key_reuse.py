"""One operation key, one request: the engine refuses a reused key with another payload.

A key is stable across attempts, so every later attempt under it must send what the first
one was claimed with. When it would not, decide escalates instead of scheduling it (and a
worker's claim refuses it, see ``key_reuse``), and the operator's choices fit: retrying
under the same key is not offered, retrying as a new operation (a new key) is.
"""

from __future__ import annotations

import pytest
from core_harness import C, F, Saga, kinds, person, trip_input

from saga_core import (
    CancelRequested,
    ErrorClass,
    Escalate,
    OperatorActionRejected,
    OperatorRequest,
    Receipt,
    RequestApproval,
    RetryAfterBackoff,
    SagaStatus,
    ScheduleStep,
    StepStarted,
    check_approval,
    check_claim,
    key_reuse,
    operation_key,
    pending_key_reuse,
    resolution_options,
    resolve_command,
    resolve_escalation,
)
from sagafleet.example_sagas import trip_definition

OTHER_HOTEL = Receipt(resource_id="HH-2", version=1,
                      fields={"hotel_id": "H-9", "nights": 2, "price": 15000})


def capture_failed_once() -> tuple[Saga, StepStarted]:
    """Both holds done; the capture's first attempt was claimed and failed transiently."""
    saga = Saga(trip_definition(), trip_input())
    saga.settle()
    saga.run_ok("hold_flight")
    saga.run_ok("hold_hotel")
    saga.settle()
    first = saga.claim("capture_payment")
    saga.fail("capture_payment", ErrorClass.TRANSIENT, msg="503")
    return saga, first


def the_escalation(saga: Saga) -> Escalate:
    (escalate,) = saga.settle()
    assert isinstance(escalate, Escalate)
    return escalate


def test_a_retry_whose_request_is_unchanged_runs_under_the_same_key() -> None:
    # given a capture that failed transiently, nothing else having happened
    saga, first = capture_failed_once()
    # when decide runs, then the retry is scheduled as always, and may be claimed
    assert kinds(saga.settle()) == ["RetryAfterBackoff"]
    assert pending_key_reuse(saga.state, "capture_payment", F) is None
    saga.tick(60)
    assert saga.claim("capture_payment").operation_key == first.operation_key


def test_a_retry_whose_request_changed_escalates_naming_key_step_hashes_and_the_change() -> None:
    # given a capture whose first attempt failed, and a hotel receipt recorded anew since
    saga, first = capture_failed_once()
    saga.succeed("hold_hotel", receipt=OTHER_HOTEL)
    now_hash = resolve_command(saga.state, "capture_payment", F).request_hash
    assert now_hash != first.request_hash
    # when decide runs
    escalate = the_escalation(saga)
    # then no retry is scheduled: the saga pauses, saying which key, step, hashes and why
    assert (escalate.step_id, escalate.kind) == ("capture_payment", F)
    for part in (first.operation_key, "'capture_payment'", first.request_hash, now_hash,
                 "${steps.hold_hotel.receipt.resource_id}"):
        assert part in escalate.reason
    assert "${steps.hold_flight" not in escalate.reason  # only what changed is named
    details = escalate.evidence.details
    assert details["operation_key"] == first.operation_key
    assert (details["recorded_request_hash"], details["request_hash"]) == (
        first.request_hash, now_hash)
    assert details["changed_since_first_attempt"] == ["${steps.hold_hotel.receipt.resource_id}"]
    saga_state = saga.state
    assert saga_state.status is SagaStatus.MANUAL_INTERVENTION
    assert saga_state.run("capture_payment", F).attempt == 1  # no attempt 2 exists
    # and retrying under the same key is not among the choices; a new operation is
    assert escalate.evidence.alternatives == [
        "retry_as_new_operation", "skip", "force_complete", "resume", "cancel"]


def test_a_retry_already_scheduled_escalates_once_its_request_changes() -> None:
    # given a capture retry scheduled while the request was unchanged
    saga, first = capture_failed_once()
    assert kinds(saga.settle()) == ["RetryAfterBackoff"]
    # when the hotel receipt changes before the retry is claimed
    saga.succeed("hold_hotel", receipt=OTHER_HOTEL)
    # then the claim is still due by the clock, but the request no longer fits the key
    resolved = resolve_command(saga.state, "capture_payment", F)
    reuse = key_reuse(saga.state, resolved)
    assert reuse is not None and reuse.recorded_hash == first.request_hash
    assert reuse.changed == ("${steps.hold_hotel.receipt.resource_id}",)
    # and decide escalates rather than leave the attempt to be claimed
    assert the_escalation(saga).reason == reuse.reason
    saga.tick(3600)
    assert not check_claim(saga.state, "capture_payment", F, 2, saga.now)


def test_a_first_attempt_recorded_with_another_resolution_is_said_to_have_changed_nothing() -> None:
    # given a capture whose first claim recorded a hash this version does not compute
    saga = Saga(trip_definition(), trip_input())
    saga.settle()
    saga.run_ok("hold_flight")
    saga.run_ok("hold_hotel")
    saga.settle()
    started = saga.claim("capture_payment")
    saga.events[-1] = started.model_copy(update={"request_hash": "0" * 64})
    saga.append(saga.events.pop())  # refold with the replaced event
    saga.fail("capture_payment", ErrorClass.TRANSIENT)
    # when decide runs, then it escalates, saying that nothing it resolves from changed
    escalate = the_escalation(saga)
    assert "0" * 64 in escalate.reason and "nothing it resolves from changed" in escalate.reason
    assert escalate.evidence.details["changed_since_first_attempt"] == []


def test_a_compensation_whose_own_receipt_changed_escalates_with_the_compensation_choices() -> None:
    # given the flight's release, claimed once with the hold's receipt, failing transiently
    saga = Saga(trip_definition(), trip_input())
    saga.record()
    saga.run_ok("hold_flight")
    saga.claim("hold_hotel")
    saga.fail("hold_hotel", ErrorClass.BUSINESS_REJECTION)
    saga.settle()
    first = saga.claim("hold_flight", C)
    saga.fail("hold_flight", ErrorClass.TRANSIENT, kind=C)
    # when the flight hold's receipt is recorded anew with another version
    moved = Receipt(resource_id="FH-1", version=4, fields={"flight_id": "LH123", "seat": "12A"})
    saga.succeed("hold_flight", receipt=moved)
    # then the release is not retried under its key: the precondition it sends changed
    escalate = the_escalation(saga)
    assert (escalate.step_id, escalate.kind) == ("hold_flight", C)
    assert first.operation_key in escalate.reason and "${receipt.version}" in escalate.reason
    assert "${receipt.resource_id}" not in escalate.reason
    assert escalate.evidence.alternatives == ["retry_as_new_operation", "mark_compensated", "skip"]


def test_a_renewed_authorization_is_not_asked_for_a_request_the_key_cannot_carry() -> None:
    # given a capture refused for an expired authorization, and a hotel receipt changed since
    saga = Saga(trip_definition(), trip_input())
    saga.settle()
    saga.run_ok("hold_flight")
    saga.run_ok("hold_hotel")
    saga.settle()
    saga.claim("capture_payment")
    saga.fail("capture_payment", ErrorClass.AUTH_EXPIRED)
    saga.succeed("hold_hotel", receipt=OTHER_HOTEL)
    # when decide runs, then no human is asked to approve it: the saga escalates
    decisions = saga.settle()
    assert kinds(decisions) == ["Escalate"]
    assert not any(isinstance(d, RequestApproval) for d in decisions)


def test_retry_step_does_not_fit_a_reused_key_and_resume_escalates_again() -> None:
    # given a saga paused on a capture whose request changed
    saga, _ = capture_failed_once()
    saga.succeed("hold_hotel", receipt=OTHER_HOTEL)
    reason = the_escalation(saga).reason
    assert {o.action for o in resolution_options(saga.state)} == {
        "retry_as_new_operation", "skip", "force_complete", "resume"}
    # when the operator asks to retry under the same key, then that is refused
    same_key = OperatorRequest("retry_step", actor="ada", step_id="capture_payment")
    with pytest.raises(OperatorActionRejected, match="retry_as_new_operation"):
        resolve_escalation(saga.state, saga.events, same_key, saga.now)
    # and resuming ends the pause, but decide pauses again for the same reason
    resume = resolve_escalation(
        saga.state, saga.events, OperatorRequest("resume", actor="ada"), saga.now)
    assert resume is not None
    saga.append(resume)
    assert the_escalation(saga).reason == reason


def test_retry_as_new_operation_runs_the_request_under_the_next_operation_version() -> None:
    # given a saga paused on a capture whose request changed
    saga, first = capture_failed_once()
    saga.succeed("hold_hotel", receipt=OTHER_HOTEL)
    the_escalation(saga)
    # when a person checked the first attempt left no charge, and retries as a new operation
    request = OperatorRequest("retry_as_new_operation", actor="ada", step_id="capture_payment",
                              reason="no charge under the old key (checked with the PSP)")
    action = resolve_escalation(saga.state, saga.events, request, saga.now)
    assert action is not None
    saga.append(action)
    # then the operation has a new key (version 2), with nothing recorded under it yet
    run = saga.state.run("capture_payment", F)
    assert run.operation_key == operation_key("saga-1", "capture_payment", F, 2)
    assert run.operation_key != first.operation_key and run.request_hash is None
    # and its next attempt is scheduled at once, claimed under the new key, and goes on
    (scheduled,) = saga.settle()
    assert isinstance(scheduled, ScheduleStep) and scheduled.attempt == 2
    claimed = saga.claim("capture_payment")
    assert claimed.operation_key == run.operation_key
    assert claimed.request_hash == resolve_command(saga.state, "capture_payment", F).request_hash
    saga.succeed("capture_payment")
    saga.settle()
    saga.run_ok("send_itinerary")
    saga.settle()
    assert saga.state.status is SagaStatus.COMMITTED_WITH_REPAIR
    # and a second click on the same button records nothing
    assert resolve_escalation(saga.state, saga.events, request, saga.now) is None


def test_a_retry_under_the_new_key_is_held_to_the_request_it_was_first_claimed_with() -> None:
    # given a capture retried as a new operation, whose new key failed once
    saga, _ = capture_failed_once()
    saga.succeed("hold_hotel", receipt=OTHER_HOTEL)
    the_escalation(saga)
    saga.append(resolve_escalation(saga.state, saga.events, OperatorRequest(
        "retry_as_new_operation", actor="ada", step_id="capture_payment"), saga.now))
    saga.settle()
    second = saga.claim("capture_payment")
    saga.fail("capture_payment", ErrorClass.TRANSIENT)
    # then an unchanged retry runs under it, and a changed one escalates naming the new key
    (retry,) = saga.settle()
    assert isinstance(retry, RetryAfterBackoff)
    saga.succeed("hold_hotel", receipt=OTHER_HOTEL.model_copy(update={"resource_id": "HH-3"}))
    escalate = the_escalation(saga)
    assert second.operation_key in escalate.reason and second.request_hash in escalate.reason


def test_a_cancel_before_the_pivot_unwinds_a_saga_paused_on_a_reused_key() -> None:
    # given a saga paused on a capture whose request changed (before the pivot)
    saga, _ = capture_failed_once()
    saga.succeed("hold_hotel", receipt=OTHER_HOTEL)
    assert "cancel" in the_escalation(saga).evidence.alternatives
    # when an operator cancels it
    saga.append(CancelRequested(at=saga.now, actor="ada", reason="customer gave up"))
    # then the capture is never retried: the holds are released instead
    decisions = saga.settle()
    assert kinds(decisions)[0] == "BeginCompensation"
    assert "Escalate" not in kinds(decisions)
    for step in ("hold_flight", "hold_hotel"):
        saga.run_ok(step, C)
        saga.settle()
    assert saga.state.status is SagaStatus.COMPENSATED


def test_a_new_operation_asks_its_approval_again() -> None:
    # given a capture above the approval limit, approved, claimed once, failed transiently
    saga = Saga(trip_definition(), trip_input(amount=250_000))
    saga.settle()
    saga.run_ok("hold_flight")
    saga.run_ok("hold_hotel")
    (asked,) = saga.settle()
    assert isinstance(asked, RequestApproval)
    grant = check_approval(
        saga.state, "capture_payment", F, asked.action_hash, person("fin"), saga.now
    )
    assert grant is not None
    saga.append(grant)
    saga.settle()
    saga.claim("capture_payment")
    saga.fail("capture_payment", ErrorClass.TRANSIENT)
    # and paused because the hotel receipt changed since
    saga.succeed("hold_hotel", receipt=OTHER_HOTEL)
    the_escalation(saga)
    # when the operator retries it as a new operation
    saga.append(resolve_escalation(saga.state, saga.events, OperatorRequest(
        "retry_as_new_operation", actor="ops", step_id="capture_payment"), saga.now))
    # then the approver is asked again, for the request as it now resolves
    (again,) = saga.settle()
    assert isinstance(again, RequestApproval) and again.action_hash != asked.action_hash
