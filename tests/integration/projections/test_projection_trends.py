"""The health charts' buckets: one tenant's sagas over a window, counted where they belong."""

from __future__ import annotations

from datetime import timedelta

import pytest
from projection_support import T0, TripScript
from read_model_support import project_all

from events.saga_log.postgres import PostgresSagaLog
from projections import ProjectionContext
from projections.trends import TrendWindow, UnknownWindow, collect_trends

pytestmark = pytest.mark.integration

NOW = T0 + timedelta(minutes=50)  # the 1h window: 12 buckets of 5 min, T0 - 5 min .. T0 + 55


def _at(script: TripScript, minutes: float) -> TripScript:
    script.t = T0 + timedelta(minutes=minutes)
    return script


def test_trends_count_each_saga_in_the_bucket_it_started_or_finished_in(
    ctx: ProjectionContext, repo: PostgresSagaLog
) -> None:
    # given a completed saga around T0, a compensated one and an escalated one 20 min later,
    # one from long before the window, and another tenant's saga inside it
    completed = _at(TripScript(), 0).completed()
    compensated = _at(TripScript(), 20).compensated()
    escalated = _at(TripScript(), 21).start().succeed("hold_flight").escalate("hold_flight")
    old = _at(TripScript(), -120).completed()
    other = _at(TripScript(tenant="globex"), 1).compensated()
    for script in (completed, compensated, escalated, old, other):
        script.write(repo)
    with ctx.connection() as conn:  # the sweeper re-enqueued the compensated saga's capture
        conn.execute("INSERT INTO fleet.redeliveries (saga_id, step_id, kind, attempt, action)"
                     " VALUES (%s, 'capture_payment', 'forward', 1, 'execute')",
                     (compensated.saga_id,))
    project_all(ctx)

    # when the default tenant's 1h trends are read as of T0 + 50 min
    trends = collect_trends(ctx, tenant="default", window="1h", now=NOW)

    # then the window has 12 aligned buckets, and each saga counts in its own bucket
    assert trends.window.start == T0 - timedelta(minutes=5)
    assert len(trends.buckets) == 12
    by_start = {b.start: b for b in trends.buckets}
    first = by_start[T0]
    assert (first.started, first.finished, first.compensated) == (1, 1, 0)
    assert first.compensation_rate == 0.0
    assert first.time_to_terminal_p50_s == pytest.approx(
        (completed.events[-1].at - completed.events[0].at).total_seconds())
    assert first.retry_amplification == 1.0  # four operations, one start each
    later = by_start[T0 + timedelta(minutes=20)]
    assert (later.started, later.escalated, later.finished, later.compensated) == (2, 1, 1, 1)
    assert later.compensation_rate == 1.0
    assert later.manual_intervention_rate == 0.5
    # five operations started (3 forward, 2 compensations) + hold_flight of the escalated
    # one; seven attempts with the sweeper's one redelivery
    assert later.operations_started == 6 and later.redeliveries == 1
    assert later.retry_amplification == pytest.approx(7 / 6)
    assert later.throughput_per_min == pytest.approx(1 / 5)
    # the old saga and globex's are nowhere; an empty bucket has no rate at all
    assert sum(b.started for b in trends.buckets) == 3
    empty = by_start[T0 + timedelta(minutes=40)]
    assert empty.compensation_rate is None and empty.retry_amplification is None

    # and globex sees only its own saga
    theirs = collect_trends(ctx, tenant="globex", window="1h", now=NOW)
    assert sum(b.finished for b in theirs.buckets) == 1


def test_an_unknown_window_is_refused_by_name() -> None:
    with pytest.raises(UnknownWindow, match="'2h'"):
        TrendWindow.ending("2h", NOW)
