"""Event-store migration 0009 and the stream due time on PostgreSQL: unfinished saga streams
written before it are due at once; both append paths (the chained insert and the append
function) set the due time in the statement that moves the head; the due read is a range
scan of the partial index."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from importlib.resources import as_file, files
from pathlib import Path
from uuid import uuid4

import psycopg
import pytest

from events import EARLIEST, EventStore, NewEvent, apply_migrations
from events.eventstore.model import DueStream
from events.eventstore.postgres import _DUE_STREAMS, MIGRATIONS_NAMESPACE

pytestmark = pytest.mark.integration

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _element(event_type: str) -> dict[str, object]:
    """One event as the append function reads it (its hash body is not checked here)."""
    return {"id": str(uuid4()), "type": event_type, "sv": 1, "data": {}, "meta": {},
            "tenant": None, "before": event_type, "after": ""}


def test_unfinished_saga_streams_written_before_0009_are_due_at_once(
    fresh_database: str, tmp_path: Path
) -> None:
    # given a database migrated up to 0008 holding a running saga, a finished one and another stream
    before = tmp_path / "before_0009"
    before.mkdir()
    with as_file(files("events").joinpath("migrations")) as shipped:
        for sql_file in sorted(Path(shipped).glob("*.sql")):
            if int(sql_file.name[:4]) < 9:
                shutil.copy(sql_file, before / sql_file.name)
    apply_migrations(fresh_database, MIGRATIONS_NAMESPACE, before)
    with psycopg.connect(fresh_database, autocommit=True) as conn:
        for stream_id, types in (("saga-running", ["SagaStarted"]),
                                 ("saga-done", ["SagaStarted", "SagaFinished"]),
                                 ("orders-1", ["Placed"])):
            conn.execute(  # the append function as it was before 0009 (4 arguments)
                "SELECT * FROM eventstore.append_events(%s, -1, %s::jsonb, false)",
                (stream_id, json.dumps([_element(t) for t in types])))
    # when 0009 is applied
    with EventStore.connect(fresh_database, pool_size=1) as store:
        applied = store.migrate()
        assert applied[0] == "0009_stream_due_at"  # and the release's later ones, if any
        # then only the running saga is due, before anything else, and reads back as EARLIEST
        assert store.due_streams("", T0, 10) == [DueStream("saga-running", 1, EARLIEST)]


def test_both_append_paths_set_keep_and_clear_the_due_time(fresh_database: str) -> None:
    with EventStore.connect(fresh_database, pool_size=2) as store, \
            EventStore.connect(fresh_database, pool_size=2) as other:
        store.migrate()
        # a new stream (chained insert) and an append its store knows the tip of (chained)
        store.append("s-1", [NewEvent("A", {})], expected_version=0, due_at=T0)
        store.append("s-1", [NewEvent("A", {})], expected_version=1)
        assert store.due_streams("s-", T0, 10) == [DueStream("s-1", 2, T0)]
        # another store does not know the tip: the append function sets, keeps and clears
        later = T0 + timedelta(minutes=5)
        other.append("s-1", [NewEvent("B", {}), NewEvent("B", {})], expected_version=2,
                     due_at=later)
        assert store.due_streams("s-", later, 10) == [DueStream("s-1", 4, later)]
        other.append("s-1", [NewEvent("B", {})])
        assert store.due_streams("s-", later, 10) == [DueStream("s-1", 5, later)]
        other.append("s-1", [NewEvent("B", {})], due_at=None)
        assert store.due_streams("s-", later, 10) == []


def test_the_due_read_is_a_range_scan_of_the_partial_index(fresh_database: str) -> None:
    with EventStore.connect(fresh_database, pool_size=1) as store:
        store.migrate()
        with store.connection() as conn:
            # given many heads, one in a hundred of them with a due time (heads only: the
            # plan is what is looked at here, not appends)
            conn.execute(
                "INSERT INTO eventstore.streams (stream_id, version, last_hash, due_at)"
                " SELECT 's-' || n, 1, repeat('0', 64),"
                "        CASE WHEN n %% 100 = 0 THEN %s::timestamptz END"
                "   FROM generate_series(1, 20000) AS n", (T0,))
            conn.execute("ANALYZE eventstore.streams")
            # when the due read is planned, then it walks the partial index
            plan = "\n".join(row[0] for row in conn.execute(
                "EXPLAIN " + _DUE_STREAMS, (T0, "s-", 500)).fetchall())
        assert "Index Scan using streams_due_at" in plan, plan
        assert len(store.due_streams("s-", T0, 500)) == 200
