"""Replans keep their keys (failure table row 4): the mapping rules of saga_core.agents.replans."""

from __future__ import annotations

import pytest
from core_harness import C, F, Saga, kinds

from saga_core import (
    AgentPlan,
    ErrorClass,
    EventRejected,
    OperatorAction,
    PlannedAction,
    PlanRejected,
    PlanRevised,
    RevisionRefused,
    RunStatus,
    SagaStatus,
    ScheduleCompensation,
    ScheduleStep,
    action_step_id,
    fold,
    operation_key,
    revise_plan,
    validate_plan,
)
from saga_core.engine.events import dump_event, load_event
from sagafleet.example_sagas import trip_tool_catalogue

FLIGHT = PlannedAction(tool="flights.hold", args={"flight_id": "LH1", "passenger_email": "a@b"})
HOTEL = PlannedAction(
    tool="hotels.hold", args={"hotel_id": "H1", "nights": 1, "guest_email": "a@b"}
)
HOTEL_2 = PlannedAction(
    tool="hotels.hold", args={"hotel_id": "H2", "nights": 3, "guest_email": "a@b"}
)
FLIGHT_BACK = PlannedAction(
    tool="flights.hold", args={"flight_id": "LH2", "passenger_email": "a@b"}
)
MAIL = PlannedAction(
    tool="email.send_itinerary",
    args={"to": "a@example.com", "flight_hold": "F", "seat": "1A", "hotel_hold": "H",
          "nights": 1, "payment": "P"},
)

ID = action_step_id


def _saga(*actions: PlannedAction) -> Saga:
    definition = validate_plan(AgentPlan(actions=list(actions)), trip_tool_catalogue())
    saga = Saga(definition, {})
    saga.settle()
    return saga


def _revise(saga: Saga, *actions: PlannedAction) -> PlanRevised:
    event = revise_plan(saga.state, AgentPlan(actions=list(actions)), trip_tool_catalogue(),
                        saga.now, actor="agent-1", reason="user changed the hotel")
    assert event is not None
    saga.append(event)
    return event


def test_kept_action_keeps_its_key_dropped_is_compensated_new_runs() -> None:
    saga = _saga(FLIGHT, HOTEL, FLIGHT_BACK)
    saga.run_ok(ID(FLIGHT))
    saga.settle()
    saga.run_ok(ID(HOTEL))
    saga.settle()
    key = saga.state.run(ID(FLIGHT), F).operation_key
    # the agent keeps the outbound flight, changes the hotel, drops the return flight
    event = _revise(saga, FLIGHT, HOTEL_2)
    assert (event.kept, event.dropped, event.removed, event.added) == (
        [ID(FLIGHT)], [ID(HOTEL)], [ID(FLIGHT_BACK)], [ID(HOTEL_2)])
    assert event.revision == 1 and len(event.plan_hash) == 64
    state = saga.state
    assert state.run(ID(FLIGHT), F).operation_key == key  # same saga, same key
    assert state.run(ID(FLIGHT), F).status == "succeeded"  # found, not repeated
    assert not state.definition.has_step(ID(FLIGHT_BACK))
    assert state.retired == frozenset({ID(HOTEL)})
    decisions = saga.record()
    assert ScheduleStep(ID(HOTEL_2), 1, saga.now, "dependencies done") in decisions
    assert ScheduleCompensation(ID(HOTEL), 1, saga.now, "dependents compensated") in decisions
    assert not any(isinstance(d, ScheduleStep) and d.step_id == ID(FLIGHT) for d in decisions)
    assert state.run(ID(HOTEL_2), F).operation_key == operation_key(
        "saga-1", ID(HOTEL_2), F, 1)
    saga.run_ok(ID(HOTEL_2))
    saga.run_ok(ID(HOTEL), C)
    saga.settle()
    assert saga.state.status is SagaStatus.COMPLETED


def test_saga_does_not_finish_before_the_dropped_action_is_compensated() -> None:
    saga = _saga(FLIGHT, HOTEL)
    saga.run_ok(ID(FLIGHT))
    saga.settle()
    saga.run_ok(ID(HOTEL))
    _revise(saga, HOTEL)  # the flight is dropped; the hotel is kept (already done)
    saga.settle()
    assert saga.state.status is SagaStatus.RUNNING
    saga.claim(ID(FLIGHT), C)
    saga.fail(ID(FLIGHT), ErrorClass.TRANSIENT, kind=C)
    saga.settle()
    assert saga.state.status is SagaStatus.RUNNING  # retried, not finished
    saga.now = saga.state.run(ID(FLIGHT), C).not_before or saga.now
    saga.settle()
    saga.run_ok(ID(FLIGHT), C)
    saga.settle()
    assert saga.state.status is SagaStatus.COMPLETED


def test_dropped_actions_compensate_in_reverse_dependency_order() -> None:
    saga = _saga(FLIGHT, HOTEL, FLIGHT_BACK)
    for action in (FLIGHT, HOTEL):
        saga.run_ok(ID(action))
        saga.settle()
    _revise(saga, HOTEL_2)
    decisions = saga.record()
    comps = [d.step_id for d in decisions if isinstance(d, ScheduleCompensation)]
    assert comps == [ID(HOTEL)]  # the hotel depends on the flight: undone first
    saga.run_ok(ID(HOTEL), C)
    comps = [d.step_id for d in saga.record() if isinstance(d, ScheduleCompensation)]
    assert comps == [ID(FLIGHT)]


def test_revision_event_round_trips_and_refolds_to_the_same_state() -> None:
    saga = _saga(FLIGHT, HOTEL)
    saga.run_ok(ID(FLIGHT))
    saga.settle()
    event = _revise(saga, FLIGHT, HOTEL_2)
    again = load_event("PlanRevised", dump_event(event))
    assert again == event
    assert fold(saga.definition, saga.events).forward == saga.state.forward


def test_a_revision_folded_onto_a_compensating_saga_is_rejected_by_the_fold() -> None:
    # revise_plan refuses it before an event is written; the fold refuses such an event too
    saga = _saga(FLIGHT, HOTEL)
    saga.run_ok(ID(FLIGHT))
    saga.settle()
    event = revise_plan(saga.state, AgentPlan(actions=[FLIGHT, HOTEL_2]), trip_tool_catalogue(),
                        saga.now, actor="agent-1", reason="user changed the hotel")
    assert event is not None
    saga.claim(ID(HOTEL))
    saga.fail(ID(HOTEL), ErrorClass.BUSINESS_REJECTION)
    saga.settle()
    assert saga.state.phase == "compensating" and saga.state.escalation is None
    with pytest.raises(EventRejected):
        fold(saga.definition, [*saga.events, event])


def test_revision_after_the_saga_is_terminal_is_refused() -> None:
    saga = _saga(FLIGHT)
    saga.run_ok(ID(FLIGHT))
    saga.settle()
    assert saga.state.status is SagaStatus.COMPLETED
    with pytest.raises(RevisionRefused) as info:
        _revise(saga, FLIGHT, HOTEL)
    assert [p.rule for p in info.value.problems] == ["saga_terminal"]


def test_dropping_an_action_that_cannot_be_compensated_is_refused() -> None:
    mail = MAIL.model_copy(update={"depends_on": [ID(FLIGHT)]})
    hotel = HOTEL.model_copy(update={"depends_on": [ID(FLIGHT)]})
    saga = _saga(FLIGHT, hotel, mail)
    saga.run_ok(ID(FLIGHT))
    saga.settle()
    saga.run_ok(ID(mail))
    saga.settle()
    # the itinerary mail is irreversible: its declared correction is a repair, not an undo
    with pytest.raises(RevisionRefused) as info:
        revise_plan(saga.state, AgentPlan(actions=[FLIGHT, hotel]), trip_tool_catalogue(),
                    saga.now)
    assert [p.rule for p in info.value.problems] == ["past_pivot"]
    assert "irreversible" in str(info.value)
    # a scheduled, never-claimed action is simply removed
    event = revise_plan(saga.state, AgentPlan(actions=[FLIGHT, mail]), trip_tool_catalogue(),
                        saga.now)
    assert event is not None
    assert event.removed == [ID(hotel)] and event.dropped == []


def test_dropping_an_action_in_flight_or_changing_one_that_ran_is_refused() -> None:
    saga = _saga(FLIGHT, HOTEL)
    saga.claim(ID(FLIGHT))
    with pytest.raises(RevisionRefused) as info:
        revise_plan(saga.state, AgentPlan(actions=[HOTEL]), trip_tool_catalogue(), saga.now)
    assert [p.rule for p in info.value.problems] == ["outcome_unsettled"]
    saga.succeed(ID(FLIGHT))
    saga.settle()
    changed = FLIGHT.model_copy(update={"id": ID(FLIGHT), "args": {
        "flight_id": "LH9", "passenger_email": "a@b"}})
    with pytest.raises(RevisionRefused) as info:
        revise_plan(saga.state, AgentPlan(actions=[changed]), trip_tool_catalogue(), saga.now)
    assert [p.rule for p in info.value.problems] == ["changed_after_run"]


def test_invalid_revised_plan_is_rejected_as_a_plan() -> None:
    saga = _saga(FLIGHT)
    with pytest.raises(PlanRejected):
        revise_plan(saga.state, AgentPlan(actions=[PlannedAction(tool="nope.tool")]),
                    trip_tool_catalogue(), saga.now)


def test_second_revision_counts_and_a_compensated_action_cannot_come_back() -> None:
    saga = _saga(FLIGHT, HOTEL)
    saga.run_ok(ID(FLIGHT))
    saga.settle()
    _revise(saga, HOTEL_2)
    saga.record()
    saga.claim(ID(FLIGHT), C)
    with pytest.raises(RevisionRefused) as info:
        revise_plan(saga.state, AgentPlan(actions=[FLIGHT, HOTEL_2]), trip_tool_catalogue(),
                    saga.now)
    assert [p.rule for p in info.value.problems] == ["already_compensated"]
    event = _revise(saga, HOTEL_2, FLIGHT_BACK)
    assert event.revision == 2 and event.kept == [ID(HOTEL_2)]
    assert ID(FLIGHT) in saga.state.retired


def test_the_same_revision_twice_records_nothing_the_second_time() -> None:
    saga = _saga(FLIGHT, HOTEL)
    saga.run_ok(ID(FLIGHT))
    saga.settle()
    _revise(saga, FLIGHT, HOTEL_2)
    again = revise_plan(saga.state, AgentPlan(actions=[FLIGHT, HOTEL_2]), trip_tool_catalogue(),
                        saga.now)
    assert again is None


def test_a_dropped_action_an_operator_skipped_is_not_compensated() -> None:
    # found by the mutation run (issue 36): decide.py:229 survived every test. A skipped
    # action made no effect; a revision may drop it, and nothing of it is undone.
    saga = _saga(FLIGHT, HOTEL, FLIGHT_BACK)
    saga.run_ok(ID(FLIGHT))
    saga.settle()
    saga.claim(ID(HOTEL))
    saga.unknown(ID(HOTEL))
    while kinds(lookups := saga.record()) == ["Reconcile"]:  # lookups that cannot answer
        saga.now = lookups[0].not_before  # type: ignore[attr-defined]
        saga.lookup(ID(HOTEL), "unknown")
    assert kinds(lookups) == ["Escalate"]
    saga.append(OperatorAction(at=saga.now, action="skip", step_id=ID(HOTEL), actor="op"))
    saga.settle()
    event = _revise(saga, FLIGHT, FLIGHT_BACK)
    assert event.dropped == [ID(HOTEL)] and saga.state.retired == {ID(HOTEL)}
    assert kinds(saga.record()) == ["ScheduleStep"]  # the return flight, and nothing undone
    saga.run_ok(ID(FLIGHT_BACK))
    saga.settle()
    assert saga.state.run(ID(HOTEL), C).status is RunStatus.PENDING
    assert saga.state.status is SagaStatus.COMMITTED_WITH_REPAIR
