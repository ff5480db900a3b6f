"""Every named metric of the seed, asserted against a fleet run whose values are known
(issue 19 part 7): per definition and per tool, in ``sagafleet stats`` (all history) and
on the Prometheus endpoint (the window), time to terminal over all four terminal states."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from metrics_fleet_run import Run, copy_into, run_scenarios
from prometheus_client.parser import text_string_to_metric_families
from read_model_support import project_all

from events.saga_log.postgres import PostgresSagaLog
from projections import ProjectionContext, collect_metrics
from projections.prometheus import scrape
from saga_core.engine.events import SagaEvent
from sagafleet.testing import TestFleet

pytestmark = pytest.mark.integration


def percentile_cont(values: list[float], q: float) -> float:
    """PostgreSQL's percentile_cont: linear interpolation between the closest ranks."""
    ordered = sorted(values)
    rank = q * (len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def near(expected: float) -> object:
    """A rate as ``stats`` reports it: rounded to 6 decimals."""
    return pytest.approx(expected, abs=1e-6)


@pytest.fixture
def fleet_run(ctx: ProjectionContext, repo: PostgresSagaLog) -> Run:
    run = run_scenarios()
    copy_into(run, repo)
    project_all(ctx)
    return run


def _last_at(fleet: TestFleet, saga_id: str) -> datetime:
    events: list[SagaEvent] = fleet.events(saga_id)
    return events[-1].at


def test_stats_reports_every_metric_per_definition_and_per_tool(ctx, fleet_run: Run) -> None:
    before = datetime.now(UTC)
    metrics = collect_metrics(ctx, tenant="default")
    after = datetime.now(UTC)
    by_definition = {d.definition: d for d in metrics.definitions}
    trip, flight = by_definition["trip"], by_definition["flight-only"]
    # sagas and terminal states: trip ran 7 (3 completed, 1 compensated, 1 partially
    # compensated, 1 committed with repair, 1 waiting for a person); flight-only 2
    assert (trip.sagas, trip.finished, trip.waiting_for_operator) == (7, 6, 1)
    assert trip.completion_rate == near(3 / 6)
    assert trip.compensation_rate == near(1 / 6)
    assert trip.partial_compensation_rate == near(1 / 6)
    # manual intervention: the partial, the repaired and the stuck trip needed a person
    assert trip.manual_intervention_rate == near(3 / 7)
    assert (flight.sagas, flight.finished, flight.waiting_for_operator) == (2, 2, 0)
    assert (flight.completion_rate, flight.compensation_rate) == (0.5, 0.5)
    assert flight.manual_intervention_rate == 0.0
    # time to terminal covers PARTIALLY_COMPENSATED (120 s) and COMMITTED_WITH_REPAIR (600 s)
    durations = fleet_run.durations("trip")
    assert len(durations) == 6 and 120.0 in durations and 600.0 in durations
    assert trip.invariant_restore_p50_s == near(percentile_cont(durations, 0.5))
    assert trip.invariant_restore_p95_s == near(percentile_cont(durations, 0.95))
    assert trip.invariant_restore_p95_s > 120.0
    assert flight.invariant_restore_p95_s == near(
        percentile_cont(fleet_run.durations("flight-only"), 0.95))
    # stuck age: the waiting trip's last change, against the database clock
    last = _last_at(fleet_run.fleet, fleet_run.sagas["stuck"])
    assert (before - last).total_seconds() - 1 <= trip.stuck_saga_max_age_s
    assert trip.stuck_saga_max_age_s <= (after - last).total_seconds() + 1
    assert flight.stuck_saga_max_age_s == 0.0
    # per tool and kind
    tools = {(t.tool, t.kind): t.operations for t in metrics.tools}
    hold = tools[("flights.hold", "forward")]
    # 9 holds (7 trips, 2 flight-only), one retried once: 10 attempts
    assert (hold.operations_started, hold.attempts) == (9, 10)
    assert hold.retry_amplification == near(10 / 9)
    assert hold.failed_operations == 2  # the retried one's first attempt; the declined one
    assert hold.ambiguous_outcome_rate == 0.0
    hotel = tools[("hotels.hold", "forward")]
    assert hotel.operations_started == 7
    assert hotel.ambiguous_outcome_rate == near(1 / 7)
    assert hotel.reconciliation_success_rate == 1.0
    send = tools[("email.send_itinerary", "forward")]
    # 6 sends (not the declined capture's); 2 ambiguous and never proven (5 lookups each)
    assert send.operations_started == 6
    assert send.ambiguous_outcome_rate == near(2 / 6)
    assert send.reconciliation_success_rate == 0.0
    release = tools[("flights.release", "compensation")]
    assert release.operations_started == 1 + 1  # the compensated trip's; the partial's try
    assert tools[("payments.capture", "forward")].failed_operations == 1
    assert all(t.duplicate_effect_incidents == 0 for t in tools.values())
    # per definition, the same operations summed
    assert flight.operations.operations_started == 2
    assert flight.operations.failed_operations == 1
    assert trip.operations.ambiguous_outcome_rate == near(
        3 / trip.operations.operations_started)
    assert trip.operations.attempts == trip.operations.operations_started + 1 + (
        send.attempts - send.operations_started)


def _families(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        out[family.name] = {tuple(sorted(s.labels.items())): s.value for s in family.samples
                            if s.name in (family.name, f"{family.name}_total")}
    return out


def test_the_endpoint_reports_the_same_run_under_its_prometheus_names(
    ctx, fleet_run: Run
) -> None:
    families = _families(scrape(ctx, 3 * 3600))
    # each saga series is one tenant's (the run's sagas are all of tenant "default")
    trip = (("definition", "trip"), ("tenant", "default"))
    flight = (("definition", "flight-only"), ("tenant", "default"))

    def value(name: str, labels: tuple[tuple[str, str], ...]) -> float:
        return families[name][tuple(sorted(labels))]

    assert value("sagafleet_sagas_started", trip) == 7
    assert value("sagafleet_sagas_started", flight) == 2
    for state, count in (("COMPLETED", 3), ("COMPENSATED", 1), ("PARTIALLY_COMPENSATED", 1),
                         ("COMMITTED_WITH_REPAIR", 1)):
        assert value("sagafleet_sagas_finished", (*trip, ("state", state))) == count
    assert value("sagafleet_saga_completion_ratio", trip) == pytest.approx(3 / 6)
    assert value("sagafleet_saga_compensation_ratio", trip) == pytest.approx(1 / 6)
    assert value("sagafleet_saga_partial_compensation_ratio", trip) == pytest.approx(1 / 6)
    assert value("sagafleet_saga_manual_intervention_ratio", trip) == pytest.approx(3 / 7)
    assert value("sagafleet_saga_manual_intervention_ratio", flight) == 0
    assert value("sagafleet_sagas_waiting_for_operator", trip) == 1
    durations = fleet_run.durations("trip")
    for q in (0.5, 0.95):
        assert value("sagafleet_saga_time_to_terminal_seconds",
                     (*trip, ("quantile", str(q)))) == pytest.approx(percentile_cont(durations, q))
    assert value("sagafleet_saga_stuck_age_seconds", trip) > 0
    hold = (("kind", "forward"), ("tool", "flights.hold"))
    assert value("sagafleet_tool_operations_started", hold) == 9
    assert value("sagafleet_tool_retry_amplification_ratio", hold) == pytest.approx(10 / 9)
    hotel = (("kind", "forward"), ("tool", "hotels.hold"))
    assert value("sagafleet_tool_ambiguous_outcome_ratio", hotel) == pytest.approx(1 / 7)
    assert value("sagafleet_tool_reconciliation_success_ratio", hotel) == 1.0
    send = (("kind", "forward"), ("tool", "email.send_itinerary"))
    assert value("sagafleet_tool_ambiguous_outcome_ratio", send) == pytest.approx(2 / 6)
    assert value("sagafleet_operations_failed", flight) == 1
