"""The resolve rule: which operator actions answer a paused saga, and what a click records."""

from __future__ import annotations

import pytest
from core_harness import C, F, Saga, trip_input

from saga_core import (
    ErrorClass,
    Escalate,
    Evidence,
    ManualInterventionRequired,
    NothingToResolve,
    OperatorAction,
    OperatorActionRejected,
    OperatorRequest,
    SagaStatus,
    evolve,
    is_repeated_action,
    resolution_options,
    resolve_escalation,
)
from saga_core.engine.resolution import escalation_alternatives
from sagafleet.example_sagas import trip_definition


def paused_on_capture_compensation() -> Saga:
    """A trip whose payment was captured and whose refund needs a person."""
    saga = Saga(trip_definition(), trip_input())
    for step in ("hold_flight", "hold_hotel", "capture_payment"):
        saga.settle()
        saga.claim(step)
        saga.succeed(step)
    saga.append(ManualInterventionRequired(
        at=saga.now, reason="refund keeps failing", step_id="capture_payment", kind=C,
        evidence=Evidence(intended_action="refund", reason="refund keeps failing")))
    assert saga.state.status is SagaStatus.MANUAL_INTERVENTION
    return saga


def test_a_saga_paused_on_a_compensation_offers_the_actions_on_that_compensation() -> None:
    # given a saga paused on the payment's compensation
    saga = paused_on_capture_compensation()
    # when its options are listed
    options = {(o.action, o.step_id, o.kind) for o in resolution_options(saga.state)}
    # then every action on that compensation is offered, each with its effect
    assert options == {
        ("retry_step", "capture_payment", C),
        ("skip", "capture_payment", C),
        ("mark_compensated", "capture_payment", C),
    }
    assert all(o.effect for o in resolution_options(saga.state))


def paused_by_decide_on_a_forward_step() -> tuple[Saga, Escalate]:
    """A trip whose hotel hold failed permanently: decide escalates with its alternatives."""
    saga = Saga(trip_definition(), trip_input())
    saga.record()
    saga.run_ok("hold_flight")
    saga.claim("hold_hotel")
    saga.fail("hold_hotel", ErrorClass.PERMANENT, msg="bad hotel config")
    (escalate,) = saga.record()
    assert isinstance(escalate, Escalate)
    return saga, escalate


def test_the_options_are_the_alternatives_decide_offers_in_its_evidence() -> None:
    # given a saga that decide paused on a forward step before the pivot
    saga, escalate = paused_by_decide_on_a_forward_step()
    # then the operator actions offered are decide's alternatives (cancel is its own command)
    offered = [o.action for o in resolution_options(saga.state)]
    assert set(offered) == set(escalate.evidence.alternatives) - {"cancel"}
    assert escalation_alternatives(saga.state, F) == escalate.evidence.alternatives
    assert {(o.step_id, o.kind) for o in resolution_options(saga.state)} == {("hold_hotel", F)}


def test_a_running_saga_offers_nothing_and_resolving_it_raises_nothing_to_resolve() -> None:
    # given a saga that runs on its own
    saga = Saga(trip_definition(), trip_input())
    saga.settle()
    assert resolution_options(saga.state) == ()
    # when an operator tries to resolve it, then nothing waits for a person
    request = OperatorRequest("resume", actor="ada", reason="why not")
    with pytest.raises(NothingToResolve, match="is RUNNING, not waiting for an operator"):
        resolve_escalation(saga.state, saga.events, request, saga.now)


def test_resolving_records_the_action_once_and_a_second_click_records_nothing() -> None:
    # given a paused saga
    saga = paused_on_capture_compensation()
    request = OperatorRequest("mark_compensated", actor="ada", reason="refunded by phone",
                              step_id="capture_payment", evidence={"ticket": "T-1"})
    # when the operator resolves it
    event = resolve_escalation(saga.state, saga.events, request, saga.now)
    # then the event names the action, operation, actor, reason and evidence
    assert isinstance(event, OperatorAction)
    assert (event.action, event.step_id, event.actor, event.reason, event.evidence) == (
        "mark_compensated", "capture_payment", "ada", "refunded by phone", {"ticket": "T-1"})
    saga.append(event)
    assert evolve(saga.state, event).escalation is None
    # and the same click again records nothing, while another action finds nothing to resolve
    assert resolve_escalation(saga.state, saga.events, request, saga.now) is None
    other = OperatorRequest("skip", actor="ada", step_id="capture_payment", kind=C)
    with pytest.raises(NothingToResolve):
        resolve_escalation(saga.state, saga.events, other, saga.now)


def test_mark_compensated_means_the_compensation_whatever_kind_was_named() -> None:
    # given a saga resolved with mark_compensated, named as if it were about the forward run
    saga = paused_on_capture_compensation()
    first = OperatorRequest("mark_compensated", actor="ada", step_id="capture_payment", kind=F)
    event = resolve_escalation(saga.state, saga.events, first, saga.now)
    assert event is not None and event.kind is C  # the event names the operation it is about
    saga.append(event)
    # then the same action named with the other kind is the same click
    again = OperatorRequest("mark_compensated", actor="bob", step_id="capture_payment", kind=C)
    assert is_repeated_action(saga.state, saga.events, again)
    assert not is_repeated_action(
        saga.state, saga.events, OperatorRequest("skip", actor="ada", step_id="capture_payment"))


def test_a_new_escalation_after_an_action_makes_the_same_action_meaningful_again() -> None:
    saga = paused_on_capture_compensation()
    request = OperatorRequest("retry_step", actor="ada", step_id="capture_payment", kind=C)
    event = resolve_escalation(saga.state, saga.events, request, saga.now)
    assert event is not None
    saga.append(event)
    saga.append(ManualInterventionRequired(
        at=saga.now, reason="still failing", step_id="capture_payment", kind=C,
        evidence=Evidence(intended_action="refund", reason="still failing")))
    assert resolve_escalation(saga.state, saga.events, request, saga.now) is not None


@pytest.mark.parametrize(("request_", "message"), [
    (OperatorRequest("skip", actor="ada"), "skip does not fit"),
    (OperatorRequest("retry_step", actor="ada", step_id="capture_payment"),
     "retry_step on the forward operation of step 'capture_payment' does not fit"),
    (OperatorRequest("force_complete", actor="ada", step_id="capture_payment", kind=C),
     "waits on the compensation operation of step 'capture_payment'"),
    (OperatorRequest("mark_compensated", actor="ada", step_id="hold_flight"),
     r"the actions that fit: retry_step, mark_compensated, skip\)"),
])
def test_an_action_that_does_not_fit_the_escalation_is_rejected_by_name(
    request_: OperatorRequest, message: str
) -> None:
    saga = paused_on_capture_compensation()
    with pytest.raises(OperatorActionRejected, match=message):
        resolve_escalation(saga.state, saga.events, request_, saga.now)


def test_resume_needs_no_step() -> None:
    saga, _ = paused_by_decide_on_a_forward_step()
    event = resolve_escalation(saga.state, saga.events,
                               OperatorRequest("resume", actor="ada"), saga.now)
    assert event is not None and event.step_id is None
    named = OperatorRequest("resume", actor="ada", step_id="hold_hotel")
    assert resolve_escalation(saga.state, saga.events, named, saga.now) is not None
