"""Saga definitions stored in PostgreSQL by ``(name, version, hash)``, each owned by a tenant
or by the shared, read-only built-in set.

A definition's content hash is its identity: the same owner, name and version with other
content is refused (bump the version instead), and lookups by hash are cached in-process
because a hash can never point at different content. Who sees what (the contract of
:class:`~events.definition_store.port.Definitions`, kept alike by ``events.saga_log.memory``):

* a tenant sees the shared set and its own definitions, never another tenant's (those are
  absent to it: ``DefinitionNotFound``);
* under a name the shared set holds, a tenant sees the shared versions only: it may not
  register such a name (``SharedDefinitionName``), and should the system ship a shared name
  a tenant already used, the shared one is what the name means from then on;
* by hash, any owner's content loads: a saga's ``SagaStarted`` names the hash it runs, and
  the saga itself is bound to its tenant.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.rows import class_row

from events.definition_store.port import (
    DefinitionNotFound,
    DefinitionRecord,
    SharedDefinitionName,
    check_definition_name,
    check_tenant,
    conflict,
)
from events.eventstore.driver import translated_errors
from events.eventstore.postgres import EventStore, UnitOfWork
from events.saga_log.port import Unit, unit_of
from saga_core import SagaDefinition

# The rows a tenant sees under a name: the shared set's when it holds the name, else the
# tenant's own. One predicate for get, list and the latest check, so they never disagree.
_VISIBLE = """
(d.tenant IS NULL OR (d.tenant = %(tenant)s AND NOT EXISTS (
    SELECT 1 FROM eventstore.definitions s WHERE s.name = d.name AND s.tenant IS NULL)))
"""
# The queries below are fixed text (no user input is ever spliced in: S608 is moot).
_LATEST = ("SELECT d.hash FROM eventstore.definitions d WHERE d.name = %(name)s AND"  # noqa: S608
           + _VISIBLE + "ORDER BY d.version DESC LIMIT 1")
_AT_VERSION = ("SELECT d.hash FROM eventstore.definitions d WHERE d.name = %(name)s"  # noqa: S608
               " AND d.version = %(version)s AND" + _VISIBLE)
_LIST = ("SELECT d.name, d.version, d.hash, d.registered_by, d.registered_at, d.tenant"  # noqa: S608
         " FROM eventstore.definitions d WHERE" + _VISIBLE + "ORDER BY d.name, d.version")
_INSERT = (
    "INSERT INTO eventstore.definitions (tenant, name, version, hash, body, registered_by)"
    " VALUES (%s, %s, %s, %s, %s::jsonb, %s)"
    " ON CONFLICT ON CONSTRAINT definitions_owner_name_version_key"
    " DO UPDATE SET name = EXCLUDED.name RETURNING hash"
)


class DefinitionStore:
    """Register and load saga definitions; loads by hash are cached (content-addressed)."""

    def __init__(self, store: EventStore) -> None:
        self._store = store
        self._by_hash: dict[str, SagaDefinition] = {}
        # (tenant, name) -> hash of the highest version that tenant saw, as last read
        self._latest: dict[tuple[str, str], str] = {}

    def register(
        self, definition: SagaDefinition, *, tenant: str, registered_by: str = ""
    ) -> str:
        """Store ``definition`` as ``tenant``'s (idempotent); return its hash. Validate it
        before calling. A name the shared set holds is refused (``SharedDefinitionName``)
        unless this is the very content the shared set holds (already visible: nothing
        stored)."""
        check_tenant(tenant)
        digest = definition.content_hash()
        with (
            translated_errors(context="registering a definition"),
            self._store.connection() as conn,
        ):
            # A shared name registered between this look and the insert is harmless: the
            # shared set wins every lookup under its names (_VISIBLE).
            shared = conn.execute(
                "SELECT hash FROM eventstore.definitions WHERE name = %s AND tenant IS NULL"
                " ORDER BY hash = %s DESC LIMIT 1",
                (definition.name, digest),
            ).fetchone()
            if shared is not None:
                if shared[0] == digest:
                    self._by_hash[digest] = definition
                    return digest
                raise SharedDefinitionName(definition.name)
            stored = self._insert(conn, tenant, definition, digest, registered_by)
        if stored != digest:
            raise conflict(definition, stored, digest)
        self._by_hash[digest] = definition
        return digest

    def register_shared(self, definition: SagaDefinition, *, registered_by: str = "") -> str:
        """Store ``definition`` in the shared, read-only built-in set (idempotent); return
        its hash. Only the system calls this (the shipped definitions)."""
        digest = definition.content_hash()
        with (
            translated_errors(context="registering a shared definition"),
            self._store.connection() as conn,
        ):
            stored = self._insert(conn, None, definition, digest, registered_by)
        if stored != digest:
            raise conflict(definition, stored, digest)
        self._by_hash[digest] = definition
        return digest

    @staticmethod
    def _insert(conn: psycopg.Connection[Any], tenant: str | None, definition: SagaDefinition,
                digest: str, registered_by: str) -> str:
        """Insert unless the owner holds the name and version; the hash it holds then."""
        body = json.loads(definition.to_json())
        row = conn.execute(_INSERT, (tenant, definition.name, definition.version, digest,
                                     json.dumps(body), registered_by)).fetchone()
        return str(row[0]) if row else digest

    def by_hash(self, digest: str) -> SagaDefinition:
        """The definition whose content hash is ``digest``, whoever registered it."""
        cached = self._by_hash.get(digest)
        if cached is not None:
            return cached
        with translated_errors(), self._store.connection() as conn:
            row = conn.execute(
                "SELECT body FROM eventstore.definitions WHERE hash = %s LIMIT 1", (digest,)
            ).fetchone()
        if row is None:
            raise DefinitionNotFound(f"no saga definition with hash {digest!r}")
        definition = SagaDefinition.model_validate(row[0])
        self._by_hash[digest] = definition
        return definition

    def get(
        self, name: str, version: int | None = None, *, tenant: str,
        cached_latest: bool = False,
    ) -> SagaDefinition:
        """The definition ``name`` at ``version`` (the highest version when omitted), as
        ``tenant`` sees it.

        Only the hash is read here; the body is loaded (and validated) once per hash.
        With ``cached_latest`` the highest version last read in this process is returned
        without a query: the caller must confirm it with :meth:`send_latest_check` in the
        transaction that uses it, as another process may have registered a newer one.
        """
        check_tenant(tenant)
        check_definition_name(name)
        if version is None and cached_latest and (tenant, name) in self._latest:
            return self.by_hash(self._latest[(tenant, name)])
        params = {"name": name, "version": version, "tenant": tenant}
        query, what = ((_LATEST, f"name {name!r}") if version is None
                       else (_AT_VERSION, f"{name!r} version {version}"))
        with translated_errors(), self._store.connection() as conn:
            row = conn.execute(query, params).fetchone()
        if row is None:
            raise DefinitionNotFound(f"no saga definition with {what} for tenant {tenant!r}")
        if version is None:
            self._latest[(tenant, name)] = str(row[0])
        return self.by_hash(str(row[0]))

    def send_latest_check(
        self, unit: Unit, definition: SagaDefinition, *, tenant: str
    ) -> Callable[[], bool]:
        """Send, in the caller's (pipelined) unit of work, the lookup of the highest version
        of ``definition``'s name that ``tenant`` sees; the returned function, called once the
        caller has read a later result, says whether ``definition`` is still it (and forgets
        the cached one if not). Rides the caller's round trip instead of adding one."""
        check_tenant(tenant)
        cursor = unit_of(UnitOfWork, unit).connection.execute(
            _LATEST, {"name": definition.name, "tenant": tenant})
        expected = definition.content_hash()

        def still_latest() -> bool:
            row = cursor.fetchone()
            if row is not None and str(row[0]) == expected:
                return True
            self._latest.pop((tenant, definition.name), None)
            return False

        return still_latest

    def list(self, *, tenant: str) -> list[DefinitionRecord]:
        """Every definition ``tenant`` sees (the shared set and its own), by name, version."""
        check_tenant(tenant)
        with translated_errors(), self._store.connection() as conn:
            cur = conn.cursor(row_factory=class_row(DefinitionRecord))
            return cur.execute(_LIST, {"tenant": tenant}).fetchall()


if TYPE_CHECKING:  # mypy checks that the class keeps its port's signatures
    from events.definition_store.port import Definitions

    def _conforms(definitions: DefinitionStore) -> Definitions:
        return definitions
