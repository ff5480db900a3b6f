"""The saga pages' pure parts: the list's query from a URL (every bad parameter named), the
replay position, and the dependency graph's layout and markup."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from application.client import saga_id_for_key
from events import Position
from events.errors import InvalidArgument
from saga_core.contracts import SagaStatus
from sagafleet.console.markup import Markup
from sagafleet.console.pages.saga_reading import parse_at
from sagafleet.console.pages.sagas_markup import parse_query, search_ids
from sagafleet.console.step_graph import NOT_STARTED, layout, step_graph
from sagafleet.example_sagas import trip_definition

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def test_a_full_query_becomes_one_filter() -> None:
    query = parse_query({"status": "MANUAL_INTERVENTION", "definition": " trip ",
                         "older_than": "2h", "started_after": "2026-11-01T00:00",
                         "stuck": "1", "stuck_minutes": "30", "q": "order-7", "limit": "20"},
                        tenant="acme", now=NOW)
    f = query.filters
    assert f.status is SagaStatus.MANUAL_INTERVENTION and f.definition == "trip"
    assert f.started_before == NOW - timedelta(hours=2)
    assert f.started_after == datetime(2026, 11, 1, tzinfo=UTC)  # no offset given: UTC
    assert f.stuck and f.stuck_after_s == 1800
    assert f.saga_ids == ("order-7", saga_id_for_key("acme", "order-7"))
    assert query.limit == 20 and query.older is None and query.newer is None


def test_older_than_and_started_before_together_keep_the_earlier_bound() -> None:
    query = parse_query({"older_than": "1d", "started_before": "2026-11-30T18:00+00:00"},
                        tenant="acme", now=NOW)
    assert query.filters.started_before == datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(("params", "named"), [
    ({"status": "ROLLED_BACK"}, "status is one of"),
    ({"older_than": "10 years"}, "older_than is a number and a unit"),
    ({"older_than": "999999d"}, "older_than is at most"),
    ({"started_before": "tomorrow"}, "started_before is a date"),
    ({"stuck_minutes": "-5"}, "stuck_minutes"),
    ({"limit": "100000"}, "limit is a page size"),
    ({"older": "2026-01-01"}, "older is a page cursor"),
    ({"older": "2026-01-01T00:00:00+00:00|a", "newer": "2026-01-01T00:00:00+00:00|b"},
     "older or newer, not both"),
    ({"q": "k" * 300}, "a search is a saga id or an idempotency key"),
])
def test_every_bad_parameter_is_refused_by_name(params: dict[str, str], named: str) -> None:
    with pytest.raises(InvalidArgument, match=named):
        parse_query(params, tenant="acme", now=NOW)


def test_a_search_means_the_id_itself_or_the_saga_its_key_started_in_this_tenant() -> None:
    assert search_ids("acme", "k1") != search_ids("other", "k1")
    assert search_ids("acme", " k1 ")[0] == "k1"


def test_the_replay_position_is_n_or_xid_n() -> None:
    assert parse_at("") is None and parse_at(None) is None
    assert parse_at(" 42 ") == 42
    assert parse_at("7:42") == Position(7, 42)
    for bad in ("soon", "-1", "4 2", "1:x"):
        with pytest.raises(InvalidArgument):
            parse_at(bad)


def test_the_graph_puts_each_step_after_what_it_depends_on() -> None:
    definition = trip_definition()
    picture = layout(definition, {("hold_flight", "forward"): "succeeded"})
    boxes = {(b.step_id, b.kind): b for b in picture.boxes}
    for step in definition.steps:
        for dep in step.depends_on:
            assert boxes[(dep, "forward")].x < boxes[(step.id, "forward")].x
        if step.compensation is not None:
            undo = boxes[(step.id, "compensation")]
            assert undo.y > boxes[(step.id, "forward")].y  # under its step
    assert boxes[("hold_flight", "forward")].state == "succeeded"
    assert boxes[("hold_hotel", "forward")].state == NOT_STARTED
    assert all(b.x + b.w <= picture.width and b.y + b.h <= picture.height
               for b in picture.boxes)
    undo_edges = [(e.source.step_id, e.target.step_id) for e in picture.edges
                  if e.style == "undo"]
    assert ("capture_payment", "hold_flight") in undo_edges  # undoing runs in reverse


def test_the_graph_markup_escapes_states_and_names_and_uses_no_inline_style() -> None:
    svg = step_graph(trip_definition(), {("hold_flight", "forward"): '<script>x</script>"'},
                     caption="<b>trip</b>")
    assert isinstance(svg, Markup)
    assert "<script>" not in svg and "<b>" not in svg
    assert "&lt;script&gt;" in svg
    assert not re.search(r"<[^>]*\sstyle=", svg)
    assert 'class="node forward st-_script_x__script__"' in svg  # a class of [a-z0-9_-] only


def test_the_reverse_order_is_drawn_across_a_step_without_compensation() -> None:
    trip = trip_definition()
    steps = [step.model_copy(update={"compensation": None, "semantics": "read_only"})
             if step.id == "capture_payment" else step for step in trip.steps]
    definition = trip.model_copy(update={"steps": steps})
    undo_edges = {(e.source.step_id, e.target.step_id) for e in layout(definition, {}).edges
                  if e.style == "undo"}
    assert ("send_itinerary", "hold_flight") in undo_edges  # through capture_payment
    assert ("send_itinerary", "hold_hotel") in undo_edges
    assert not any("capture_payment" in pair for pair in undo_edges)
