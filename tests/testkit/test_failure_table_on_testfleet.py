"""The seed article's failure table, one end-to-end scenario per row, on TestFleet.

tests/unit/saga_core/engine/test_core_failure_table.py checks each row's decisions one by one;
here the same rows run through the real client, orchestrator and executor against the
in-memory trip tools, and are judged by the journal and the providers' books.
"""

from __future__ import annotations

from typing import Any

from kit_harness import AMOUNT
from trip_inputs import BOUNCING_INPUT, TRIP_INPUT

from saga_core import AgentPlan, PlannedAction, SagaDefinition, ToolCatalogue
from saga_core.contracts import ErrorClass, Receipt, SagaStatus, StepKind
from saga_core.engine.events import (
    ApprovalRequested,
    ManualInterventionRequired,
    ReconciliationResult,
    SagaEvent,
    SagaFinished,
    StepFailed,
    StepOutcomeUnknown,
    StepStarted,
    StepSucceeded,
)
from sagafleet.testing import InMemoryTools, TestFleet, TripTools

FWD, COMP = StepKind.FORWARD, StepKind.COMPENSATION



def _trip(input: dict[str, Any] = TRIP_INPUT) -> tuple[TestFleet, TripTools, str]:
    fleet = TestFleet()
    assert isinstance(fleet.tools, TripTools)
    return fleet, fleet.tools, fleet.client().start("trip", input, key="row").saga_id


def _of(events: list[SagaEvent], step: str, kind: StepKind, *types: type) -> list[Any]:
    return [e for e in events if isinstance(e, types)
            and getattr(e, "step_id", None) == step and e.kind is kind]


def test_row1_timeout_before_the_provider_reconciles_then_retries_with_the_same_key() -> None:
    fleet, tools, saga_id = _trip()
    tools.fail_next("flights.hold", "timeout_before_dispatch")
    fleet.run_until_idle()
    fleet.advance(60)  # the retry's backoff
    events = fleet.events(saga_id)
    assert fleet.state(saga_id).status is SagaStatus.COMPLETED
    assert [r.result for r in _of(events, "hold_flight", FWD, ReconciliationResult)] == ["absent"]
    assert len({s.operation_key for s in _of(events, "hold_flight", FWD, StepStarted)}) == 1
    assert tools.ledger(saga_id).flight_holds == 1


def test_row2_timeout_after_the_provider_committed_finds_the_receipt_by_key() -> None:
    fleet, tools, saga_id = _trip()
    tools.fail_next("payments.capture", "commit_then_timeout")
    fleet.run_until_idle()
    events = fleet.events(saga_id)
    assert [(s.attempt, s.via) for s in _of(events, "capture_payment", FWD, StepSucceeded)] \
        == [(1, "reconcile")]
    assert tools.ledger(saga_id).captures == 1 and tools.ledger(saga_id).is_complete_trip


def test_row3_a_worker_crash_after_success_recovers_from_the_persisted_intent() -> None:
    fleet, tools, saga_id = _trip()
    tools.fail_next("hotels.hold", "worker_crash_after_commit")
    fleet.run_until_idle()
    assert fleet.state(saga_id).status is SagaStatus.RUNNING  # the claim waits for its lease
    fleet.advance(60)  # the leases run out; the flight, never called, is retried
    events = fleet.events(saga_id)
    assert [u.reason for u in _of(events, "hold_hotel", FWD, StepOutcomeUnknown)] \
        == ["lease_expired"]
    assert fleet.state(saga_id).status is SagaStatus.COMPLETED
    assert tools.ledger(saga_id).hotel_holds == 1


def test_row4_a_replanned_action_is_the_same_operation_and_starts_nothing_new() -> None:
    fleet = TestFleet()
    client = fleet.client()
    hold = PlannedAction(tool="flights.hold",
                         args={"flight_id": "LH1", "passenger_email": "a@example.com"})
    other = PlannedAction(tool="hotels.hold",
                          args={"hotel_id": "H1", "nights": 1, "guest_email": "a@example.com"})
    first = client.submit_plan(AgentPlan(actions=[hold]), name="plan")
    replanned = client.submit_plan(AgentPlan(actions=[other, hold.model_copy()]), name="plan",
                                   version=2)
    assert first.steps[0].id == replanned.steps[1].id  # the action keeps its identity
    started = client.start("plan", {}, key="agent-turn-1", version=1)
    fleet.run_until_idle()
    again = client.start("plan", {}, key="agent-turn-1", version=1)  # the agent retries
    fleet.run_until_idle()
    assert again.saga_id == started.saga_id and not again.created
    assert fleet.state(started.saga_id).status is SagaStatus.COMPLETED
    assert isinstance(fleet.tools, TripTools)
    assert fleet.tools.ledger(started.saga_id).flight_holds == 1


def test_row5_a_compensation_timeout_is_reconciled_and_retried_with_its_own_key() -> None:
    fleet, tools, saga_id = _trip(BOUNCING_INPUT)
    tools.fail_next("hotels.release", "timeout_before_dispatch")
    fleet.run_until_idle()
    assert fleet.state(saga_id).status is SagaStatus.COMPENSATING  # never "fixed" on a timeout
    fleet.advance(60)
    events = fleet.events(saga_id)
    assert [r.result for r in _of(events, "hold_hotel", COMP, ReconciliationResult)] == ["absent"]
    assert len({s.operation_key for s in _of(events, "hold_hotel", COMP, StepStarted)}) == 1
    assert fleet.state(saga_id).status is SagaStatus.COMPENSATED
    assert tools.ledger(saga_id).is_unwound and not tools.ledger(saga_id).duplicates


def test_row6_a_changed_target_stops_for_a_human_who_resolves_it() -> None:
    fleet, tools, saga_id = _trip(BOUNCING_INPUT)
    tools.fail_next("flights.release", "target_changed")
    fleet.run_until_idle()
    assert fleet.state(saga_id).status is SagaStatus.MANUAL_INTERVENTION
    (manual,) = [e for e in fleet.events(saga_id) if isinstance(e, ManualInterventionRequired)]
    assert manual.reason.startswith("target changed") and manual.step_id == "hold_flight"
    assert tools.ledger(saga_id).active_flight_holds == 1  # the stale release did nothing
    operator = fleet.person("ops", roles={"operator"})
    operator.resolve(saga_id, "skip", step_id="hold_flight", kind=COMP,
                     reason="the customer kept the seat")
    fleet.run_until_idle()
    assert fleet.state(saga_id).status is SagaStatus.PARTIALLY_COMPENSATED


ANNOUNCE_TOOLS = ToolCatalogue.model_validate({"tools": [
    {"name": "hold", "semantics": "compensable", "dedupes_by_key": True,
     "commit_horizon_s": 10},
    {"name": "release", "semantics": "idempotent_by_key", "dedupes_by_key": True},
    {"name": "notify", "semantics": "irreversible", "receipt_fields": ["to"]},
    {"name": "correct", "semantics": "irreversible"},
    {"name": "book", "semantics": "compensable", "dedupes_by_key": True},
]})
ANNOUNCE = SagaDefinition.model_validate({
    "name": "announce", "version": 1,
    "steps": [
        {"id": "hold", "tool": "hold", "semantics": "compensable",
         "compensation": {"tool": "release", "args": {"id": "${receipt.resource_id}"}}},
        {"id": "notify", "tool": "notify", "semantics": "irreversible", "depends_on": ["hold"],
         "compensation": {"tool": "correct", "args": {"to": "${receipt.to}"}}},
        {"id": "book", "tool": "book", "semantics": "compensable", "depends_on": ["hold"],
         "compensation": {"tool": "release", "args": {"id": "${receipt.resource_id}"}}},
    ],
})


def test_row7_an_irreversible_effect_gets_its_correction_and_an_honest_end_state() -> None:
    sent: list[str] = []

    def effect(name: str) -> Any:
        def perform(args: Any, key: str) -> Receipt:
            sent.append(name)
            return Receipt(resource_id=f"{name}-{len(sent)}", fields={"to": "all@example.com"})
        return perform

    tools = InMemoryTools(ANNOUNCE_TOOLS)
    for name in ("hold", "release", "notify", "correct", "book"):
        tools.add(name, effect(name))
    fleet = TestFleet(definitions=[ANNOUNCE], tools=tools)
    tools.fail_next("book", "business_rejection")
    saga_id = fleet.client().start("announce", {}).saga_id
    fleet.run_until_idle()
    (finished,) = [e for e in fleet.events(saga_id) if isinstance(e, SagaFinished)]
    assert finished.state is SagaStatus.PARTIALLY_COMPENSATED
    assert "notify (irreversible, corrected)" in finished.summary
    assert sent == ["hold", "notify", "correct", "release"]  # correction before the release
    assert not tools.duplicate_effects()


def test_row8_authorization_expiring_during_recovery_pauses_for_renewed_approval() -> None:
    fleet, tools, saga_id = _trip(BOUNCING_INPUT)
    tools.fail_next("flights.release", "fail_before_commit", error_class="AuthExpired")
    fleet.run_until_idle()
    (asked,) = [e for e in fleet.events(saga_id) if isinstance(e, ApprovalRequested)]
    assert asked.step_id == "hold_flight" and asked.kind is COMP
    assert asked.scope == "renew_authorization"
    assert tools.ledger(saga_id).active_flight_holds == 1  # old authority is never reused
    fleet.person("ops-lead").approve(saga_id, "hold_flight", kind=COMP)
    fleet.run_until_idle()
    failed = _of(fleet.events(saga_id), "hold_flight", COMP, StepFailed)
    assert [f.error_class for f in failed] == [ErrorClass.AUTH_EXPIRED]
    assert fleet.state(saga_id).status is SagaStatus.COMPENSATED
    assert tools.ledger(saga_id).is_unwound and tools.ledger(saga_id).refunded == AMOUNT
