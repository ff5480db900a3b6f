"""A small generic migrator: ordered SQL files per namespace, recorded with checksums.

Every room keeps its own ``migrations/NNNN_name.sql`` files and calls
:func:`apply_migrations` with its namespace. Files apply in version order, each in its own
transaction together with its bookkeeping row, under one cluster-wide advisory lock so
concurrent migrators (several containers starting at once) take turns safely.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Final

import psycopg

from events.errors import MigrationChecksumMismatch, MigrationError
from events.eventstore.driver import translated_errors

MIGRATIONS_TABLE: Final = "public.sagafleet_migrations"
"""Where applied migrations are recorded, for every namespace."""

_LOCK_KEY: Final = 0x5A6AF1EE7
"""The advisory lock key all migrators share (any fixed bigint unique to sagafleet)."""

_FILE_NAME = re.compile(r"^(\d+)_([A-Za-z0-9_]+)\.sql$")

_BOOKKEEPING = f"""
CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE} (
    namespace  text NOT NULL,
    version    integer NOT NULL,
    name       text NOT NULL,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, version)
)
"""


@dataclass(frozen=True)
class MigrationFile:
    """One SQL file: its version (leading number), name (file stem), text and checksum."""

    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        """sha256 of the file's text; an applied file must never change."""
        return hashlib.sha256(self.sql.encode("utf-8")).hexdigest()


def discover(directory: Traversable | Path) -> list[MigrationFile]:
    """The ``NNNN_name.sql`` files of a directory, in version order; malformed names fail."""
    found: list[MigrationFile] = []
    for entry in directory.iterdir():
        if not entry.name.endswith(".sql"):
            continue
        match = _FILE_NAME.match(entry.name)
        if match is None:
            raise MigrationError(f"migration file {entry.name!r} is not named NNNN_name.sql")
        found.append(MigrationFile(int(match[1]), entry.name[:-4], entry.read_text("utf-8")))
    found.sort(key=lambda f: f.version)
    for before, after in zip(found, found[1:], strict=False):
        if before.version == after.version:
            raise MigrationError(f"{before.name} and {after.name} share version {after.version}")
    return found


def apply_migrations(
    target: str | psycopg.Connection[Any], namespace: str, directory: Traversable | Path
) -> list[str]:
    """Apply the namespace's not-yet-applied files in order; return their names.

    ``target`` is a conninfo/URL (a dedicated connection is opened and closed) or an open
    connection that is not inside a transaction. An applied file whose text changed raises
    :class:`MigrationChecksumMismatch`; a failing file rolls back alone and raises
    :class:`MigrationError` naming it (earlier files stay applied).
    """
    migrations = discover(directory)
    with translated_errors(otherwise=MigrationError, context=f"migrating {namespace}"):
        if isinstance(target, str):
            with psycopg.connect(target, autocommit=True) as conn:
                return _apply(conn, namespace, migrations)
        return _apply(target, namespace, migrations)


def _apply(
    conn: psycopg.Connection[Any], namespace: str, migrations: list[MigrationFile]
) -> list[str]:
    applied: list[str] = []
    previous_autocommit = conn.autocommit
    conn.autocommit = True
    conn.execute("SELECT pg_advisory_lock(%s)", (_LOCK_KEY,))
    try:
        conn.execute(_BOOKKEEPING)
        done = {
            version: (name, checksum)
            for version, name, checksum in conn.execute(
                f"SELECT version, name, checksum FROM {MIGRATIONS_TABLE}"  # noqa: S608
                " WHERE namespace = %s",
                (namespace,),
            )
        }
        for migration in migrations:
            if migration.version in done:
                _check_unchanged(namespace, migration, *done[migration.version])
                continue
            with (
                translated_errors(
                    otherwise=MigrationError, context=f"{namespace} migration {migration.name}"
                ),
                conn.transaction(),
            ):
                # No parameters: psycopg sends the whole file as one multi-statement query.
                conn.execute(migration.sql.encode("utf-8"))
                conn.execute(
                    f"INSERT INTO {MIGRATIONS_TABLE} (namespace, version, name, checksum)"  # noqa: S608
                    " VALUES (%s, %s, %s, %s)",
                    (namespace, migration.version, migration.name, migration.checksum),
                )
            applied.append(migration.name)
    finally:
        if not conn.closed and not conn.broken:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_KEY,))
            conn.autocommit = previous_autocommit
    return applied


def _check_unchanged(namespace: str, migration: MigrationFile, name: str, checksum: str) -> None:
    if checksum != migration.checksum or name != migration.name:
        raise MigrationChecksumMismatch(
            f"{namespace} migration {migration.name} was applied as {name} with checksum "
            f"{checksum[:12]}…, but the file now has {migration.checksum[:12]}…; "
            "never edit an applied migration, add a new file"
        )
