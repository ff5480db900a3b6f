"""Every read path shows one tenant: the queue, stats, alerts, audit and the saga list.

Tenant A's sagas (one stuck after a capture, one escalated to a person, one finished) are
projected next to tenant B's one saga; whatever B reads shows nothing of A's, and the
platform's own monitoring (the Prometheus exporter) is the one view that counts both.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from projection_support import TripScript
from read_model_support import project_all

from events.errors import InvalidArgument
from events.saga_log.postgres import PostgresSagaLog
from events.saga_log.streams import SagaNotFound
from projections import (
    ProjectionContext,
    SagaCursor,
    audit,
    business_alerts,
    collect_metrics,
    collect_platform_metrics,
    operator_queue,
    platform_alerts,
    saga_page,
)
from projections.metrics import DeadLetterMetrics
from saga_core.contracts import SagaStatus

pytestmark = pytest.mark.integration




def _stuck(tenant: str) -> TripScript:
    """A saga stopped right after its payment was captured (an alert: no confirmation)."""
    script = TripScript(tenant=tenant).start().succeed("hold_flight").succeed("hold_hotel")
    return script.succeed("capture_payment")


def _escalated(tenant: str) -> TripScript:
    """A saga waiting for a person (an operator-queue entry)."""
    return _stuck(tenant).fail("send_itinerary").escalate("capture_payment")


@pytest.fixture
def two_tenants(ctx: ProjectionContext, repo: PostgresSagaLog) -> dict[str, list[TripScript]]:
    """Tenant A: a stuck, an escalated and a completed saga; tenant B: one completed saga."""
    sagas = {"A": [_stuck("A"), _escalated("A"), TripScript(tenant="A").completed()],
             "B": [TripScript(tenant="B").completed()]}
    for scripts in sagas.values():
        for script in scripts:
            script.write(repo)
    project_all(ctx)
    return sagas


def test_tenant_b_sees_nothing_of_tenant_as_queue_stats_or_alerts(
    ctx: ProjectionContext, two_tenants: dict[str, list[TripScript]]
) -> None:
    a_ids = {script.saga_id for script in two_tenants["A"]}
    # when tenant B reads its queue, stats and alerts
    queue = operator_queue(ctx, tenant="B")
    metrics = collect_metrics(ctx, tenant="B")
    alerts = business_alerts(ctx, tenant="B")
    # then it sees only its own completed saga
    assert queue == []
    (trip,) = metrics.definitions
    assert (trip.sagas, trip.finished, trip.completion_rate) == (1, 1, 1.0)
    # (its dead letters are its own too: none here; tests/integration/security/
    # test_dead_letter_tenancy.py counts them per tenant)
    assert metrics.tenant == "B" and metrics.dead_letters == DeadLetterMetrics()
    assert {(t.tool, t.operations.operations_started) for t in metrics.tools
            if t.kind == "forward"} == {("flights.hold", 1), ("hotels.hold", 1),
                                        ("payments.capture", 1), ("email.send_itinerary", 1)}
    assert alerts == []
    # while tenant A sees its own escalation, counts and risks
    (entry,) = operator_queue(ctx, tenant="A")
    assert entry.saga_id in a_ids and entry.tenant == "A"
    (a_trip,) = collect_metrics(ctx, tenant="A").definitions
    assert (a_trip.sagas, a_trip.finished) == (3, 1)
    assert {a.saga_id for a in business_alerts(ctx, tenant="A")} <= a_ids
    assert business_alerts(ctx, tenant="A")


def test_the_platform_view_counts_every_tenant(
    ctx: ProjectionContext, two_tenants: dict[str, list[TripScript]]
) -> None:
    (trip,) = collect_platform_metrics(ctx).definitions
    assert trip.sagas == 4
    assert collect_platform_metrics(ctx).dead_letters is not None
    assert {a.saga_id for a in platform_alerts(ctx)} == {
        a.saga_id for a in business_alerts(ctx, tenant="A")}


def test_another_tenants_saga_cannot_be_audited(
    ctx: ProjectionContext, two_tenants: dict[str, list[TripScript]]
) -> None:
    saga_id = two_tenants["A"][0].saga_id
    # when tenant B audits tenant A's saga, then it is not found, as a saga nobody started
    with pytest.raises(SagaNotFound) as refused:
        audit(ctx, saga_id, tenant="B")
    with pytest.raises(SagaNotFound) as absent:
        audit(ctx, "no-such-saga", tenant="B")
    assert str(refused.value).replace(saga_id, "X") == str(absent.value).replace(
        "no-such-saga", "X")
    # while tenant A audits it
    assert audit(ctx, saga_id, tenant="A").chain_ok


def test_a_read_without_a_tenant_is_refused(ctx: ProjectionContext) -> None:
    for read in (lambda: operator_queue(ctx, tenant=""),
                 lambda: collect_metrics(ctx, tenant=" "),
                 lambda: business_alerts(ctx, tenant=""),
                 lambda: saga_page(ctx, tenant="", limit=1)):
        with pytest.raises(InvalidArgument):
            read()


def test_the_list_pages_through_one_tenants_sagas_newest_first(
    ctx: ProjectionContext, repo: PostgresSagaLog, two_tenants: dict[str, list[TripScript]]
) -> None:
    # given tenant A's three sagas (all started at the same saga-clock instant: the id
    # breaks the tie) and tenant B's one
    expected = sorted((s.saga_id for s in two_tenants["A"]), reverse=True)
    # when A pages through its sagas two at a time
    first = saga_page(ctx, tenant="A", limit=2)
    assert first.next_after is not None
    second = saga_page(ctx, tenant="A", limit=2, after=SagaCursor.parse(str(first.next_after)))
    # then it sees its own, newest first, each once, and the last page says so
    assert [r.saga_id for r in first.sagas + second.sagas] == expected
    assert second.next_after is None
    assert {r.tenant for r in first.sagas + second.sagas} == {"A"}
    # and filters narrow it; B's list holds only B's saga
    running = saga_page(ctx, tenant="A", limit=10, status=SagaStatus.RUNNING)
    assert {r.saga_id for r in running.sagas} == {two_tenants["A"][0].saga_id}
    assert saga_page(ctx, tenant="A", limit=10, definition="nothing").sagas == []
    assert [r.saga_id for r in saga_page(ctx, tenant="B", limit=10).sagas] == [
        two_tenants["B"][0].saga_id]
    # a saga started meanwhile sorts before the first page: the second page is unchanged
    later = TripScript(tenant="A")
    later.t += timedelta(hours=1)
    later.completed().write(repo)
    project_all(ctx)
    again = saga_page(ctx, tenant="A", limit=2, after=first.next_after)
    assert [r.saga_id for r in again.sagas] == [r.saga_id for r in second.sagas]


def test_a_cursor_that_is_not_one_is_refused_naming_it() -> None:
    for text in ("yesterday|x", "2026-01-01T00:00:00+00:00", "2026-01-01T00:00:00|x", "|x"):
        with pytest.raises(InvalidArgument, match="cursor"):
            SagaCursor.parse(text)
