"""The client's fast start path writes what its plain path writes, byte for byte.

``SagaClient.start`` without a version takes the definition's highest version from the
process's cache and confirms it inside the start's own transaction (no lookup round trip):
the fast path. With a version it looks the definition up first: the plain path, the
reference. Given the same clock, key, input and lineage on two fresh databases, the two
must append the same events: the same types, versions, tenant and the same bytes of data
and metadata (only what each database assigns -- event ids, positions, transaction ids,
recording times and so the hashes over them -- may differ).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import psycopg
import pytest
from fleet_harness import SandboxFleet, build_fleet, install_everything
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from trip_inputs import TRIP_INPUT

from events.saga_log.streams import saga_stream

pytestmark = pytest.mark.integration

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
LINEAGE = {"agent_request_id": "req-1", "trace_id": "0af7651916cd43dd8448eb211c80319c"}

_STORED = """
SELECT stream_version, event_type, schema_version, tenant_id, hash_version,
       convert_to(data::text, 'UTF8'), convert_to(metadata::text, 'UTF8')
  FROM eventstore.events WHERE stream_id = %s ORDER BY stream_version
"""


def _fixed_clock() -> datetime:
    return NOW


@pytest.fixture
def second_database(pg_server_url: str) -> Iterator[str]:
    """Another fresh, fully migrated database beside the test's own; dropped afterwards."""
    dbname = f"sf_test_{uuid.uuid4().hex[:12]}"
    name = sql.Identifier(dbname)
    params = conninfo_to_dict(pg_server_url)
    params["dbname"] = dbname
    url = make_conninfo("", **params)
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(name))
    try:
        install_everything(url)
        yield url
    finally:
        with psycopg.connect(pg_server_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))


def _fleet(database: str, broker: str) -> SandboxFleet:
    """The harness's test fleet (the trip registered), on the fixed clock: its orchestrator,
    which reads the clock, is built on first use, after the clock is set here."""
    fleet = build_fleet(database, broker, worker_id="fast-start")
    assert "orchestrator" not in vars(fleet), "the fleet's orchestrator was built too early"
    fleet.clock = _fixed_clock
    return fleet


def _stored(database: str, saga_id: str) -> list[tuple[object, ...]]:
    with psycopg.connect(database) as conn:
        return [tuple(bytes(v) if isinstance(v, memoryview) else v for v in row)
                for row in conn.execute(_STORED, (saga_stream(saga_id),))]


def test_the_fast_start_writes_the_same_bytes_as_the_plain_start(
    database: str, second_database: str, broker: str
) -> None:
    fast_fleet, plain_fleet = _fleet(database, broker), _fleet(second_database, broker)
    try:
        fast, plain = fast_fleet.client(), plain_fleet.client()
        # given the fast path's cache warmed by an earlier start (as in a running process)
        fast.start("trip", TRIP_INPUT, key="warm-up")
        # when the same start runs on each path, on its own database
        by_cache = fast.start("trip", TRIP_INPUT, key="order-7", reason="booked by phone",
                              lineage=LINEAGE)
        version = by_cache.definition_version
        by_lookup = plain.start("trip", TRIP_INPUT, key="order-7", reason="booked by phone",
                                lineage=LINEAGE, version=version)
        # then both started the same saga, and stored the same events byte for byte
        assert by_cache.created and by_lookup.created
        assert by_cache.saga_id == by_lookup.saga_id
        written = _stored(database, by_cache.saga_id)
        assert len(written) > 1  # the start and what decide scheduled with it
        assert written == _stored(second_database, by_lookup.saga_id)
    finally:
        fast_fleet.close()
        plain_fleet.close()
