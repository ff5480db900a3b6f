"""Corrections (saga_core.engine.corrections): the pivot's declared repair as a typed operator
action, offered only past a succeeded pivot when a later step fails."""

from __future__ import annotations

import pytest
from core_harness import C, F, Saga

from saga_core import (
    ErrorClass,
    Finish,
    OperatorAction,
    SagaDefinition,
    SagaStatus,
    ScheduleCompensation,
)
from saga_core.engine.corrections import correction_offer
from saga_core.engine.resolution import OperatorRequest, resolution_options, resolve_escalation
from saga_core.errors import EventRejected, OperatorActionRejected

ORDER = SagaDefinition.model_validate({
    "name": "order", "version": 1,
    "steps": [
        {"id": "reserve", "tool": "shop.reserve", "semantics": "compensable",
         "args": {"item": "lamp"},
         "compensation": {"tool": "shop.unreserve", "args": {"ref": "${receipt.resource_id}"}}},
        {"id": "confirm", "tool": "mail.confirm", "semantics": "irreversible", "pivot": True,
         "depends_on": ["reserve"], "args": {"to": "ada@example.com"},
         "compensation": {"tool": "mail.correct", "args": {"ref": "${receipt.resource_id}"}}},
        {"id": "ship", "tool": "shop.ship", "semantics": "idempotent_by_key",
         "depends_on": ["confirm"], "args": {"item": "lamp"}},
    ],
})


def _paused_after_pivot() -> Saga:
    saga = Saga(ORDER, {})
    saga.settle()
    for step in ("reserve", "confirm"):
        saga.run_ok(step)
        saga.settle()
    saga.claim("ship")
    saga.fail("ship", ErrorClass.PERMANENT, msg="warehouse closed")
    saga.settle()
    assert saga.state.status is SagaStatus.MANUAL_INTERVENTION
    return saga


def _request(step_id: str | None = None) -> OperatorRequest:
    return OperatorRequest(action="run_correction", actor="ops", reason="tell the customer",
                           step_id=step_id)


def test_the_correction_is_offered_with_what_it_does_and_does_not_undo() -> None:
    saga = _paused_after_pivot()
    offer = correction_offer(saga.state)
    assert offer is not None and (offer.step_id, offer.tool) == ("confirm", "mail.correct")
    assert offer.does_not_undo == (
        "confirm's own effect (irreversible: it stays, corrected)",
        "the effects of reserve (they stay in place)",
        "ship (left not done: it will not run)",
    )
    (option,) = [o for o in resolution_options(saga.state) if o.action == "run_correction"]
    assert (option.step_id, option.kind) == ("confirm", C)
    escalated = saga.events[-1]
    assert "run_correction" in escalated.evidence.alternatives  # type: ignore[attr-defined]
    assert escalated.evidence.details["correction"]["tool"] == "mail.correct@1"  # type: ignore[attr-defined]


@pytest.mark.parametrize("step_id", [None, "confirm"])
def test_chosen_it_runs_as_the_pivots_compensation_and_ends_committed_with_repair(
    step_id: str | None,
) -> None:
    saga = _paused_after_pivot()
    event = resolve_escalation(saga.state, saga.events, _request(step_id), saga.now)
    assert isinstance(event, OperatorAction)
    assert (event.step_id, event.kind) == ("confirm", C)
    saga.append(event)
    assert saga.state.correcting == "confirm" and saga.state.escalation is None
    assert saga.record() == [ScheduleCompensation("confirm", 1, saga.now,
                                                  "dependents compensated")]
    saga.run_ok("confirm", C)
    (finish,) = saga.record()
    assert isinstance(finish, Finish) and finish.state is SagaStatus.COMMITTED_WITH_REPAIR
    assert "correction of confirm sent; left not done: ship" in finish.summary
    assert saga.state.run("reserve", C).status == "pending"  # nothing before it undone


def test_a_failed_correction_pauses_with_the_reason() -> None:
    saga = _paused_after_pivot()
    saga.append(resolve_escalation(saga.state, saga.events, _request(), saga.now))  # type: ignore[arg-type]
    saga.settle()
    saga.claim("confirm", C)
    saga.fail("confirm", ErrorClass.PERMANENT, kind=C, msg="mailbox gone")
    saga.settle()
    escalation = saga.state.escalation
    assert escalation is not None and escalation.step_id == "confirm" and escalation.kind is C
    assert escalation.reason.startswith("the correction of confirm failed: permanent failure")
    assert correction_offer(saga.state) is None  # not offered twice


def test_not_offered_before_the_pivot_and_refused_if_asked() -> None:
    saga = Saga(ORDER, {})
    saga.settle()
    saga.run_ok("reserve")
    saga.settle()
    saga.claim("confirm")
    saga.fail("confirm", ErrorClass.PERMANENT)
    saga.settle()
    assert saga.state.status is SagaStatus.MANUAL_INTERVENTION
    assert correction_offer(saga.state) is None
    with pytest.raises(OperatorActionRejected, match="run_correction"):
        resolve_escalation(saga.state, saga.events, _request(), saga.now)


def test_the_fold_refuses_a_correction_of_a_step_that_is_not_the_pivot() -> None:
    saga = _paused_after_pivot()
    saga.append(OperatorAction(at=saga.now, action="run_correction", step_id="reserve",
                               kind=C, actor="ops"))
    with pytest.raises(EventRejected, match="not a pivot"):
        saga.state  # noqa: B018 - the fold is what refuses


def test_forward_key_and_correction_key_differ() -> None:
    saga = _paused_after_pivot()
    assert saga.state.run("confirm", F).operation_key != saga.state.run(
        "confirm", C).operation_key
