"""A real database gets the sandbox's schemas only from whoever installs the sandbox."""

from __future__ import annotations

import psycopg

from sagafleet import sandbox
from sagafleet.migrate import migrate_all


def sandbox_schemas(database: str) -> list[str]:
    with psycopg.connect(database) as conn:
        rows = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'sandbox%' ORDER BY 1"
        ).fetchall()
    return [row[0] for row in rows]


def test_db_migrate_creates_no_sandbox_schema_and_install_does(fresh_database: str) -> None:
    # when a production database is migrated
    applied = migrate_all(fresh_database)
    # then nothing of the sandbox is in it
    assert applied and not [name for name in applied if name.startswith("sandbox")]
    assert sandbox_schemas(fresh_database) == []
    # and when the demo or a test installs the sandbox, its schemas appear
    assert sandbox.install(fresh_database) == ["0001_sandbox"]
    assert sandbox_schemas(fresh_database) == [
        "sandbox_control", "sandbox_email", "sandbox_flights", "sandbox_hotels",
        "sandbox_payments",
    ]
