"""The live append function is the one ``events/eventstore/append.sql`` defines.

The migrations install ``eventstore.append_events`` (last from 0014, which holds the file's
text); these tests prove the database's live definition equals what the file says, so the
file can be read instead of the migrations' history.
"""

from __future__ import annotations

from importlib.resources import files

import psycopg
import pytest

from events import EventStore

pytestmark = pytest.mark.integration

APPEND_SQL = files("events").joinpath("eventstore", "append.sql").read_text("utf-8")

_DEFINITIONS = """
SELECT pg_get_functiondef(p.oid)
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = 'eventstore' AND p.proname = 'append_events'
"""


def _live_definitions(conn: psycopg.Connection[object]) -> list[str]:
    return [row[0] for row in conn.execute(_DEFINITIONS)]


def test_the_migrated_append_function_is_the_one_append_sql_defines(
    fresh_database: str,
) -> None:
    # given a database the event store migrated
    with EventStore.connect(fresh_database) as store:
        store.migrate()
    with psycopg.connect(fresh_database) as conn:
        # and its one live append function
        live = _live_definitions(conn)
        assert len(live) == 1, f"expected one eventstore.append_events, found {len(live)}"
        # when the file's text is installed over it (in a transaction rolled back after)
        try:
            conn.execute(APPEND_SQL.encode("utf-8"))
        except psycopg.Error as exc:  # a changed signature or result cannot be replaced
            pytest.fail(f"append.sql cannot replace the live function: {exc}")
        from_file = _live_definitions(conn)
        conn.rollback()
    # then nothing changed: the same one function, defined the same, byte for byte
    assert from_file == live


def test_the_file_defines_the_function_that_the_migrations_leave_live(
    fresh_database: str,
) -> None:
    # given the file's definition installed alone on an empty database (rolled back after)
    with psycopg.connect(fresh_database) as conn:
        conn.execute("CREATE SCHEMA eventstore")
        conn.execute(APPEND_SQL.encode("utf-8"))
        from_file = _live_definitions(conn)
        conn.rollback()
    # when the migrations install theirs on the same database
    with EventStore.connect(fresh_database) as store:
        store.migrate()
    with psycopg.connect(fresh_database) as conn:
        live = _live_definitions(conn)
    # then the two definitions are the same text
    assert len(from_file) == 1 and live == from_file


def test_the_latest_migration_defining_the_function_holds_the_files_text() -> None:
    # given the event store's migrations, in version order
    migrations = sorted(
        (
            entry
            for entry in files("events").joinpath("migrations").iterdir()
            if entry.name.endswith(".sql")
        ),
        key=lambda entry: entry.name,
    )
    defining = [m for m in migrations if "FUNCTION eventstore.append_events(" in m.read_text()]
    # then the last one to (re)define the append function carries append.sql verbatim
    assert defining, "no migration defines eventstore.append_events"
    assert APPEND_SQL in defining[-1].read_text("utf-8"), (
        f"{defining[-1].name} does not hold events/eventstore/append.sql's text: "
        "add a migration that does"
    )
