"""The store's row maker reads data and metadata as JSON text and parses them itself
(events.eventstore.driver.stored_event_row): it must hand back exactly what psycopg's own jsonb
loading
does, the slow obvious reference path, for every kind of JSON value jsonb stores."""

from __future__ import annotations

from typing import Any

import psycopg

from events import EventStore, NewEvent

AWKWARD: dict[str, Any] = {
    "unicode": "héllo ☃ 𝄞 \u2028",
    "escapes": 'quote " backslash \\ tab \t newline \n',
    "big": 123456789012345678901234567890,
    "negative": -(2**63),
    "float": 0.1,
    "exponent": 1.5e300,
    "tiny": 5e-324,
    "constants": [True, False, None],
    "nested": {"list": [[], {}, [1, [2, [3]]]], "empty": ""},
    "": "an empty key",
}


def _stored_by_psycopg(store: EventStore) -> list[tuple[Any, Any]]:
    """(data, metadata) of every event, decoded by psycopg's default jsonb loader."""
    with psycopg.connect(store.conninfo, autocommit=True) as plain:
        return plain.execute(
            "SELECT data, metadata FROM eventstore.events ORDER BY global_position"
        ).fetchall()


def test_reads_decode_stored_json_exactly_as_psycopg_does(store: EventStore) -> None:
    # given events whose data and metadata hold every kind of JSON value
    store.append("awkward", [
        NewEvent("Awkward", AWKWARD, metadata={"tenant": "t1", "note": AWKWARD}),
        NewEvent("Empty", {}),
    ], 0)

    # when they are read back through each read path
    by_stream = store.read_stream("awkward")
    by_log = store.read_all(limit=10)
    by_many = store.read_streams(["awkward"])["awkward"]

    # then each path decodes them exactly as psycopg's jsonb loader does
    expected = _stored_by_psycopg(store)
    for events in (by_stream, by_log, by_many):
        assert [(event.data, event.metadata) for event in events] == expected
    # and as what was appended, but for what jsonb itself rewrites (it prints a number
    # with a large exponent as its digits, which reads back as an int)
    kept = {key: value for key, value in AWKWARD.items() if key != "exponent"}
    assert {key: by_stream[0].data[key] for key in kept} == kept
    assert by_stream[0].data["exponent"] == 15 * 10**299
    assert by_stream[1].data == {} and by_stream[1].metadata == {}
