"""Appending: optimistic concurrency, idempotency, bad input, the caller's transaction."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable

import psycopg
import pytest
from pydantic import BaseModel

from events import (
    ANY,
    NO_STREAM,
    ConcurrencyError,
    EventIdConflict,
    EventRegistry,
    EventStore,
    EventStoreError,
    InvalidEvent,
    NewEvent,
    StoreUnavailable,
    UnregisteredEventModel,
    verify_chain,
)

pytestmark = pytest.mark.integration

Count = Callable[[EventStore], int]


def test_append_to_a_new_stream_records_every_attribute(store: EventStore) -> None:
    # given a new stream
    # when two events are appended expecting no stream
    result = store.append(
        "trip-1",
        [
            NewEvent("TripRequested", {"city": "Lisboa", "nights": 3}, metadata={"tenant": "t1"}),
            NewEvent("HotelHeld", {"hold": "H-9"}, schema_version=2),
        ],
        expected_version=NO_STREAM,
    )

    # then they get versions 1 and 2 and read back with the same attributes
    assert result.version == 2 and not result.duplicate
    events = store.read_stream("trip-1")
    assert [(e.stream_version, e.type, e.schema_version) for e in events] == [
        (1, "TripRequested", 1),
        (2, "HotelHeld", 2),
    ]
    assert events[0].data == {"city": "Lisboa", "nights": 3}
    assert events[0].metadata == {"tenant": "t1"} and events[0].tenant_id == "t1"
    assert [e.event_id for e in events] == [e.event_id for e in result.events]
    assert [e.position for e in events] == [e.position for e in result.events]
    assert events[0].position < events[1].position
    assert events[1].prev_hash == events[0].event_hash
    assert events[0].recorded_at.tzinfo is not None
    assert store.stream_version("trip-1") == 2
    assert store.head_position() == events[1].position


def test_wrong_expected_version_names_stream_and_versions_and_writes_nothing(
    store: EventStore,
    count_events: Count,
) -> None:
    # given a stream at version 2
    store.append("s", [NewEvent("A", {}), NewEvent("B", {})], expected_version=0)

    # when appending with a stale expected version
    with pytest.raises(ConcurrencyError) as raised:
        store.append("s", [NewEvent("C", {})], expected_version=1)

    # then the error names the stream and both versions, and nothing was written
    assert (raised.value.stream_id, raised.value.expected, raised.value.actual) == ("s", 1, 2)
    assert "'s'" in str(raised.value) and "1" in str(raised.value) and "2" in str(raised.value)
    assert store.stream_version("s") == 2 and count_events(store) == 2


def test_no_stream_on_an_existing_stream_conflicts_and_any_appends(store: EventStore) -> None:
    # given an existing stream
    store.append("s", [NewEvent("A", {})])

    # when NO_STREAM is expected, then it conflicts
    with pytest.raises(ConcurrencyError) as raised:
        store.append("s", [NewEvent("B", {})], expected_version=NO_STREAM)
    assert raised.value.expected is NO_STREAM and raised.value.actual == 1

    # when ANY is expected, then it appends at the next version
    assert store.append("s", [NewEvent("B", {})], expected_version=ANY).version == 2

    # and a positive version for a missing stream conflicts with actual 0
    with pytest.raises(ConcurrencyError) as missing:
        store.append("missing", [NewEvent("A", {})], expected_version=3)
    assert missing.value.actual == 0 and store.stream_version("missing") == 0


def test_eight_racing_threads_end_with_versions_one_to_n(store: EventStore) -> None:
    # given eight writers that each append 10 events with read-then-expect retries
    per_thread, threads = 10, 8
    conflicts: list[int] = []
    barrier = threading.Barrier(threads)

    def writer(index: int) -> None:
        barrier.wait()
        for n in range(per_thread):
            while True:
                version = store.stream_version("race")
                try:
                    store.append("race", [NewEvent("Tick", {"w": index, "n": n})], version)
                    break
                except ConcurrencyError:
                    conflicts.append(index)

    # when they race on one stream
    workers = [threading.Thread(target=writer, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()

    # then the versions are exactly 1..N with no gaps or duplicates and the chain holds
    events = store.read_stream("race")
    assert [e.stream_version for e in events] == list(range(1, per_thread * threads + 1))
    assert sorted((e.data["w"], e.data["n"]) for e in events) == sorted(
        (w, n) for w in range(threads) for n in range(per_thread)
    )
    assert verify_chain(store, "race").ok
    assert conflicts, "the race produced no conflict; the test did not exercise concurrency"


def test_racing_creators_of_one_new_stream_yield_one_winner(store: EventStore) -> None:
    # given eight threads that all try to create the same stream
    barrier = threading.Barrier(8)
    outcomes: list[str] = []

    def creator() -> None:
        barrier.wait()
        try:
            store.append("fresh", [NewEvent("Created", {})], expected_version=NO_STREAM)
            outcomes.append("won")
        except ConcurrencyError:
            outcomes.append("lost")

    workers = [threading.Thread(target=creator) for _ in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()

    # then exactly one wins and the stream has one event
    assert sorted(outcomes) == ["lost"] * 7 + ["won"]
    assert [e.stream_version for e in store.read_stream("fresh")] == [1]


def test_retrying_stored_event_ids_returns_the_original_result(
    store: EventStore, count_events: Count
) -> None:
    # given an append with explicit ids
    ids = [uuid.uuid4(), uuid.uuid4()]
    batch = [NewEvent("A", {"x": 1.5}, event_id=ids[0]), NewEvent("B", {}, event_id=ids[1])]
    first = store.append("s", batch, expected_version=0)
    store.append("s", [NewEvent("C", {})], expected_version=2)

    # when the same batch is retried with the now-stale expected version (and with ANY)
    retried = store.append("s", batch, expected_version=0)
    again = store.append("s", batch, expected_version=ANY)

    # then both return the original versions and positions and nothing new is written
    for result in (retried, again):
        assert result.duplicate
        assert [(e.stream_version, e.position) for e in result.events] == [
            (e.stream_version, e.position) for e in first.events
        ]
    assert count_events(store) == 3 and store.stream_version("s") == 3


def test_same_event_id_with_different_content_is_a_loud_conflict(
    store: EventStore, count_events: Count
) -> None:
    # given a stored event
    event_id = uuid.uuid4()
    store.append("s", [NewEvent("A", {"amount": 10}, event_id=event_id)])

    # when the same id arrives with different data, or in another stream
    with pytest.raises(EventIdConflict) as raised:
        store.append("s", [NewEvent("A", {"amount": 11}, event_id=event_id)])
    with pytest.raises(EventIdConflict):
        store.append("other", [NewEvent("A", {"amount": 10}, event_id=event_id)])
    # or mixed with a new event
    with pytest.raises(EventIdConflict):
        store.append("s", [NewEvent("A", {"amount": 10}, event_id=event_id), NewEvent("B", {})])

    # then it names the id and nothing was written
    assert str(event_id) in str(raised.value)
    assert count_events(store) == 1 and store.stream_version("other") == 0


class Unregistered(BaseModel):
    """A model nobody registered."""

    x: int


@pytest.mark.parametrize(
    ("stream_id", "event", "fragment"),
    [
        ("s", NewEvent("A", {"when": object()}), "not JSON-serialisable"),
        ("s", NewEvent("A", {"ratio": float("nan")}), "not JSON-serialisable"),
        ("s", NewEvent("A", {"bad": "a\x00b"}), "NUL"),
        ("s", NewEvent("A", ["not", "an", "object"]), "JSON object"),  # type: ignore[arg-type]
        ("", NewEvent("A", {}), "stream id must not be empty"),
        ("s" * 201, NewEvent("A", {}), "limit is 200"),
        ("s", NewEvent("", {}), "type must not be empty"),
        ("s", NewEvent("T" * 201, {}), "limit is 200"),
        ("s", NewEvent("A", {"blob": "x" * 5000}), "limit is 4096"),
        ("s", NewEvent("A", {}, event_id="not-a-uuid"), "not a UUID"),
        ("s", NewEvent("A", {}, schema_version=0), "schema_version"),
        ("s", Unregistered(x=1), "no registry"),
    ],
)
def test_bad_input_is_rejected_before_any_write(
    fresh_database: str, stream_id: str, event: NewEvent, fragment: str, count_events: Count
) -> None:
    # given a store with a 4 KiB event limit
    with EventStore.connect(fresh_database, max_event_bytes=4096) as store:
        store.migrate()
        # when a bad event is appended, then a typed error names what is wrong
        with pytest.raises(InvalidEvent, match=fragment):
            store.append(stream_id, [event])
        # and nothing was written
        assert count_events(store) == 0


def test_registered_models_append_and_unregistered_models_fail(
    fresh_database: str, count_events: Count
) -> None:
    # given a store with a registry that knows one model
    class FlightBooked(BaseModel):
        pnr: str

    registry = EventRegistry()
    registry.register(FlightBooked, "FlightBooked", schema_version=3)
    with EventStore.connect(fresh_database, registry=registry) as store:
        store.migrate()
        # when a registered model instance is appended, then it is stored under its name
        store.append("s", [FlightBooked(pnr="ABC")])
        (recorded,) = store.read_stream("s")
        assert (recorded.type, recorded.schema_version) == ("FlightBooked", 3)
        assert registry.decode(recorded) == FlightBooked(pnr="ABC")
        # when an unregistered one is appended, then it fails before any write
        with pytest.raises(UnregisteredEventModel, match="Unregistered"):
            store.append("s", [FlightBooked(pnr="X"), Unregistered(x=1)])
        assert count_events(store) == 1


def test_duplicate_ids_in_one_batch_and_empty_batches_are_rejected(
    store: EventStore, count_events: Count
) -> None:
    event_id = uuid.uuid4()
    with pytest.raises(InvalidEvent, match="twice"):
        store.append(
            "s", [NewEvent("A", {}, event_id=event_id), NewEvent("B", {}, event_id=event_id)]
        )
    with pytest.raises(InvalidEvent, match="at least one"):
        store.append("s", [])
    assert count_events(store) == 0


UNITS = [pytest.param(pipelined, savepoints, id=f"pipelined={pipelined}-savepoints={savepoints}")
         for pipelined in (False, True) for savepoints in (True, False)]
"""Every kind of unit of work: plain or pipelined, appends in savepoints or not."""


@pytest.mark.parametrize(("pipelined", "savepoints"), UNITS)
def test_unit_of_work_commits_events_with_the_callers_rows(
    store: EventStore, pipelined: bool, savepoints: bool
) -> None:
    # given a caller table
    with store.connection() as conn:
        conn.execute("CREATE TABLE outbox (command text)")

    # when events and a caller row are written in one unit of work
    with store.transaction(pipelined=pipelined, savepoints=savepoints) as uow:
        uow.append("saga-1", [NewEvent("StepSucceeded", {"step": "hotel"})], expected_version=0)
        uow.connection.execute("INSERT INTO outbox VALUES ('book-flight')")
        uow.append("saga-1", [NewEvent("StepSucceeded", {"step": "car"})], expected_version=1)

    # and a second unit of work fails after appending
    with pytest.raises(RuntimeError), store.transaction(
            pipelined=pipelined, savepoints=savepoints) as uow:
        uow.append("saga-1", [NewEvent("StepSucceeded", {"step": "flight"})], expected_version=2)
        uow.connection.execute("INSERT INTO outbox VALUES ('send-email')")
        raise RuntimeError("crash before commit")

    # then only the first unit of work is visible, both parts of it
    assert [e.data["step"] for e in store.read_stream("saga-1")] == ["hotel", "car"]
    with store.connection() as conn:
        assert conn.execute("SELECT command FROM outbox").fetchall() == [("book-flight",)]


def test_a_conflict_inside_the_callers_transaction_leaves_it_usable(store: EventStore) -> None:
    # given a stream at version 1 and a caller's own connection with an open transaction
    store.append("s", [NewEvent("A", {})])
    with psycopg.connect(store.conninfo) as conn:
        conn.execute("CREATE TABLE marks (m int)")
        # when an append with a wrong version fails inside it
        with pytest.raises(ConcurrencyError):
            store.append("s", [NewEvent("B", {})], expected_version=5, conn=conn)
        # then the transaction goes on: a correct append and the caller's row both commit
        store.append("s", [NewEvent("B", {})], expected_version=1, conn=conn)
        conn.execute("INSERT INTO marks VALUES (1)")
        conn.commit()
    assert store.stream_version("s") == 2


def test_an_unreachable_database_is_store_unavailable() -> None:
    # given a store pointed at a port nothing listens on
    with EventStore.connect("postgresql://nobody@127.0.0.1:1/none", timeout=1.0) as store:
        # when appending, then the failure is typed
        with pytest.raises(StoreUnavailable):
            store.append("s", [NewEvent("A", {})])


def test_a_key_value_conninfo_works_like_a_url(fresh_database: str) -> None:
    # given the same database as key=value conninfo
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    conninfo = make_conninfo("", **conninfo_to_dict(fresh_database))
    assert "://" not in conninfo
    # when a store is opened on it, then it migrates and appends
    with EventStore.connect(conninfo) as store:
        store.migrate()
        assert store.append("s", [NewEvent("A", {})]).version == 1


@pytest.mark.parametrize(("pipelined", "savepoints"), UNITS)
@pytest.mark.parametrize("conflict", ["created", "moved"])
def test_a_conflict_in_a_unit_of_work_rolls_back_everything(
    store: EventStore, pipelined: bool, savepoints: bool, conflict: str
) -> None:
    # given a stream at version 1
    store.append("s", [NewEvent("A", {})])
    # when a unit of work appends elsewhere, then conflicts (creating the stream that
    # exists, or moving it from a version it is not at), and lets the error escape
    expected = NO_STREAM if conflict == "created" else 5
    with pytest.raises(ConcurrencyError), store.transaction(
            pipelined=pipelined, savepoints=savepoints) as uow:
        uow.append("other", [NewEvent("B", {})], expected_version=NO_STREAM)
        uow.append("s", [NewEvent("C", {})], expected_version=expected)
    # then neither append is visible, and the pooled connection is clean for the next unit
    assert store.stream_version("other") == 0 and store.stream_version("s") == 1
    with store.transaction(pipelined=pipelined, savepoints=savepoints) as uow:
        uow.append("s", [NewEvent("C", {})], expected_version=1)
    assert store.stream_version("s") == 2


@pytest.mark.parametrize("savepoints", [True, False])
def test_a_pipelined_unit_that_read_a_result_still_replays_stored_ids(
    store: EventStore, savepoints: bool
) -> None:
    # given a stream whose event id is known, and a pipelined unit that has read a result
    # (its connection then reads as idle, its BEGIN answered)
    first = store.append("s", [NewEvent("A", {"n": 1})]).events[0]
    with store.transaction(pipelined=True, savepoints=savepoints) as uow:
        assert uow.connection.execute("SELECT 1").fetchall() == [(1,)]
        # when it repeats the stored event at a stale version
        replayed = uow.append(
            "s", [NewEvent("A", {"n": 1}, event_id=first.event_id)], expected_version=0)
        uow.append("s", [NewEvent("B", {})], expected_version=1)
    # then the append ran in a savepoint all the same: the original is returned (it was
    # StoreUnavailable, "pipeline aborted", when the savepoint was skipped), and the unit
    # went on
    assert replayed.duplicate and replayed.events[0].position == first.position
    assert [e.type for e in store.read_stream("s")] == ["A", "B"]


def test_a_unit_without_savepoints_sends_none_but_for_an_append_that_gives_ids(
    store: EventStore,
) -> None:
    # given a stream at version 1 whose event id is known, and the statements a unit sends
    first = store.append("s", [NewEvent("A", {"n": 1})]).events[0]
    sent: list[str] = []
    with store.transaction(pipelined=True, savepoints=False) as uow:
        trace = uow.connection.execute
        uow.connection.execute = lambda query, *args, **kwargs: (  # type: ignore[method-assign]
            sent.append(str(query)), trace(query, *args, **kwargs))[1]
        # when it appends new events, then repeats the stored one by its id
        uow.append("t", [NewEvent("B", {})], expected_version=NO_STREAM)
        replayed = uow.append(
            "s", [NewEvent("A", {"n": 1}, event_id=first.event_id)], expected_version=0)
    # then only the append that gave ids ran in a savepoint (its replay is looked up after
    # the conflict is rolled back to it), and it returned the original
    assert [query for query in sent if "SAVEPOINT" in query] == [
        "SAVEPOINT eventstore_append", "ROLLBACK TO SAVEPOINT eventstore_append"]
    assert replayed.events[0].position == first.position
    assert store.stream_version("t") == 1


def test_a_pipelined_unit_of_work_survives_a_conflict_and_replays_stored_ids(
    store: EventStore,
) -> None:
    # given a stream at version 1 whose event id is known
    first = store.append("s", [NewEvent("A", {"n": 1})]).events[0]
    with store.connection() as conn:
        conn.execute("CREATE TABLE marks (m int)")
    # when a pipelined unit of work writes, hits a wrong version, retries the stored event
    # and then appends at the right version
    with store.transaction(pipelined=True) as uow:
        uow.connection.execute("INSERT INTO marks VALUES (1)")
        with pytest.raises(ConcurrencyError, match="expected version 5"):
            uow.append("s", [NewEvent("B", {})], expected_version=5)
        replayed = uow.append(
            "s", [NewEvent("A", {"n": 1}, event_id=first.event_id)], expected_version=0
        )
        uow.append("s", [NewEvent("C", {})], expected_version=1)
    # then the replay is the original, and the caller's row and the new event committed
    assert replayed.events[0].position == first.position
    assert [e.type for e in store.read_stream("s")] == ["A", "C"]
    with store.connection() as conn:
        assert conn.execute("SELECT m FROM marks").fetchall() == [(1,)]


def test_malformed_read_arguments_are_typed_errors_that_name_them(store: EventStore) -> None:
    from events import InvalidArgument, Position

    store.append("s", [NewEvent("A", {})])
    calls = [
        (lambda: store.read_stream(None), "stream id must be a string"),  # type: ignore[arg-type]
        (lambda: store.read_stream(5), "stream id must be a string"),  # type: ignore[arg-type]
        (lambda: store.read_stream("s\x00"), "NUL"),
        (lambda: store.read_stream("s\ud800"), "surrogate"),
        (lambda: store.read_stream("x" * 201), "201 characters; the limit is 200"),
        (lambda: store.read_stream("s", after_version=-1), "after_version must be an int"),
        (lambda: store.read_stream("s", to_version=2**64), "to_version must be an int"),
        (lambda: store.read_all(after="1:2"), "after must be a Position"),  # type: ignore[arg-type]
        (lambda: store.read_all(limit=-1), "limit must be an int"),
        (lambda: store.read_all(limit=True), "limit must be an int"),
        (lambda: store.stream_version("s\ud800"), "surrogate"),
        (lambda: Position.parse("junk"), "not of the form xid:position"),
    ]
    for call, message in calls:
        with pytest.raises(InvalidArgument, match=message):
            call()
    assert Position.parse(str(Position(7, 3))) == Position(7, 3)
    # an append names the same faults as InvalidEvent, before any write
    with pytest.raises(InvalidEvent, match="stream id: .* surrogate"):
        store.append("s\ud800", [NewEvent("A", {})])
    with pytest.raises(InvalidEvent, match="type: .* surrogate"):
        store.append("s", [NewEvent("A\udfff", {})])
    with pytest.raises(InvalidEvent, match="expected_version"):
        store.append("s", [NewEvent("A", {})], expected_version=2**64)
    assert store.stream_version("s") == 1


def test_a_failed_caller_statement_in_a_pipelined_unit_of_work_is_the_error_raised(
    store: EventStore,
) -> None:
    # given a pipelined unit of work whose own statement fails before the append is sent
    with pytest.raises(EventStoreError, match="no_such_table"):
        with store.transaction(pipelined=True) as uow:
            uow.connection.execute("INSERT INTO no_such_table VALUES (1)")
            uow.append("s", [NewEvent("A", {})], expected_version=0)
    # then that statement's error reaches the caller (not the append's savepoint), nothing
    # is written, and the pooled connection is clean for the next unit of work
    assert store.stream_version("s") == 0
    with store.transaction(pipelined=True) as uow:
        uow.append("s", [NewEvent("A", {})], expected_version=0)
    assert store.stream_version("s") == 1


def test_a_caller_error_raised_at_once_in_a_pipelined_unit_of_work_rolls_it_back_cleanly(
    store: EventStore, caplog: pytest.LogCaptureFixture
) -> None:
    # given a pipelined unit of work that appends, then runs a statement that fails
    with pytest.raises(EventStoreError, match="no_such_table"):
        with store.transaction(pipelined=True) as uow:
            uow.append("s", [NewEvent("A", {})], expected_version=0)
            uow.connection.execute("INSERT INTO no_such_table VALUES (1)").fetchall()
    # then nothing was written, and no connection went back to the pool mid-transaction
    assert store.stream_version("s") == 0
    assert not [r for r in caplog.records if "rolling back" in r.getMessage()]


def test_read_streams_reads_several_whole_streams_in_one_query(store: EventStore) -> None:
    from events import InvalidArgument
    from events.eventstore.rules import MAX_STREAMS_PER_READ

    # given two streams and one that was never written
    store.append("a", [NewEvent("A1", {}), NewEvent("A2", {})], expected_version=0)
    store.append("b", [NewEvent("B1", {"n": 1})], expected_version=0)
    store.append("a", [NewEvent("A3", {})], expected_version=2)
    # when they are read together (one id twice)
    found = store.read_streams(["b", "missing", "a", "b"])
    # then each id maps to its whole stream in version order, as read_stream reads it
    assert list(found) == ["b", "missing", "a"]
    assert [e.type for e in found["a"]] == ["A1", "A2", "A3"]
    assert found["a"] == store.read_stream("a") and found["b"] == store.read_stream("b")
    assert found["missing"] == [] and store.read_streams([]) == {}
    # and bad arguments are typed errors naming what is wrong
    with pytest.raises(InvalidArgument, match="sequence of stream id"):
        store.read_streams("a")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="stream id must not be empty"):
        store.read_streams(["a", ""])
    with pytest.raises(InvalidArgument, match=f"the limit is {MAX_STREAMS_PER_READ}"):
        store.read_streams(["a"] * (MAX_STREAMS_PER_READ + 1))
