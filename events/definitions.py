"""Saga definitions stored in PostgreSQL by ``(name, version, hash)``.

A definition's content hash is its identity: the same name and version with other
content is refused (bump the version instead), and lookups by hash are cached in-process
because a hash can never point at different content.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.rows import class_row

from events._pg import translated_errors
from events.errors import EventStoreError
from events.saga_log import Unit, unit_of
from events.store import EventStore, UnitOfWork
from saga_core import SagaDefinition
from saga_core.errors import ErrorKind


class DefinitionConflict(EventStoreError):
    """The name and version are registered already with different content."""
    kind = ErrorKind.CONFLICT


class DefinitionNotFound(EventStoreError):
    """No definition with that name, version or hash is registered."""
    kind = ErrorKind.NOT_FOUND


@dataclass(frozen=True)
class DefinitionRecord:
    """A registered definition's identity and when it was registered."""

    name: str
    version: int
    hash: str
    registered_by: str
    registered_at: datetime


class DefinitionStore:
    """Register and load saga definitions; loads by hash are cached (content-addressed)."""

    def __init__(self, store: EventStore) -> None:
        self._store = store
        self._by_hash: dict[str, SagaDefinition] = {}
        self._latest: dict[str, str] = {}  # name -> hash of its highest version, as last read

    def register(self, definition: SagaDefinition, *, registered_by: str = "") -> str:
        """Store ``definition`` (idempotent); return its hash. Validate it before calling."""
        digest = definition.content_hash()
        body = json.loads(definition.to_json())
        with (
            translated_errors(context="registering a definition"),
            self._store.connection() as conn,
        ):
            row = conn.execute(
                "INSERT INTO eventstore.definitions (name, version, hash, body, registered_by)"
                " VALUES (%s, %s, %s, %s::jsonb, %s)"
                " ON CONFLICT (name, version) DO UPDATE SET name = EXCLUDED.name"
                " RETURNING hash",
                (definition.name, definition.version, digest, json.dumps(body), registered_by),
            ).fetchone()
        stored = row[0] if row else digest
        if stored != digest:
            raise DefinitionConflict(
                f"definition {definition.name!r} version {definition.version} is registered "
                f"with hash {stored[:12]}…, not {digest[:12]}…; register a new version instead"
            )
        self._by_hash[digest] = definition
        return digest

    def by_hash(self, digest: str) -> SagaDefinition:
        """The definition whose content hash is ``digest``."""
        cached = self._by_hash.get(digest)
        if cached is not None:
            return cached
        body = self._fetch_body("hash = %s", (digest,), f"hash {digest!r}")
        definition = SagaDefinition.model_validate(body)
        self._by_hash[digest] = definition
        return definition

    def get(
        self, name: str, version: int | None = None, *, cached_latest: bool = False
    ) -> SagaDefinition:
        """The definition ``name`` at ``version`` (the highest version when omitted).

        Only the hash is read here; the body is loaded (and validated) once per hash.
        With ``cached_latest`` the highest version last read in this process is returned
        without a query: the caller must confirm it with :meth:`send_latest_check` in the
        transaction that uses it, as another process may have registered a newer one.
        """
        if version is None and cached_latest and name in self._latest:
            return self.by_hash(self._latest[name])
        params: tuple[Any, ...]
        if version is None:
            where, params, what = (
                "name = %s ORDER BY version DESC LIMIT 1", (name,), f"name {name!r}"
            )
        else:
            where, params, what = (
                "name = %s AND version = %s", (name, version), f"{name!r} version {version}"
            )
        query = "SELECT hash FROM eventstore.definitions WHERE " + where  # noqa: S608 - fixed text
        with translated_errors(), self._store.connection() as conn:
            row = conn.execute(query, params).fetchone()
        if row is None:
            raise DefinitionNotFound(f"no saga definition with {what}")
        if version is None:
            self._latest[name] = str(row[0])
        return self.by_hash(str(row[0]))

    def send_latest_check(
        self, unit: Unit, definition: SagaDefinition
    ) -> Callable[[], bool]:
        """Send, in the caller's (pipelined) unit of work, the lookup of ``definition``'s
        highest registered version; the returned function, called once the caller has
        read a later result, says whether ``definition`` is still the highest (and forgets
        the cached one if not). Rides the caller's round trip instead of adding one."""
        cursor = unit_of(UnitOfWork, unit).connection.execute(
            "SELECT hash FROM eventstore.definitions WHERE name = %s"
            " ORDER BY version DESC LIMIT 1",
            (definition.name,),
        )
        expected = definition.content_hash()

        def still_latest() -> bool:
            row = cursor.fetchone()
            if row is not None and str(row[0]) == expected:
                return True
            self._latest.pop(definition.name, None)
            return False

        return still_latest

    def list(self) -> list[DefinitionRecord]:
        """Every registered definition, by name and version."""
        with translated_errors(), self._store.connection() as conn:
            cur = conn.cursor(row_factory=class_row(DefinitionRecord))
            return cur.execute(
                "SELECT name, version, hash, registered_by, registered_at"
                " FROM eventstore.definitions ORDER BY name, version"
            ).fetchall()

    def _fetch_body(self, where: str, params: tuple[Any, ...], what: str) -> dict[str, Any]:
        query = "SELECT body FROM eventstore.definitions WHERE " + where  # noqa: S608 - fixed text
        with translated_errors(), self._store.connection() as conn:
            row = conn.execute(query, params).fetchone()
        if row is None:
            raise DefinitionNotFound(f"no saga definition with {what}")
        body: dict[str, Any] = row[0]
        return body
