"""Every append path stores the same bytes: the function, the chained insert, a caller's
transaction (savepoint) and a pipelined unit of work, for the same history of events."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import pytest

import events.eventstore.appending as appending
from events import NO_STREAM, EventStore, NewEvent, verify_chain

pytestmark = pytest.mark.integration

STREAM = 'trip-"ü"\\ 😀'
TYPE = 'Step"Done\\\u2028'

# Three appends (2, 1 and 2 events) with fixed ids, awkward text and numbers jsonb rewrites.
HISTORY = [
    [
        NewEvent(TYPE, {"b": 1.0, "a": [0.1, 1e16, -0.0], "é": 'q"\\'},
                 metadata={"tenant": "acme", "actor": "ü"},
                 event_id=UUID("01890000-0000-7000-8000-000000000001")),
        NewEvent("Second", {}, event_id=UUID("01890000-0000-7000-8000-000000000002")),
    ],
    [NewEvent(TYPE, {"n": {"deep": [True, None, 2**40]}}, schema_version=3,
              event_id=UUID("01890000-0000-7000-8000-000000000003"))],
    [
        NewEvent("Fourth", {"x": "\u2028\t"}, metadata={"tenant": 'w"ho'},
                 event_id=UUID("01890000-0000-7000-8000-000000000004")),
        NewEvent("Fifth", {"k": 12.5}, event_id=UUID("01890000-0000-7000-8000-000000000005")),
    ],
]  # fmt: skip
VERSIONS = [NO_STREAM, 2, 3]  # what each append expects

# Every column but those that legitimately differ (global_position, transaction_id), jsonb
# as the database prints it. The recording time is hashed: each store reads a fixed clock.
STORED = """
SELECT stream_id, stream_version, event_id, event_type, schema_version, data::text,
       metadata::text, tenant_id, recorded_at, hash_version, prev_hash, event_hash
  FROM eventstore.events WHERE stream_id = %s ORDER BY stream_version
"""
AT = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
HEAD = "SELECT version, last_hash FROM eventstore.streams WHERE stream_id = %s"


def _function_only(store: EventStore) -> None:
    # ANY never matches a remembered version: every append is chained by the server.
    for events in HISTORY:
        store.append(STREAM, events)


def _chained_only(store: EventStore) -> None:
    # A new stream (from the genesis hash), then at the versions this store's own appends
    # left it knowing.
    for events, expected in zip(HISTORY, VERSIONS, strict=True):
        store.append(STREAM, events, expected)


def _chained_as_arrays(store: EventStore) -> None:
    # As _chained_only, each batch sent as arrays (a batch this small is sent as a document).
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(appending, "ARRAYS_FROM", 2)
        assert appending.rows_for(2) is appending.Rows.ARRAYS
        _chained_only(store)


def _chained_one_by_one(store: EventStore) -> None:
    # Each event on its own: a new stream, then moves, every row sent as scalars.
    for expected, event in enumerate(event for events in HISTORY for event in events):
        store.append(STREAM, [event], expected if expected else NO_STREAM)


def _in_callers_transaction(store: EventStore) -> None:
    # Created outside; then one transaction whose appends run in savepoints: the first
    # chained from the remembered tip, the second (not remembered: uncommitted) by the server.
    store.append(STREAM, HISTORY[0], VERSIONS[0])
    with store.transaction() as unit:
        for events, expected in zip(HISTORY[1:], VERSIONS[1:], strict=True):
            unit.append(STREAM, events, expected)


def _pipelined_unit_of_work(store: EventStore) -> None:
    # As above, in one pipelined transaction.
    store.append(STREAM, HISTORY[0], VERSIONS[0])
    with store.transaction(pipelined=True) as unit:
        for events, expected in zip(HISTORY[1:], VERSIONS[1:], strict=True):
            unit.append(STREAM, events, expected)


PATHS: dict[str, Callable[[EventStore], None]] = {
    "function": _function_only,
    "chained insert": _chained_only,
    "chained insert, batches as arrays": _chained_as_arrays,
    "chained insert, one event at a time": _chained_one_by_one,
    "caller's transaction": _in_callers_transaction,
    "pipelined unit of work": _pipelined_unit_of_work,
}


@pytest.fixture
def statements_used(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Which statement wrote each append ("chained", "function"), in order."""
    used: list[str] = []

    def spy(name: str, real: Callable[..., list[Any]]) -> Callable[..., list[Any]]:
        def recording(*args: Any, **kwargs: Any) -> list[Any]:
            rows = real(*args, **kwargs)
            if rows:
                used.append(name)
            return rows

        return recording

    monkeypatch.setattr(
        appending, "_chained_insert", spy("chained", appending._chained_insert)
    )
    monkeypatch.setattr(
        appending, "_append_function", spy("function", appending._append_function)
    )
    yield used


def test_every_append_path_stores_byte_identical_rows_and_hashes(
    fresh_database: str, statements_used: list[str]
) -> None:
    stored: dict[str, tuple[list[tuple[Any, ...]], tuple[Any, ...] | None]] = {}
    paths_taken: dict[str, list[str]] = {}
    for name, append_history in PATHS.items():
        # given an empty stream and a store that remembers nothing about it
        with EventStore.connect(fresh_database, pool_size=2, clock=lambda: AT) as store:
            store.migrate()
            with store.connection() as conn:
                conn.execute("DELETE FROM eventstore.events WHERE stream_id = %s", (STREAM,))
                conn.execute("DELETE FROM eventstore.streams WHERE stream_id = %s", (STREAM,))
            statements_used.clear()
            # when the same history is appended through this path
            append_history(store)
            paths_taken[name] = list(statements_used)
            with store.connection() as conn:
                rows = conn.execute(STORED, (STREAM,)).fetchall()
                head = conn.execute(HEAD, (STREAM,)).fetchone()
            # then its chain verifies, head included
            report = verify_chain(store, STREAM)
            assert report.ok and report.events_checked == 5, (name, report)
        stored[name] = (rows, head)
    # and each path took the statements it stands for
    assert paths_taken == {
        "function": ["function"] * 3,
        "chained insert": ["chained"] * 3,
        "chained insert, batches as arrays": ["chained"] * 3,
        "chained insert, one event at a time": ["chained"] * 5,
        "caller's transaction": ["chained", "chained", "function"],
        "pipelined unit of work": ["chained", "chained", "function"],
    }
    # and every path stored the very same rows, hashes and head
    reference = stored["function"]
    assert len(reference[0]) == 5
    for name, found in stored.items():
        assert found == reference, name
