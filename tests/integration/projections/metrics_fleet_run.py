"""A fleet run whose every metric is known: scenarios on the in-memory test kit (exact
control of faults and time), copied event for event into PostgreSQL for the read model."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from trip_inputs import BOUNCING_INPUT, TRIP_INPUT

from events.saga_log.postgres import PostgresSagaLog
from saga_core import SagaDefinition
from saga_core.contracts import StepKind
from saga_core.engine.events import SagaFinished, SagaStarted
from sagafleet.example_sagas import trip_definition
from sagafleet.testing import TestClock, TestFleet, TripTools

# A second definition on the trip's tools, so that every metric is seen per definition.
FLIGHT_ONLY = SagaDefinition.model_validate({
    "name": "flight-only", "version": 1, "retry_budget": 10,
    "input": {"flight_id": {"type": "string", "min_length": 1},
              "customer_email": {"type": "string", "min_length": 3}},
    "steps": [{
        "id": "hold_flight", "tool": "flights.hold", "version": 1, "semantics": "compensable",
        "args": {"flight_id": "${input.flight_id}",
                 "passenger_email": "${input.customer_email}"},
        "retry": {"max_attempts": 4, "base_delay_s": 1.0, "max_delay_s": 30.0},
        "compensation": {"tool": "flights.release", "version": 1,
                         "args": {"hold_id": "${receipt.resource_id}"}},
    }],
})
FLIGHT_INPUT = {"flight_id": "FL-9", "customer_email": "ada@example.com"}


@dataclass
class Run:
    """The sagas of the run by scenario, and the fleet that ran them."""

    fleet: TestFleet
    sagas: dict[str, str] = field(default_factory=dict)

    def durations(self, definition: str) -> list[float]:
        """Start-to-terminal seconds of the definition's finished sagas, from their events."""
        out = []
        for saga_id in self.sagas.values():
            events = self.fleet.events(saga_id)
            started = events[0]
            assert isinstance(started, SagaStarted)
            finished = [e for e in events if isinstance(e, SagaFinished)]
            if started.definition_name == definition and finished:
                out.append((finished[0].at - started.at).total_seconds())
        return sorted(out)


def run_scenarios(start: datetime | None = None) -> Run:
    """Every scenario, one after another, each settled before the next begins."""
    begin = (start or datetime.now(UTC) - timedelta(hours=1)).replace(microsecond=0)
    clock = TestClock(begin)
    tools = TripTools(clock)
    fleet = TestFleet([trip_definition(), FLIGHT_ONLY], tools=tools)
    run = Run(fleet)
    client = fleet.client()
    ops = fleet.person("ops", roles={"operator"})

    def go(name: str, definition: str, data: dict) -> str:
        saga_id = client.start(definition, data, key=name).saga_id
        run.sagas[name] = saga_id
        fleet.run_until_idle()
        return saga_id

    # trip, completed at once: 4 operations, one attempt each
    go("ok", "trip", TRIP_INPUT)
    # trip, the flight hold fails once (transient) and its retry succeeds 10 s later
    tools.fail_next("flights.hold", "fail_before_commit")
    go("retried", "trip", TRIP_INPUT)
    fleet.advance(10)
    # trip, the hotel hold commits but its answer is lost: ambiguous, found by key
    tools.fail_next("hotels.hold", "commit_then_timeout")
    go("ambiguous", "trip", TRIP_INPUT)
    fleet.advance(60)
    # trip, the capture is declined: the holds are released (COMPENSATED)
    tools.fail_next("payments.capture", "business_rejection")
    go("compensated", "trip", TRIP_INPUT)
    # trip, the itinerary bounces and the flight's release finds its target changed: a
    # person skips that release 2 minutes later (PARTIALLY_COMPENSATED)
    tools.fail_next("flights.release", "target_changed")
    partial = go("partial", "trip", BOUNCING_INPUT)
    fleet.advance(120)
    ops.resolve(partial, "skip", step_id="hold_flight", kind=StepKind.COMPENSATION,
                reason="the customer kept the seat")
    fleet.run_until_idle()
    # trip, the itinerary's send is ambiguous and unprovable: a person declares it sent
    # (COMMITTED_WITH_REPAIR)
    tools.fail_next("email.send_itinerary", "commit_then_timeout")
    tools.fail_always("email.send_itinerary", "lookup_unavailable")
    repaired = go("repaired", "trip", TRIP_INPUT)
    fleet.advance(600)
    ops.resolve(repaired, "force_complete", step_id="send_itinerary", reason="sent by hand")
    fleet.run_until_idle()
    tools.clear_faults()
    # flight-only, completed; and one declined (nothing to undo: COMPENSATED)
    go("flight_ok", "flight-only", FLIGHT_INPUT)
    tools.fail_next("flights.hold", "business_rejection")
    go("flight_declined", "flight-only", FLIGHT_INPUT)
    # trip, left waiting for a person (the same unprovable send): stuck, in the queue
    tools.fail_next("email.send_itinerary", "commit_then_timeout")
    tools.fail_always("email.send_itinerary", "lookup_unavailable")
    go("stuck", "trip", TRIP_INPUT)
    fleet.advance(600)
    tools.clear_faults()
    return run


def copy_into(run: Run, repo: PostgresSagaLog) -> None:
    """Append every saga's events, as recorded, into the PostgreSQL log (its definition,
    as the test kit validated it, into the shared set)."""
    for saga_id in run.sagas.values():
        loaded = run.fleet.log.load_history(saga_id)
        repo.definitions.register_shared(loaded.definition, registered_by="test")
        repo.append(saga_id, loaded.state.tenant, loaded.events, 0, actor="agent")
