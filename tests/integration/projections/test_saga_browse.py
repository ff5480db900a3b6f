"""projections.browse_sagas against the obvious reference: every summary row read, filtered
and sorted in Python. Paging older page by page, then newer page by page back, must give
exactly the reference list for every filter, for one tenant only.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from projection_support import T0, TripScript
from read_model_support import project_all

from events.errors import InvalidArgument
from events.saga_log.postgres import PostgresSagaLog
from projections import ProjectionContext, SagaCursor, SagaFilter, browse_sagas
from projections.rows import SummaryRow
from projections.store import read_rows
from saga_core.contracts import SagaStatus
from sagafleet.example_sagas import trip_definition

pytestmark = pytest.mark.integration

PAGE = 4


def _script(i: int, tenant: str) -> TripScript:
    script = TripScript(tenant=tenant)
    if i % 5 == 0:
        script.definition = trip_definition().model_copy(update={"name": "trip.express"})
    script.t = T0 + timedelta(hours=i // 2)  # pairs start together: the id breaks the tie
    match i % 4:
        case 0:
            return script.completed()
        case 1:
            return script.compensated()
        case 2:
            return script.start().succeed("hold_flight")  # running, long unchanged: stuck
        case _:
            return script.start().succeed("hold_flight").succeed("hold_hotel") \
                .succeed("capture_payment").fail("send_itinerary").escalate()


@pytest.fixture
def summaries(ctx: ProjectionContext, repo: PostgresSagaLog) -> list[SummaryRow]:
    """26 sagas of tenant A (four kinds, two definitions, starts in pairs) and 6 of B."""
    ctx.definitions.register_shared(trip_definition().model_copy(update={"name": "trip.express"}))
    for i in range(32):
        _script(i, "A" if i < 26 else "B").write(repo)
    project_all(ctx)
    with ctx.connection() as conn:
        return [rows.summary for rows in read_rows(conn, 1).values() if rows.summary]


def _reference(rows: list[SummaryRow], f: SagaFilter, now: datetime) -> list[str]:
    def passes(r: SummaryRow) -> bool:
        return (r.tenant == "A"
                and (f.status is None or r.state == f.status)
                and (f.definition is None or r.definition_name == f.definition)
                and (f.started_after is None or r.started_at >= f.started_after)
                and (f.started_before is None or r.started_at < f.started_before)
                and (not f.stuck or (not SagaStatus(r.state).is_terminal
                                     and r.updated_at < now - timedelta(seconds=f.stuck_after_s)))
                and (f.saga_ids is None or r.saga_id in f.saga_ids))

    chosen = sorted((r for r in rows if passes(r)), key=lambda r: (r.started_at, r.saga_id),
                    reverse=True)
    return [r.saga_id for r in chosen]


def _paged_both_ways(ctx: ProjectionContext, f: SagaFilter) -> tuple[list[str], list[str]]:
    pages = [browse_sagas(ctx, tenant="A", limit=PAGE, filters=f)]
    while pages[-1].older is not None:
        pages.append(browse_sagas(ctx, tenant="A", limit=PAGE, filters=f,
                                  older_than=pages[-1].older))
    forward = [s.saga_id for p in pages for s in p.sagas]
    back = [s.saga_id for s in pages[-1].sagas]
    page = pages[-1]
    while page.newer is not None:
        page = browse_sagas(ctx, tenant="A", limit=PAGE, filters=f, newer_than=page.newer)
        back = [s.saga_id for s in page.sagas] + back
    return forward, list(dict.fromkeys(back))


def test_every_filter_pages_to_exactly_the_reference_list_both_ways(
        ctx: ProjectionContext, summaries: list[SummaryRow]) -> None:
    some = next(r for r in summaries if r.tenant == "A")
    foreign = next(r for r in summaries if r.tenant == "B")
    filters = [
        SagaFilter(),
        SagaFilter(status=SagaStatus.COMPLETED),
        SagaFilter(status=SagaStatus.MANUAL_INTERVENTION),
        SagaFilter(definition="trip.express"),
        SagaFilter(status=SagaStatus.COMPENSATED, definition="trip"),
        SagaFilter(started_before=T0 + timedelta(hours=6)),
        SagaFilter(started_after=T0 + timedelta(hours=3), started_before=T0 + timedelta(hours=9)),
        SagaFilter(stuck=True),
        SagaFilter(saga_ids=(some.saga_id, foreign.saga_id)),
    ]
    now = datetime.now(UTC)
    for f in filters:
        expected = _reference(summaries, f, now)
        forward, back = _paged_both_ways(ctx, f)
        assert forward == expected, f
        assert back == expected, f
    assert _paged_both_ways(ctx, SagaFilter(saga_ids=(foreign.saga_id,)))[0] == []


def test_a_newer_page_near_the_top_is_the_whole_newest_page(
        ctx: ProjectionContext, summaries: list[SummaryRow]) -> None:
    first = browse_sagas(ctx, tenant="A", limit=PAGE)
    second = browse_sagas(ctx, tenant="A", limit=PAGE, older_than=first.older)
    # a cursor only two rows below the top: fewer than a page is newer, so the top page shows
    two_down = SagaCursor(first.sagas[2].started_at, first.sagas[2].saga_id)
    back = browse_sagas(ctx, tenant="A", limit=PAGE, newer_than=two_down)
    assert [s.saga_id for s in back.sagas] == [s.saga_id for s in first.sagas]
    assert back.newer is None and second.newer is not None


def test_bad_arguments_are_refused_by_name(ctx: ProjectionContext) -> None:
    cursor = SagaCursor(T0, "x")
    with pytest.raises(InvalidArgument, match="not both"):
        browse_sagas(ctx, tenant="A", limit=3, older_than=cursor, newer_than=cursor)
    with pytest.raises(InvalidArgument, match="at least one"):
        browse_sagas(ctx, tenant="A", limit=0)
    with pytest.raises(InvalidArgument, match="time zone"):
        SagaFilter(started_before=datetime(2026, 1, 1))
    with pytest.raises(InvalidArgument, match="stuck_after_s"):
        SagaFilter(stuck_after_s=-1)
