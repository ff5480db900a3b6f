"""Budgets on the real fleet (PostgreSQL, Redis, worker processes, the sweeper).

A saga past its time limit stops forward work and ends honestly, woken by the sweeper while
it waits for a person; a saga whose retry would break its cost budget compensates. Time is
moved with a fleet whose clock runs ahead (no wall-clock waits), costs are the catalogue's.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from fleet_harness import drive, events_of, shifted_fleet
from principal_support import person
from trip_inputs import TRIP_INPUT

from projections.context import ProjectionContext
from projections.queue import operator_queue
from projections.runner import ProjectionRunner
from saga_core.contracts import SagaStatus, StepKind
from saga_core.engine.events import BudgetExceeded, CompensationStarted, StepStarted
from sagafleet.commands.rendering import SagaReport
from sagafleet.example_sagas import trip_definition
from sagafleet.sandbox import Boundary, ledger_for_saga
from workers.sweeper import Sweeper

F = StepKind.FORWARD


def _forward_calls(fleet: Any, saga_id: str, step_id: str) -> list[StepStarted]:
    return [e for e in events_of(fleet, saga_id)
            if isinstance(e, StepStarted) and e.step_id == step_id and e.kind is F]


def test_a_trip_past_its_time_limit_while_awaiting_approval_is_woken_and_compensates(
    database, broker, fleet, workers, wait_settled
):
    # given a trip above the approval limit whose holds are done and whose capture waits
    workers.start(1)
    client = fleet.client()
    saga = client.start("trip", {**TRIP_INPUT, "amount": 250_000}, key="late-trip")
    wait_settled(saga.saga_id, until=lambda s: bool(
        client.status(saga.saga_id).pending_approvals))
    limit = trip_definition().budget.time_limit_s  # type: ignore[union-attr]
    # when a sweeper runs after the trip's time limit passed (its clock ahead by the limit;
    # the approval request, open for an hour, is left to expire on its own later)
    later = shifted_fleet(database, broker, timedelta(seconds=limit + 60))
    try:
        report = Sweeper(later).sweep()
        assert report.advanced >= 1, report
        # then the breach is recorded with its reason, and compensation begins
        events = events_of(fleet, saga.saga_id)
        [breach] = [e for e in events if isinstance(e, BudgetExceeded)]
        assert breach.limit == "time" and breach.allowed == limit
        assert f"time limit of {limit:g} s passed" in breach.reason
        started = next(e for e in events if isinstance(e, CompensationStarted))
        assert started.reason == breach.reason
        # and both holds are released (by a worker on the later clock: the schedules are
        # due from then); the saga ends compensated, the card untouched
        assert drive(later, saga.saga_id) is SagaStatus.COMPENSATED
    finally:
        later.close()
    assert _forward_calls(fleet, saga.saga_id, "capture_payment") == []
    ledger = ledger_for_saga(fleet.sandbox_pool, saga.saga_id)
    assert ledger.active_flight_holds == 0 and ledger.active_hotel_holds == 0
    assert ledger.captured == 0 and ledger.itineraries_sent == 0
    # and status shows the limit that stopped it
    view = client.status(saga.saga_id)
    assert view.budget is not None and view.budget["exceeded"]["limit"] == "time"
    assert "EXCEEDED: time limit" in SagaReport(view).to_text()


def test_a_trip_whose_retry_would_break_its_cost_budget_compensates(
    fleet, faults, workers, wait_settled
):
    # given a trip version whose budget pays for one call of every step and nothing more
    definition = trip_definition().model_dump(mode="json")
    definition.update(name="tight_trip", version=1,
                      budget={"max_cost": 35, "on_exceeded": "compensate"})
    person(fleet, "admin", ("admin",)).register_definition(definition)
    client = fleet.client()
    saga = client.start("tight_trip", TRIP_INPUT, key="tight-trip")
    # and a flight provider that fails its first call transiently (a retry would be needed)
    faults.add("flights", "hold", Boundary.FAIL_BEFORE_COMMIT, saga_id=saga.saga_id, count=1)
    # when workers run it
    workers.start(1)
    # then the retry is never scheduled: the breach is recorded and the trip compensates
    assert wait_settled(saga.saga_id) is SagaStatus.COMPENSATED
    events = events_of(fleet, saga.saga_id)
    [breach] = [e for e in events if isinstance(e, BudgetExceeded)]
    assert (breach.limit, breach.allowed, breach.step_id) == ("cost", 35, "hold_flight")
    assert len(_forward_calls(fleet, saga.saga_id, "hold_flight")) == 1
    assert _forward_calls(fleet, saga.saga_id, "capture_payment") == []
    ledger = ledger_for_saga(fleet.sandbox_pool, saga.saga_id)
    assert ledger.active_flight_holds == 0 and ledger.active_hotel_holds == 0
    assert ledger.captured == 0
    # and every call started, the undoing included, was charged at its tool's cost
    costs = {t.name: t.cost for t in fleet.catalogue.tools}
    trip = trip_definition()
    charged = sum(costs[trip.tool_for(e.step_id, e.kind)[0]] for e in events
                  if isinstance(e, StepStarted))
    view = client.status(saga.saga_id)
    assert view.budget is not None
    assert view.budget["spent"] == charged and view.budget["remaining"] == 35 - charged


def _queued(ctx: ProjectionContext, saga_id: str, timeout: float = 60.0) -> Any:
    """The saga's manual-intervention entry once the projector has seen it: it reads below
    the snapshot horizon, which another session's open transaction on a shared server holds
    back. ``timeout`` only bounds a hung run."""
    runner, deadline = ProjectionRunner(ctx), time.monotonic() + timeout
    while True:
        runner.catch_up()
        found = [e for e in operator_queue(ctx, tenant="default")
                 if e.saga_id == saga_id and e.entry == "manual_intervention"]
        if found:
            return found[0]
        assert time.monotonic() < deadline, "the queue never showed the saga"
        time.sleep(0.1)


def test_a_trip_declared_to_escalate_goes_to_the_operator_queue_with_its_budget(
    database, broker, fleet, workers, wait_settled
):
    # given a trip version that escalates on a limit, waiting for an approval
    definition = trip_definition().model_dump(mode="json")
    definition.update(name="escalating_trip", version=1,
                      budget={"time_limit_s": 600, "on_exceeded": "escalate"})
    person(fleet, "admin", ("admin",)).register_definition(definition)
    client = fleet.client()
    workers.start(1)
    saga = client.start("escalating_trip", {**TRIP_INPUT, "amount": 250_000}, key="queued")
    wait_settled(saga.saga_id, until=lambda s: bool(
        client.status(saga.saga_id).pending_approvals))
    # when a sweeper runs after the limit
    later = shifted_fleet(database, broker, timedelta(seconds=660))
    try:
        Sweeper(later).sweep()
    finally:
        later.close()
    # then the saga waits for a person, nothing undone, and the queue shows why, with the budget
    assert fleet.repo.load(saga.saga_id).state.status is SagaStatus.MANUAL_INTERVENTION
    with ProjectionContext.connect(database) as ctx:
        entry = _queued(ctx, saga.saga_id)
    assert "time limit of 600 s passed" in entry.reason
    assert entry.evidence["alternatives"] == ["resume", "cancel"]
    budget = entry.evidence["details"]["budget"]
    assert budget["exceeded"]["limit"] == "time" and budget["time_limit_s"] == 600
    assert budget["deadline"] is not None
    ledger = ledger_for_saga(fleet.sandbox_pool, saga.saga_id)
    assert ledger.active_flight_holds == 1 and ledger.active_hotel_holds == 1
