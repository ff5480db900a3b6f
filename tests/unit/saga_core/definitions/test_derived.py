"""A table of values derived from definitions: each derived once, the table bounded."""

from __future__ import annotations

from saga_core.definitions.derived import Derived


def test_a_value_is_derived_once_and_looked_up_after() -> None:
    # given a table and a derivation that counts its calls
    calls: list[str] = []
    table: Derived[str, str] = Derived(limit=4)

    def derive(key: str) -> str:
        calls.append(key)
        return key.upper()

    # when the same key is asked twice, then it is derived once
    assert table.get("a", lambda: derive("a")) == "A"
    assert table.get("a", lambda: derive("a")) == "A"
    assert calls == ["a"]


def test_a_full_table_is_emptied_before_it_keeps_another() -> None:
    # given a table of two, full
    table: Derived[int, int] = Derived(limit=2)
    derived: list[int] = []
    for key in (1, 2):
        table.get(key, lambda key=key: derived.append(key) or key)
    # when a third key comes, then the table starts afresh with it
    table.get(3, lambda: derived.append(3) or 3)
    table.get(3, lambda: derived.append(3) or 3)
    table.get(1, lambda: derived.append(1) or 1)
    assert derived == [1, 2, 3, 1]


def test_a_derived_none_is_kept_like_any_value() -> None:
    # given a derivation whose value is None (nothing to keep for this definition)
    calls: list[int] = []
    table: Derived[str, None] = Derived(limit=4)
    # when its key is asked twice, then it is derived once
    assert table.get("a", lambda: calls.append(1)) is None
    assert table.get("a", lambda: calls.append(1)) is None
    assert calls == [1]
