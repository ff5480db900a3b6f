"""``sagafleet list``'s page: its cursor survives being printed and read back, and the report
says where the next page starts (or that there is none)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from events.errors import InvalidArgument
from projections import SagaCursor, SagaPage, SummaryRow
from sagafleet.commands.rendering import SagaListReport

T0 = datetime(2026, 3, 1, 12, 30, 15, 123456, tzinfo=UTC)


def _row(saga_id: str, started_at: datetime) -> SummaryRow:
    return SummaryRow(saga_id=saga_id, stream_version=3, tenant="acme", definition_name="trip",
                      definition_version=1, definition_hash="h" * 64, state="RUNNING",
                      phase="forward", started_at=started_at, updated_at=started_at,
                      finished_at=None, compensation_started_at=None, current_steps=[],
                      last_error="", last_error_class=None, retry_budget_left=5,
                      cancel_requested=False, escalations=0, escalation_reason=None)


def test_a_printed_cursor_reads_back_as_the_same_position() -> None:
    # given a cursor whose saga id holds the separator itself
    cursor = SagaCursor(T0 + timedelta(hours=2), "key|with|bars")
    # when it is printed and parsed again, then it is the same position
    assert SagaCursor.parse(str(cursor)) == cursor


def test_a_page_with_more_says_how_to_continue_and_the_last_says_nothing_more() -> None:
    row = _row("s-2", T0)
    more = SagaListReport(SagaPage("acme", [row], SagaCursor(T0, "s-2")))
    assert more.to_json()["next_after"] == str(SagaCursor(T0, "s-2"))
    assert more.to_json()["sagas"][0]["saga_id"] == "s-2"
    assert "s-2  RUNNING" in more.to_text() and f"--after '{T0.isoformat()}|s-2'" in more.to_text()
    last = SagaListReport(SagaPage("acme", [row], None))
    assert last.to_json()["next_after"] is None and "--after" not in last.to_text()
    assert SagaListReport(SagaPage("acme", [], None)).to_text() == "no sagas for tenant acme"


def test_a_cursor_without_an_offset_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="cursor"):
        SagaCursor.parse(f"{T0.replace(tzinfo=None).isoformat()}|s-2")
