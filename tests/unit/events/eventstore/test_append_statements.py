"""The 24 prebuilt chained inserts: each built once, each saying what its key says."""

from __future__ import annotations

from itertools import product

import pytest

from events.eventstore.appending import (
    ARRAYS_FROM,
    CHAINED_INSERTS,
    ChainedInsert,
    Rows,
    rows_for,
)

BOTH = (False, True)
EVERY_KEY = [ChainedInsert(*case) for case in product(BOTH, Rows, BOTH, BOTH)]


def test_every_combination_is_built_once_and_each_statement_is_its_own() -> None:
    # given the prebuilt statements, then there is one per combination of the four choices
    assert set(CHAINED_INSERTS) == set(EVERY_KEY)
    assert len(CHAINED_INSERTS) == 24
    # and no two keys share a text
    assert len(set(CHAINED_INSERTS.values())) == 24


@pytest.mark.parametrize(
    "key",
    EVERY_KEY,
    ids=lambda key: "-".join(
        on.value if isinstance(on, Rows) else name if on else f"no_{name}"
        for name, on in key._asdict().items()
    ),
)
def test_the_statement_says_what_its_key_says(key: ChainedInsert) -> None:
    # given the statement the key names
    text = CHAINED_INSERTS[key].decode()

    # then its head is created for a new stream, else moved on from the known version/hash
    creates = "INSERT INTO eventstore.streams" in text
    moves = "UPDATE eventstore.streams" in text
    assert (creates, moves) == (key.new_stream, not key.new_stream)
    if not key.new_stream:
        assert "s.version = %(expected)s AND s.last_hash = %(tip)s" in text

    # and its rows come from one event's scalars, one JSON document or one binary array
    # per column, as its key says
    from_scalars = "%(id)s::uuid" in text
    from_document = "jsonb_to_recordset(%(events)s::text::jsonb)" in text
    from_arrays = "unnest(%(ids)b::text[]" in text and "WITH ORDINALITY" in text
    assert (from_scalars, from_document, from_arrays) == (
        key.rows is Rows.ONE, key.rows is Rows.DOCUMENT, key.rows is Rows.ARRAYS)

    # and it wakes subscribers exactly when asked
    assert ("pg_notify('eventstore_events', '')" in text) is key.wake

    # and it writes the head's due time exactly when asked (a new stream without one: NULL)
    assert ("%(due_at)s" in text) is key.due
    if key.new_stream and not key.due:
        assert "VALUES (%(stream)s, %(version)s, %(last_hash)s, NULL)" in text


def test_the_key_names_its_choices() -> None:
    # given a key built by name, then it reads back by name and finds its statement
    key = ChainedInsert(new_stream=False, rows=Rows.ONE, wake=True, due=False)
    assert key._asdict() == {"new_stream": False, "rows": Rows.ONE, "wake": True, "due": False}
    assert CHAINED_INSERTS[key] is CHAINED_INSERTS[ChainedInsert(False, Rows.ONE, True, False)]


def test_an_appends_size_chooses_where_its_rows_come_from() -> None:
    # one event: scalars; a batch below the bound: a document; from the bound on: arrays
    assert rows_for(1) is Rows.ONE
    assert {rows_for(count) for count in range(2, ARRAYS_FROM)} == {Rows.DOCUMENT}
    assert rows_for(ARRAYS_FROM) is rows_for(ARRAYS_FROM * 40) is Rows.ARRAYS
