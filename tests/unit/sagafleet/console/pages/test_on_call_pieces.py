"""The pure pieces of the on-call queue: amounts in their currency, the time left, the
query string's filters, the gate's reason in words, who may approve (four eyes), a bulk
selection and the saga's context (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from application.client import InvalidRequest
from projections import QueueRow, TimelineEntry
from saga_core.contracts import StepKind
from saga_core.errors import ErrorKind
from sagafleet.console.actions import BulkTarget
from sagafleet.console.amounts import Money, format_amount, money_of
from sagafleet.console.pages.queue_items import queue_item
from sagafleet.console.pages.queue_line import bulk_value, gate_reason_text, time_left_text
from sagafleet.console.pages.queue_query import (
    BadQueueFilter,
    QueueCursor,
    QueueQuery,
    QueueSort,
    parse_age,
    parse_queue_query,
)
from sagafleet.console.pages.saga_context import context_of
from sagafleet.console.pages.saga_gantt import gantt_bars, render_gantt
from sagafleet.example_sagas import trip_definition

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _row(**changes: Any) -> QueueRow:
    fields: dict[str, Any] = {
        "saga_id": "s-1", "entry": "approval", "step_id": "capture_payment",
        "kind": "forward", "tenant": "acme", "definition_name": "trip",
        "reason": "approval policy applies", "action_hash": "h" * 64, "scope": "the quote",
        "evidence": {"intended_action": "forward capture_payment: payments.capture@1",
                     "details": {"args": {"amount": 250000, "currency": "USD"},
                                 "gate": {"role": "approver", "four_eyes": True,
                                          "risk_class": "money", "amount_arg": "amount",
                                          "amount": 250000,
                                          "reasons": ["catalogue gate: amount is above "
                                                      "100000"]}}},
        "deadline": NOW + timedelta(minutes=12), "requested_at": NOW - timedelta(minutes=3)}
    return QueueRow(**(fields | changes))


# -- amounts --------------------------------------------------------------------------------


def test_minor_units_read_as_money_in_their_currency() -> None:
    assert format_amount(250000, "USD") == "$2,500.00"
    assert format_amount(42000, "EUR") == "€420.00"
    assert format_amount(1234, "JPY") == "¥1,234"  # no minor unit
    assert format_amount(12345, "KWD") == "KWD 12.345"  # three decimals, no sign known
    assert format_amount(120000, "sek") == "SEK 1,200.00"


def test_without_a_currency_the_number_is_shown_as_it_is_never_guessed_into_money() -> None:
    assert format_amount(250000, None) == "250,000"
    assert format_amount(250000, "dollars") == "250,000"
    assert money_of({"amount": 250000}, "amount") is None


def test_the_currency_comes_from_the_gate_or_the_arguments_beside_the_amount() -> None:
    assert money_of({"amount": 250000, "currency": "eur"}, "amount") == Money(
        Decimal(250000), "EUR")
    assert money_of({"total": 5, "total_currency": "GBP", "currency": "EUR"},
                    "total") == Money(Decimal(5), "GBP")
    assert money_of({"amount": 7, "currency": "EUR"}, "amount", "USD") == Money(Decimal(7),
                                                                                "USD")
    assert money_of({"amount": True, "currency": "EUR"}, "amount") is None
    assert money_of({"amount": "lots", "currency": "EUR"}, "amount") is None
    assert money_of({"amount": 1, "currency": "EUR"}, None) is None


# -- time left ------------------------------------------------------------------------------


@pytest.mark.parametrize(("left", "text"), [
    (timedelta(seconds=45), "45 s left"),
    (timedelta(minutes=12, seconds=59), "12 min left"),
    (timedelta(hours=3, minutes=5), "3 h 5 min left"),
    (timedelta(hours=2), "2 h left"),
    (timedelta(days=2, hours=4, minutes=1), "2 d 4 h left"),
    (-timedelta(minutes=3), "expired 3 min ago"),
])
def test_the_time_left_reads_at_a_glance(left: timedelta, text: str) -> None:
    assert time_left_text(NOW + left, NOW) == text


def test_no_deadline_says_so() -> None:
    assert time_left_text(None, NOW) == "no deadline"


# -- the gate's reason ----------------------------------------------------------------------


def test_the_gate_reason_names_the_limit_in_the_requests_currency() -> None:
    text = gate_reason_text(["catalogue gate: amount is above 100000"], "approval policy applies",
                            amount_arg="amount", currency="USD")
    assert text == "amount is above $1,000.00"


def test_the_generic_policy_reason_gives_way_to_a_specific_one() -> None:
    reasons = ["catalogue gate: amount is above 100000", "the definition's approval policy applies"]
    assert gate_reason_text(reasons, "x", amount_arg="amount", currency="EUR") == (
        "amount is above €1,000.00")
    assert gate_reason_text(reasons[1:], "x", amount_arg="amount", currency="EUR") == (
        "the definition's approval policy applies")


def test_a_reason_about_another_argument_or_without_currency_stays_as_the_gate_wrote_it() -> None:
    reasons = ["catalogue gate: nights is above 7", "recipient is outside corp.example"]
    assert gate_reason_text(reasons, "x", amount_arg="amount", currency="USD") == (
        "nights is above 7; recipient is outside corp.example")
    assert gate_reason_text(["amount is above 100000"], "x", amount_arg="amount",
                            currency=None) == "amount is above 100000"


def test_without_a_gate_reason_the_queue_rows_reason_is_shown() -> None:
    assert gate_reason_text([], "the orchestrator escalated", amount_arg=None,
                            currency=None) == "the orchestrator escalated"


# -- the query string -----------------------------------------------------------------------


def test_an_empty_query_string_is_the_whole_queue_most_urgent_first() -> None:
    query = parse_queue_query({})
    assert query == QueueQuery() and query.sort is QueueSort.URGENT and not query.filtered


def test_filters_are_read_typed_and_written_back_the_same() -> None:
    params = {"gate": "approver", "risk": "money", "definition": "trip", "entry": "approval",
              "age": "2h", "q": "capture FL123", "sort": "oldest"}
    query = parse_queue_query(params)
    assert query.age == timedelta(hours=2) and query.sort is QueueSort.OLDEST
    assert query.filtered and query.params() == params


@pytest.mark.parametrize(("params", "named"), [
    ({"sort": "loudest"}, "sort"),
    ({"entry": "everything"}, "entry"),
    ({"age": "soon"}, "age"),
    ({"age": "400d"}, "age"),
    ({"gate": "x" * 201}, "gate"),
    ({"q": "a\x00b"}, "q"),
    ({"after": "not-a-cursor"}, "after"),
])
def test_a_bad_filter_value_is_refused_naming_the_parameter(params: dict[str, str],
                                                            named: str) -> None:
    with pytest.raises(BadQueueFilter) as refused:
        parse_queue_query(params)
    assert str(refused.value).startswith(named)
    assert refused.value.kind is ErrorKind.INVALID_INPUT  # a 400 page


def test_ages_take_minutes_hours_and_days() -> None:
    assert parse_age("30m") == timedelta(minutes=30)
    assert parse_age("1d") == timedelta(days=1)


def test_a_page_cursor_survives_the_round_trip_through_the_url() -> None:
    for deadline in (NOW, None):
        cursor = QueueCursor.of(_row(deadline=deadline))
        assert QueueCursor.decode(cursor.encode()) == cursor
        assert parse_queue_query({"after": cursor.encode()}).after == cursor


# -- who may approve ------------------------------------------------------------------------


def test_the_starter_is_kept_out_under_four_eyes_and_nobody_else_is() -> None:
    context = context_of("s-1", {"actor": "ana", "reason": "trip for the offsite"},
                         trip_definition(), "person")
    item = queue_item(_row(), None, [], trip_definition(), NOW, context=context)
    assert item.starter_excluded("ana") and not item.starter_excluded("bea")
    relaxed = _row(evidence=_row().evidence | {"details": {
        "args": {"amount": 250000}, "gate": {"role": "approver", "four_eyes": False}}})
    assert not queue_item(relaxed, None, [], trip_definition(), NOW,
                          context=context).starter_excluded("ana")


def test_a_line_says_how_much_and_why_in_words() -> None:
    item = queue_item(_row(), None, [], trip_definition(), NOW)
    assert str(item.money) == "$2,500.00"
    assert item.why_a_person == "catalogue gate: amount is above 100000"  # not the generic one


# -- bulk selection -------------------------------------------------------------------------


def test_a_selected_line_names_its_request_and_the_version_it_showed() -> None:
    item = queue_item(_row(), None, [], trip_definition(), NOW)
    assert item.seen_version is None  # no summary row: the version is unknown
    value = bulk_value(item)
    with pytest.raises(InvalidRequest):  # unknown version: the server could not bind it
        BulkTarget.parse(value)
    target = BulkTarget.parse("s-1|capture_payment|forward|9|" + "h" * 64)
    assert target == BulkTarget("s-1", "capture_payment", StepKind.FORWARD, 9, "h" * 64)


@pytest.mark.parametrize("value", ["", "s-1", "s-1|step|sideways|9|h", "s-1|step|forward|x|h",
                                   "|step|forward|9|h"])
def test_a_selection_that_is_not_a_line_is_refused(value: str) -> None:
    with pytest.raises(InvalidRequest):
        BulkTarget.parse(value)


# -- the saga's context ---------------------------------------------------------------------


def test_the_context_names_starter_reason_and_lineage_and_masks_secret_input() -> None:
    started = {"actor": "planner", "reason": "book the offsite",
               "lineage": {"model_name": "m-large", "prompt_version": "p7",
                           "agent_request_id": "req-1", "trace_id": "ab" * 16},
               "input": {"card_token": "tok_visa_4242", "nights": 2}}
    context = context_of("s-1", started, trip_definition(), "agent")
    assert context.starter_text == "planner (agent)"
    assert dict(context.lineage) == {"model": "m-large", "prompt": "p7", "request": "req-1",
                                     "trace": "ab" * 16}
    assert context.input["card_token"] == "***" and context.input["nights"] == 2


def test_without_the_definition_no_input_is_shown_and_an_unknown_starter_says_so() -> None:
    context = context_of("s-1", {"actor": "batch", "input": {"card_token": "tok"}}, None, None)
    assert context.input == {} and context.starter_text == "batch (not in the directory)"


# -- the saga's step runs on one time axis ---------------------------------------------------


def _entry(version: int, event_type: str, second: int, step: str | None = None,
           kind: str = "forward") -> TimelineEntry:
    return TimelineEntry(
        stream_version=version, position=f"1:{version}", global_position=version,
        type=event_type, at=NOW + timedelta(seconds=second), recorded_at=NOW, actor=None,
        step_id=step, kind=kind if step else None, operation_key=None, receipt=None,
        approval=None, event_hash="h", prev_hash="p", data={})


def test_each_attempt_and_each_wait_for_a_person_is_a_bar_and_open_ones_run_to_now() -> None:
    timeline = [_entry(1, "SagaStarted", 0), _entry(2, "StepStarted", 1, "hold_hotel"),
                _entry(3, "StepFailed", 2, "hold_hotel"),
                _entry(4, "StepStarted", 4, "hold_hotel"),
                _entry(5, "StepSucceeded", 6, "hold_hotel"),
                _entry(6, "ApprovalRequested", 6, "capture_payment"),
                _entry(7, "ApprovalDenied", 16, "capture_payment"),
                _entry(8, "StepStarted", 17, "hold_hotel", "compensation")]
    bars = gantt_bars(timeline, NOW + timedelta(seconds=20))
    assert [(b.step_id, b.kind, b.what, b.outcome) for b in bars] == [
        ("hold_hotel", "forward", "attempt 1", "failed"),
        ("hold_hotel", "forward", "attempt 2", "succeeded"),
        ("capture_payment", "forward", "waiting for a person", "denied"),
        ("hold_hotel", "compensation", "attempt 1", "running")]
    assert bars[-1].end == NOW + timedelta(seconds=20)
    drawn = str(render_gantt(bars, start=NOW, until=NOW + timedelta(seconds=20)))
    assert drawn.count("<rect") == 4 and "hold_hotel (compensation)" in drawn
    assert "style=" not in drawn  # the Content-Security-Policy refuses inline styles


def test_no_step_run_yet_is_said_in_words() -> None:
    assert "No step has started yet" in str(render_gantt([], start=NOW, until=NOW))
