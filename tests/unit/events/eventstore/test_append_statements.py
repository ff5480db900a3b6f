"""The 16 prebuilt chained inserts: each built once, each saying what its key says."""

from __future__ import annotations

from itertools import product

import pytest

from events.eventstore.appending import CHAINED_INSERTS, ChainedInsert

EVERY_KEY = [ChainedInsert(*case) for case in product((False, True), repeat=4)]


def test_every_combination_is_built_once_and_each_statement_is_its_own() -> None:
    # given the prebuilt statements, then there is one per combination of the four choices
    assert sorted(CHAINED_INSERTS) == sorted(EVERY_KEY)
    assert len(CHAINED_INSERTS) == 16
    # and no two keys share a text
    assert len(set(CHAINED_INSERTS.values())) == 16


@pytest.mark.parametrize(
    "key",
    EVERY_KEY,
    ids=lambda key: "-".join(name if on else f"no_{name}" for name, on in key._asdict().items()),
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

    # and its rows come from one binary array per column for a batch, else from one
    # event's scalars
    from_arrays = "unnest(%(ids)b::text[]" in text and "WITH ORDINALITY" in text
    from_scalars = "%(id)s::uuid" in text
    assert (from_arrays, from_scalars) == (key.batch, not key.batch)

    # and it wakes subscribers exactly when asked
    assert ("pg_notify('eventstore_events', '')" in text) is key.wake

    # and it writes the head's due time exactly when asked (a new stream without one: NULL)
    assert ("%(due_at)s" in text) is key.due
    if key.new_stream and not key.due:
        assert "VALUES (%(stream)s, %(version)s, %(last_hash)s, NULL)" in text


def test_the_key_names_its_choices() -> None:
    # given a key built by name, then it reads back by name and finds its statement
    key = ChainedInsert(new_stream=False, batch=False, wake=True, due=False)
    assert key._asdict() == {"new_stream": False, "batch": False, "wake": True, "due": False}
    assert CHAINED_INSERTS[key] is CHAINED_INSERTS[ChainedInsert(False, False, True, False)]
