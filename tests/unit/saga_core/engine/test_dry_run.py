"""saga_core.engine.dry_run, pure: the trip's start planned from the SagaStarted a start records,
with no store, broker, tool or clock."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from trip_inputs import TRIP_INPUT

from saga_core.contracts import StepKind
from saga_core.engine.dry_run import DryRun, PlannedStep, plan_start, start_event
from saga_core.keys import operation_key
from sagafleet.example_sagas import trip_definition

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _plan(data: dict[str, Any]) -> DryRun:
    spec = trip_definition()
    public = {**data, "card_token": "<secret card_token>"}  # as split_secrets leaves it
    started = start_event(spec, saga_id="saga-1", tenant="acme", public_input=public,
                          key="k", actor="agent", reason="", now=NOW)
    return plan_start(spec, started, saga_id_final=True)


def _step(plan: DryRun, step_id: str) -> PlannedStep:
    return next(s for s in plan.steps if s.step_id == step_id)


def test_the_graph_comes_in_waves_of_steps_that_may_run_together():
    plan = _plan(TRIP_INPUT)
    assert plan.order == [["hold_flight", "hold_hotel"], ["capture_payment"],
                          ["send_itinerary"]]
    assert _step(plan, "capture_payment").depends_on == ["hold_flight", "hold_hotel"]
    assert _step(plan, "send_itinerary").pivot


def test_every_operation_key_is_the_one_the_fold_gives_the_saga():
    plan = _plan(TRIP_INPUT)
    for step in plan.steps:
        assert step.forward.operation_key == operation_key("saga-1", step.step_id,
                                                           StepKind.FORWARD, 1)
        assert step.compensation is not None
        assert step.compensation.operation_key == operation_key(
            "saga-1", step.step_id, StepKind.COMPENSATION, 1)


def test_a_capture_above_the_limit_will_ask_a_person_and_one_below_will_not():
    big = _step(_plan({**TRIP_INPUT, "amount": 250_000}), "capture_payment").forward.gate
    small = _step(_plan(TRIP_INPUT), "capture_payment").forward.gate
    assert big is not None and big.will_ask is True and big.role == "approver"
    assert big.four_eyes and any("amount" in reason for reason in big.reasons)
    assert small is not None and small.will_ask is False and not small.reasons


def test_a_gate_whose_argument_comes_from_a_receipt_is_decided_when_it_runs():
    plan = _plan({**TRIP_INPUT, "customer_email": "ada@elsewhere.test"})
    email = _step(plan, "send_itinerary")
    # the itinerary's recipient comes from the input: decided now, outside mail asks
    assert email.forward.gate is not None and email.forward.gate.will_ask is True
    assert email.forward.request_hash is None  # the rest waits for receipts
    assert email.forward.waits_for == ["capture_payment", "hold_flight", "hold_hotel"]
    assert email.forward.args == {"to": "ada@elsewhere.test"}
    # the correction's recipient comes from the email's receipt: not known yet
    assert email.compensation is not None and email.compensation.gate is not None
    assert email.compensation.gate.will_ask is None
    assert any("may ask" in line and "send_itinerary (compensation)" in line
               for line in plan.gates)


def test_secret_inputs_stay_the_placeholders_the_log_records():
    plan = _plan(TRIP_INPUT)
    capture = _step(plan, "capture_payment").forward
    assert capture.args["card_token"] == "<secret card_token>"
    assert TRIP_INPUT["card_token"] not in plan.model_dump_json()
