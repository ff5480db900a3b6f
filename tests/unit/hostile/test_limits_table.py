"""The Limits table of docs/limits.md says what saga_core.limits declares: every limit, its value
and its reason, in the same order (a changed value must change the documentation too)."""

from __future__ import annotations

from pathlib import Path

from saga_core.limits import ALL_LIMITS, Limit

PAGE = Path(__file__).resolve().parents[3] / "docs" / "limits.md"


def _value(limit: Limit) -> str:
    """How the table writes a value: KiB/MiB for byte sizes, spaced thousands otherwise."""
    value = limit.value
    if limit.name == "position_max":
        return "2^63 - 1"
    if limit.unit == "bytes" and value % 1024 == 0:
        return f"{value // 1024} KiB" if value < 1024 * 1024 else f"{value >> 20} MiB"
    return f"{value:,} {limit.unit}".replace(",", " ")


def test_the_docs_table_lists_every_limit_with_its_value_and_reason_in_order() -> None:
    # given the Limits page
    section = PAGE.read_text(encoding="utf-8")
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    # then it has one row per declared limit, as declared
    expected = [f"| `{limit.name}` | {_value(limit)} | {' '.join(limit.why.split())} |"
                for limit in ALL_LIMITS]
    assert rows[:len(expected)] == expected
