"""Replans keep their keys on the test kit (failure table row 4): a revision of a running
plan saga is its next plan version, so the action it keeps is found, not repeated."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import pytest

from saga_core import AgentPlan, PlannedAction, RevisionRefused, action_step_id
from saga_core.contracts import Receipt, SagaStatus, StepKind
from saga_core.engine.events import PlanRevised, StepStarted
from sagafleet.testing import TestFleet

FLIGHT = PlannedAction(tool="flights.hold",
                       args={"flight_id": "LH1", "passenger_email": "a@example.com"})
HOTEL = PlannedAction(tool="hotels.hold",
                      args={"hotel_id": "H1", "nights": 1, "guest_email": "a@example.com"})
MAIL_ARGS = {"flight_hold": "F", "seat": "1A", "hotel_hold": "H", "nights": 1, "payment": "P"}
# An external recipient: the mail's gate asks a person, so the saga waits right there.
MAIL_OUT = PlannedAction(tool="email.send_itinerary", args={**MAIL_ARGS, "to": "a@elsewhere.org"})
MAIL_IN = PlannedAction(tool="email.send_itinerary", args={**MAIL_ARGS, "to": "a@example.com"})


def _counting(fleet: TestFleet) -> Counter[str]:
    """Every call of every tool, counted as it reaches the tool (no dedupe in between)."""
    calls: Counter[str] = Counter()
    for tool in fleet.tools:  # type: ignore[union-attr]
        execute = tool.execute

        def counted(args: Mapping[str, Any], key: str, _name: str = tool.name,
                    _execute: Any = execute) -> Receipt:
            calls[_name] += 1
            return _execute(args, key)  # type: ignore[no-any-return]

        tool.execute = counted  # type: ignore[method-assign]
    return calls


def test_revision_keeps_the_run_action_drops_one_and_changes_another() -> None:
    fleet = TestFleet()
    calls = _counting(fleet)
    client = fleet.client()
    definition = client.submit_plan(AgentPlan(actions=[FLIGHT, HOTEL, MAIL_OUT]))
    saga_id = client.start(definition.name, {}, key="agent-request-1").saga_id
    fleet.run_until_idle()
    state = fleet.state(saga_id)
    assert state.run(action_step_id(MAIL_OUT), StepKind.FORWARD).status == "awaiting_approval"
    flight_key = state.run(action_step_id(FLIGHT), StepKind.FORWARD).operation_key
    # the agent replans: keep the flight, drop the hotel, send the mail to another address
    client.revise_plan(saga_id, AgentPlan(actions=[FLIGHT, MAIL_IN]), reason="user said so")
    # redelivered, naming the saga by its agent request (start key): nothing new
    client.revise_plan_for_key("agent-request-1", AgentPlan(actions=[FLIGHT, MAIL_IN]))
    fleet.run_until_idle()
    events = fleet.events(saga_id)
    (revised,) = [e for e in events if isinstance(e, PlanRevised)]
    assert revised.kept == [action_step_id(FLIGHT)]
    assert revised.dropped == [action_step_id(HOTEL)]
    assert revised.removed == [action_step_id(MAIL_OUT)]
    assert revised.added == [action_step_id(MAIL_IN)]
    assert fleet.state(saga_id).status is SagaStatus.COMPLETED
    assert calls["flights.hold"] == 1  # found, not repeated
    assert calls["hotels.hold"] == 1 and calls["hotels.release"] == 1  # dropped: undone
    assert calls["email.send_itinerary"] == 1 and calls["flights.release"] == 0
    flight_claims = [e for e in events if isinstance(e, StepStarted)
                     and e.step_id == action_step_id(FLIGHT)]
    assert [e.operation_key for e in flight_claims] == [flight_key]
    with pytest.raises(RevisionRefused, match="saga_terminal"):
        client.revise_plan(saga_id, AgentPlan(actions=[FLIGHT]))
