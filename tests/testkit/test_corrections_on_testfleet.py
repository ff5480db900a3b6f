"""Corrections on the test kit: when the pivot succeeded and a later step fails, the pivot's
declared correction is offered to a person with its residual impact, runs as a tracked
step with its own key when chosen, and the saga ends COMMITTED_WITH_REPAIR (or pauses
again, with the reason, when the correction itself fails)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from saga_core import SagaDefinition, ToolCatalogue
from saga_core.contracts import Receipt, SagaStatus, StepKind
from saga_core.engine.events import ManualInterventionRequired, OperatorAction, StepStarted
from saga_core.engine.resolution import resolution_options
from saga_core.errors import OperatorActionRejected
from saga_core.keys import operation_key
from sagafleet.testing import InMemoryTools, TestFleet

F, C = StepKind.FORWARD, StepKind.COMPENSATION


def _tool(name: str, semantics: str, args: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"name": name, "version": 1, "semantics": semantics, "dedupes_by_key": True,
            "commit_horizon_s": 1, "args": args, **more}


_UNDO = {"ref": {"type": "string"}}
CATALOGUE = ToolCatalogue.model_validate({"tools": [
    _tool("shop.reserve", "compensable", {"item": {"type": "string"}},
          compensation={"tool": "shop.unreserve", "version": 1,
                        "args": {"ref": "${receipt.resource_id}"}}),
    _tool("shop.unreserve", "idempotent_by_key", _UNDO),
    _tool("mail.confirm", "irreversible", {"to": {"type": "string"}},
          compensation={"tool": "mail.correct", "version": 1,
                        "args": {"ref": "${receipt.resource_id}"}}),
    _tool("mail.correct", "irreversible", _UNDO),
    _tool("shop.ship", "idempotent_by_key", {"item": {"type": "string"}}),
]})

DEFINITION = SagaDefinition.model_validate({
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


def _fleet() -> tuple[TestFleet, InMemoryTools, list[str]]:
    tools = InMemoryTools(CATALOGUE)
    calls: list[str] = []

    def effect(name: str) -> Any:
        def run(args: Mapping[str, Any], key: str) -> Receipt:
            calls.append(name)
            return Receipt(resource_id=key, status="done")
        return run

    for spec in CATALOGUE.tools:
        tools.add(spec.name, effect(spec.name))
    return TestFleet([DEFINITION], tools), tools, calls


def _ship_fails_for_good(tools: InMemoryTools) -> None:
    tools.fail_always("shop.ship", "fail_before_commit", error_class="permanent")


def test_the_correction_is_offered_with_its_residual_impact_and_repairs_the_saga() -> None:
    fleet, tools, calls = _fleet()
    _ship_fails_for_good(tools)
    saga_id = fleet.client().start("order", {}, key="o-1").saga_id
    fleet.run_until_idle()
    # the pivot succeeded, the shipping failed for good: a person is asked
    state = fleet.state(saga_id)
    assert state.status is SagaStatus.MANUAL_INTERVENTION and state.pivot_passed
    (paused,) = [e for e in fleet.events(saga_id) if isinstance(e, ManualInterventionRequired)]
    assert paused.step_id == "ship" and "run_correction" in paused.evidence.alternatives
    offer = paused.evidence.details["correction"]
    assert offer["tool"] == "mail.correct@1" and offer["step"] == "confirm"
    assert "repairs confirm" in offer["does"]
    assert any("confirm's own effect" in s for s in offer["does_not_undo"])
    assert any("reserve" in s for s in offer["does_not_undo"])
    assert any(s.startswith("ship") for s in offer["does_not_undo"])
    (option,) = [o for o in resolution_options(state) if o.action == "run_correction"]
    assert (option.step_id, option.kind) == ("confirm", C)
    assert "Residual impact" in option.effect
    # when an operator chooses it
    operator = fleet.person("ops", roles=("operator",))
    operator.resolve(saga_id, "run_correction", reason="tell the customer it will not ship")
    fleet.run_until_idle()
    # then it ran once as the pivot's compensation, under its own key, and the saga ends
    state = fleet.state(saga_id)
    assert state.status is SagaStatus.COMMITTED_WITH_REPAIR
    events = fleet.events(saga_id)
    (chosen,) = [e for e in events if isinstance(e, OperatorAction)]
    assert (chosen.action, chosen.step_id, chosen.kind) == ("run_correction", "confirm", C)
    (ran,) = [e for e in events if isinstance(e, StepStarted) and e.kind is C]
    assert ran.step_id == "confirm"
    assert ran.operation_key == operation_key(saga_id, "confirm", C, 1)
    assert ran.operation_key != state.run("confirm", F).operation_key
    assert calls.count("mail.correct") == 1 and "shop.unreserve" not in calls
    assert "correction of confirm sent" in events[-1].summary  # type: ignore[attr-defined]


def test_a_failing_correction_stays_in_manual_intervention_with_the_reason() -> None:
    fleet, tools, _ = _fleet()
    _ship_fails_for_good(tools)
    tools.fail_always("mail.correct", "fail_before_commit", error_class="permanent")
    saga_id = fleet.client().start("order", {}, key="o-2").saga_id
    fleet.run_until_idle()
    fleet.person("ops", roles=("operator",)).resolve(saga_id, "run_correction",
                                                     reason="try the correction")
    fleet.run_until_idle()
    state = fleet.state(saga_id)
    assert state.status is SagaStatus.MANUAL_INTERVENTION
    assert state.escalation is not None
    assert state.escalation.reason.startswith("the correction of confirm failed")
    assert (state.escalation.step_id, state.escalation.kind) == ("confirm", C)


def test_no_correction_is_offered_before_the_pivot() -> None:
    fleet, tools, _ = _fleet()
    tools.fail_always("mail.confirm", "fail_before_commit", error_class="permanent")
    saga_id = fleet.client().start("order", {}, key="o-3").saga_id
    fleet.run_until_idle()
    state = fleet.state(saga_id)
    assert state.status is SagaStatus.MANUAL_INTERVENTION
    assert "run_correction" not in [o.action for o in resolution_options(state)]
    with pytest.raises(OperatorActionRejected):
        fleet.person("ops", roles=("operator",)).resolve(saga_id, "run_correction",
                                                         reason="not yet")
