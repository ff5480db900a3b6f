"""The generic migrator: ordered, recorded, idempotent, locked, checksummed."""

from __future__ import annotations

import threading
from pathlib import Path

import psycopg
import pytest

from events import (
    EventStore,
    MigrationChecksumMismatch,
    MigrationError,
    apply_migrations,
)

pytestmark = pytest.mark.integration


def test_store_migrate_is_idempotent_and_creates_its_schema(fresh_database: str) -> None:
    with EventStore.connect(fresh_database) as store:
        # when migrating twice
        first = store.migrate()
        second = store.migrate()
        # then the first applies the store's files and the second nothing
        assert "0001_event_store" in first and second == []
        with store.connection() as conn:
            tables = {
                row[0]
                for row in conn.execute(
                    "SELECT table_name FROM information_schema.tables"
                    " WHERE table_schema = 'eventstore'"
                )
            }
            recorded = conn.execute(
                "SELECT namespace, name FROM sagafleet_migrations ORDER BY version"
            ).fetchall()
    assert {"events", "streams", "checkpoints"} <= tables
    assert recorded[0] == ("events", "0001_event_store")


def test_concurrent_migrators_take_turns(fresh_database: str) -> None:
    # given six processes' worth of migrators starting at once
    results: list[list[str]] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(6)

    def migrate() -> None:
        barrier.wait()
        try:
            with EventStore.connect(fresh_database, pool_size=1) as store:
                results.append(store.migrate())
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=migrate) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # then exactly one applied the files and nobody failed
    assert errors == []
    assert sorted(len(r) > 0 for r in results) == [False] * 5 + [True]


def test_a_room_applies_its_own_directory_in_order(fresh_database: str, tmp_path: Path) -> None:
    # given a namespace with two files, written out of order
    (tmp_path / "0002_add_column.sql").write_text("ALTER TABLE demo_things ADD COLUMN b int;")
    (tmp_path / "0001_create.sql").write_text("CREATE TABLE demo_things (a int);")
    (tmp_path / "README.txt").write_text("not a migration")

    # when applied twice
    assert apply_migrations(fresh_database, "demo", tmp_path) == ["0001_create", "0002_add_column"]
    assert apply_migrations(fresh_database, "demo", tmp_path) == []

    # then both ran in order (the ALTER needed the CREATE)
    with psycopg.connect(fresh_database) as conn:
        conn.execute("INSERT INTO demo_things (a, b) VALUES (1, 2)")


def test_an_edited_applied_file_is_a_typed_error(fresh_database: str, tmp_path: Path) -> None:
    # given an applied file
    (tmp_path / "0001_create.sql").write_text("CREATE TABLE demo_things (a int);")
    apply_migrations(fresh_database, "demo", tmp_path)

    # when it is edited afterwards, then migrating refuses
    (tmp_path / "0001_create.sql").write_text("CREATE TABLE demo_things (a bigint);")
    with pytest.raises(MigrationChecksumMismatch, match="0001_create"):
        apply_migrations(fresh_database, "demo", tmp_path)


def test_a_failing_file_rolls_back_alone_and_is_named(fresh_database: str, tmp_path: Path) -> None:
    # given a good file and a broken one
    (tmp_path / "0001_create.sql").write_text("CREATE TABLE demo_things (a int);")
    (tmp_path / "0002_broken.sql").write_text(
        "CREATE TABLE demo_half (a int); SELECT * FROM no_such_table;"
    )

    # when applying, then the error names the broken file
    with pytest.raises(MigrationError, match="0002_broken"):
        apply_migrations(fresh_database, "demo", tmp_path)

    # and the good file stays applied while the broken one left nothing behind
    with psycopg.connect(fresh_database) as conn:
        names = [r[0] for r in conn.execute("SELECT name FROM sagafleet_migrations")]
        half = conn.execute("SELECT to_regclass('demo_half')").fetchone()
    assert names == ["0001_create"] and half == (None,)


def test_malformed_file_names_are_rejected(fresh_database: str, tmp_path: Path) -> None:
    (tmp_path / "create.sql").write_text("SELECT 1;")
    with pytest.raises(MigrationError, match="NNNN_name"):
        apply_migrations(fresh_database, "demo", tmp_path)


def test_chains_written_before_0005_still_verify_and_continue_after_it(
    fresh_database: str, tmp_path: Path
) -> None:
    import shutil

    from events import NewEvent, verify_chain
    from events.eventstore.hashing import canonical_json, json_string

    # given a database migrated up to 0004, with a stream appended by 0004's function
    source = Path(__file__).parents[3] / "events" / "migrations"
    for name in ("0001_event_store", "0002_definitions", "0003_stream_prev_hash",
                 "0004_append_events_loop"):  # fmt: skip
        shutil.copy(source / f"{name}.sql", tmp_path)
    apply_migrations(fresh_database, "events", tmp_path)
    data = {"b": 1.5, "a": 'q"ü'}
    element = (
        '{"id":"01890000-0000-7000-8000-0000000000aa","type":"Old","sv":1,'
        f'"data":{canonical_json(data)},"meta":{{}},"tenant":null}}'
    )
    with psycopg.connect(fresh_database, autocommit=True) as conn:
        conn.execute(
            "SELECT * FROM eventstore.append_events(%s, %s, 0, %s::json, false)",
            ("old-ü", json_string("old-ü"), f"[{element}]"),
        )
    # when the store migrates (0005 on) and appends through both of its paths
    with EventStore.connect(fresh_database) as store:
        assert store.migrate() == sorted(
            f.stem for f in source.glob("*.sql") if int(f.name[:4]) >= 5)
        store.append("old-ü", [NewEvent("New", {"n": 1}), NewEvent("New", {})])  # function
        store.append("old-ü", [NewEvent("New", {"n": 4})], expected_version=3)  # chained
        # then the old events' hashes still verify, and the chain runs on through the new
        report = verify_chain(store, "old-ü")
    assert report.ok and report.events_checked == 4
