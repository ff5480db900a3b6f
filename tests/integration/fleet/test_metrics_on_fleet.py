"""The saga metrics of a real fleet run (real worker process, PostgreSQL, Redis) whose
faults, and so whose metric values, are known (issue 19 part 7)."""

from __future__ import annotations

import psycopg
import pytest
from read_model_support import project_all
from trip_inputs import TRIP_INPUT

from projections import ProjectionContext, collect_metrics
from saga_core.contracts import SagaStatus
from saga_core.engine.events import SagaFinished, SagaStarted, StepStarted

pytestmark = pytest.mark.integration


def _duration(fleet, saga_id: str) -> float:  # type: ignore[no-untyped-def]
    events = fleet.repo.load_history(saga_id).events
    started, finished = events[0], [e for e in events if isinstance(e, SagaFinished)][0]
    assert isinstance(started, SagaStarted)
    return (finished.at - started.at).total_seconds()


def _percentile_cont(values: list[float], q: float) -> float:
    ordered = sorted(values)
    rank = q * (len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def test_a_real_fleet_run_gives_the_metrics_its_faults_imply(
    fleet, faults, database, workers, wait_settled
):
    # given one worker, four trips run one after another: one clean, one whose flight hold
    # fails once before committing (retried), one whose hotel hold's answer is lost after
    # committing (ambiguous, found by key), one whose capture is declined (compensated)
    workers.start(1)
    client = fleet.client()
    cases = [("clean", None), ("retried", ("flights", "hold", "fail_before_commit")),
             ("ambiguous", ("hotels", "hold", "commit_then_timeout")),
             ("declined", ("payments", "capture", "business_rejection"))]
    sagas: dict[str, str] = {}
    for name, fault in cases:
        if fault is not None:
            faults.add(*fault, count=1)
        sagas[name] = client.start("trip", TRIP_INPUT, key=f"metrics-{name}").saga_id
        wait_settled(sagas[name])
    assert {n: fleet.repo.load(s).state.status for n, s in sagas.items()} == {
        "clean": SagaStatus.COMPLETED, "retried": SagaStatus.COMPLETED,
        "ambiguous": SagaStatus.COMPLETED, "declined": SagaStatus.COMPENSATED}
    with psycopg.connect(database) as conn:
        row = conn.execute("SELECT count(*) FROM fleet.redeliveries").fetchone()
        redeliveries = int(row[0]) if row else 0
    hold_starts = sum(
        1 for s in sagas.values() for e in fleet.repo.load_history(s).events
        if isinstance(e, StepStarted) and e.step_id == "hold_flight" and e.kind == "forward")
    # when the read model has caught up
    with ProjectionContext.connect(database) as ctx:
        project_all(ctx)
        metrics = collect_metrics(ctx, tenant="default")
    # then per definition
    (trip,) = metrics.definitions
    assert (trip.definition, trip.sagas, trip.finished, trip.waiting_for_operator) == (
        "trip", 4, 4, 0)
    assert (trip.completion_rate, trip.compensation_rate) == (0.75, 0.25)
    assert (trip.partial_compensation_rate, trip.manual_intervention_rate) == (0.0, 0.0)
    assert trip.stuck_saga_max_age_s == 0.0
    durations = [_duration(fleet, s) for s in sagas.values()]
    assert trip.invariant_restore_p50_s == pytest.approx(_percentile_cont(durations, 0.5))
    assert trip.invariant_restore_p95_s == pytest.approx(_percentile_cont(durations, 0.95))
    # and per tool: 4 flight holds, 5 attempts (the failed one retried)
    tools = {(t.tool, t.kind): t.operations for t in metrics.tools}
    hold = tools[("flights.hold", "forward")]
    assert (hold.operations_started, hold.attempts, hold.failed_operations) == (4, 5, 1)
    assert hold_starts == 5
    assert hold.retry_amplification == pytest.approx(
        (5 + hold.redeliveries) / 4, abs=1e-6)
    assert hold.redeliveries <= redeliveries
    hotel = tools[("hotels.hold", "forward")]
    assert (hotel.ambiguous_outcome_rate, hotel.reconciliation_success_rate) == (0.25, 1.0)
    assert tools[("payments.capture", "forward")].failed_operations == 1
    # the declined trip's holds were released; nothing else was compensated
    assert tools[("flights.release", "compensation")].operations_started == 1
    assert tools[("hotels.release", "compensation")].operations_started == 1
    assert ("payments.refund", "compensation") not in tools
    assert tools[("email.send_itinerary", "forward")].operations_started == 3
    assert all(t.duplicate_effect_incidents == 0 for t in tools.values())
