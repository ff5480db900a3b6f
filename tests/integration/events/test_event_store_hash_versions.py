"""A log written before hash versions keeps verifying after the upgrade, and grows in layout 2.

The database is first migrated as the release before events migration 0011 left it, and
written as that release's client wrote (layout-1 bodies, split around the version, sent to
that release's append function); then it is upgraded with the same migration files.
"""

from __future__ import annotations

import json
import shutil
import uuid
from datetime import UTC, datetime
from importlib.resources import as_file, files
from pathlib import Path

import psycopg
import pytest

from events import GENESIS_HASH, EventStore, NewEvent, apply_migrations, verify_chain
from events.eventstore.hashing import chain_hash, hash_body
from events.saga_log.streams import saga_registry

pytestmark = pytest.mark.integration

LAST_BEFORE_HASH_VERSIONS = 10


def _migrated_as_the_release_before(database: str, tmp_path: Path) -> None:
    old = tmp_path / "migrations"
    old.mkdir()
    with as_file(files("events").joinpath("migrations")) as migrations:
        for path in Path(migrations).glob("*.sql"):
            if int(path.name[:4]) <= LAST_BEFORE_HASH_VERSIONS:
                shutil.copy(path, old / path.name)
    apply_migrations(database, "events", old)


def _old_client_append(conn: psycopg.Connection, stream_id: str, data: list[dict]) -> list[str]:
    """Append as the release before wrote: each body split around the version, layout 1."""
    elements = []
    for item in data:
        event_id = str(uuid.uuid4())
        marker = 987654321  # a version no body holds otherwise: where to split
        body = hash_body(hash_version=1, stream_id=stream_id, stream_version=marker,
                         event_id=event_id, event_type="Noted", schema_version=1, data=item,
                         metadata={"tenant": "acme"}, tenant_id="acme",
                         recorded_at=datetime.now(UTC))
        before, after = body.split(str(marker))
        elements.append({"id": event_id, "type": "Noted", "sv": 1, "data": item,
                         "meta": {"tenant": "acme"}, "tenant": "acme",
                         "before": before, "after": after})
    rows = conn.execute("SELECT event_hash FROM eventstore.append_events(%s, -1, %s::jsonb, false)",
                        (stream_id, json.dumps(elements))).fetchall()
    return [str(r[0]) for r in rows]


def test_a_log_written_before_hash_versions_verifies_and_grows_after_the_upgrade(
    fresh_database: str, tmp_path: Path
) -> None:
    # given a database of the release before, written by its client, with a snapshot row
    _migrated_as_the_release_before(fresh_database, tmp_path)
    with psycopg.connect(fresh_database, autocommit=True) as conn:
        old_hashes = _old_client_append(conn, "ledger", [{"n": 1}, {"n": 2.5}])
        conn.execute("INSERT INTO eventstore.snapshots VALUES ('ledger', 2, 's', 'd', '{}',"
                      " now())")
    # when it is upgraded with this release's migrations
    with EventStore.connect(fresh_database, pool_size=2, registry=saga_registry()) as store:
        applied = store.migrate()
        assert applied[0] == "0011_hash_version"
        # then the old events read as layout 1 and verify with it, the first from genesis
        old = store.read_stream("ledger")
        assert [e.hash_version for e in old] == [1, 1]
        assert [e.event_hash for e in old] == old_hashes
        assert old[0].prev_hash == GENESIS_HASH
        assert old[0].event_hash == chain_hash(GENESIS_HASH, hash_body(
            hash_version=1, stream_id="ledger", stream_version=1,
            event_id=str(old[0].event_id), event_type="Noted", schema_version=1,
            data={"n": 1}, metadata={"tenant": "acme"}, tenant_id=None,
            recorded_at=old[0].recorded_at))
        assert verify_chain(store, "ledger").ok
        # and the stream grows in layout 2 on both append paths (the server's function: ANY
        # never uses a remembered tip; the chained insert: from the tip that append left)
        store.append("ledger", [NewEvent("Noted", {"n": 3}, metadata={"tenant": "acme"})])
        store.append("ledger", [NewEvent("Noted", {"n": 4}), NewEvent("Noted", {"n": 5})], 3)
        grown = store.read_stream("ledger")
        assert [e.hash_version for e in grown] == [1, 1, 2, 2, 2]
        report = verify_chain(store, "ledger")
        assert report.ok and report.events_checked == 5
        # and the snapshot without a seal is gone (loads write sealed ones as they fold)
        with store.connection() as conn:
            assert conn.execute("SELECT count(*) FROM eventstore.snapshots").fetchone() == (0,)


TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def test_a_trace_read_shows_no_event_whose_tenant_was_edited(store: EventStore) -> None:
    # given two events of tenant acme's saga recorded under a lineage trace
    metadata = {"tenant": "acme", "saga_trace_id": TRACE}
    store.append("saga-1", [NewEvent("Noted", {"n": n}, metadata=metadata) for n in (1, 2)])
    assert [e.stream_version for e in store.events_of_trace("acme", TRACE)] == [1, 2]
    # when one's tenant column is edited to another tenant's, and the other's column and
    # (hashed) metadata both
    with store.connection() as conn:
        conn.execute("UPDATE eventstore.events SET tenant_id = 'beta'"
                     " WHERE stream_id = 'saga-1' AND stream_version = 1")
        conn.execute("UPDATE eventstore.events SET tenant_id = 'beta', metadata = metadata"
                     " || '{\"tenant\": \"beta\"}' WHERE stream_id = 'saga-1'"
                     " AND stream_version = 2")
    # then the other tenant's trace read shows neither (the column alone is not the tenant,
    # and an event that does not match its hash is not shown), and acme's no longer either
    assert store.events_of_trace("beta", TRACE) == []
    assert store.events_of_trace("acme", TRACE) == []
    assert not verify_chain(store, "saga-1").ok
