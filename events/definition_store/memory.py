"""The in-memory :class:`~events.definition_store.port.Definitions`, held to the PostgreSQL
store's contract by ``tests/contract`` (thread-safe, one lock).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from events.definition_store.port import (
    DefinitionNotFound,
    DefinitionRecord,
    SharedDefinitionName,
    check_definition_name,
    check_tenant,
    conflict,
)
from events.eventstore.memory import MemoryUnit
from events.eventstore.model import Clock, utc_now
from events.saga_log.port import Unit, unit_of
from saga_core import SagaDefinition


class MemoryDefinitions:
    """Saga definitions by ``(name, version, hash)`` in this process, each owned by a tenant
    or shared; who sees what is :mod:`events.definition_store.postgres`' rule."""

    def __init__(self, clock: Clock = utc_now) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._by_hash: dict[str, SagaDefinition] = {}
        # (owner, name, version) -> record; owner None is the shared set
        self._records: dict[tuple[str | None, str, int], DefinitionRecord] = {}

    def register(
        self, definition: SagaDefinition, *, tenant: str, registered_by: str = ""
    ) -> str:
        """Store ``definition`` as ``tenant``'s (idempotent); return its hash. A name the
        shared set holds is refused unless this is the very content it holds."""
        check_tenant(tenant)
        digest = definition.content_hash()
        with self._lock:
            shared = self._versions(None, definition.name)
            if shared:
                if any(record.hash == digest for record in shared):
                    return digest
                raise SharedDefinitionName(definition.name)
            return self._store(tenant, definition, digest, registered_by)

    def register_shared(self, definition: SagaDefinition, *, registered_by: str = "") -> str:
        """Store ``definition`` in the shared, read-only built-in set (idempotent)."""
        with self._lock:
            return self._store(None, definition, definition.content_hash(), registered_by)

    def _store(self, owner: str | None, definition: SagaDefinition, digest: str,
               registered_by: str) -> str:
        """Keep a record unless the owner holds the name and version (held lock)."""
        key = (owner, definition.name, definition.version)
        record = self._records.get(key)
        if record is None:
            record = DefinitionRecord(definition.name, definition.version, digest,
                                      registered_by, self._clock(), tenant=owner)
            self._records[key] = record
            self._by_hash[digest] = definition
        if record.hash != digest:
            raise conflict(definition, record.hash, digest)
        return digest

    def by_hash(self, digest: str) -> SagaDefinition:
        """The definition whose content hash is ``digest``, whoever registered it."""
        with self._lock:
            found = self._by_hash.get(digest)
        if found is None:
            raise DefinitionNotFound(f"no saga definition with hash {digest!r}")
        return found

    def get(
        self, name: str, version: int | None = None, *, tenant: str,
        cached_latest: bool = False,
    ) -> SagaDefinition:
        """The definition ``name`` at ``version`` (the highest version when omitted) as
        ``tenant`` sees it; ``cached_latest`` changes nothing here: the latest is known."""
        check_tenant(tenant)
        check_definition_name(name)
        with self._lock:
            visible = self._visible(tenant, name)
            if version is None:
                record, what = (visible[-1] if visible else None), f"name {name!r}"
            else:
                record = next((r for r in visible if r.version == version), None)
                what = f"{name!r} version {version}"
            if record is not None:
                return self._by_hash[record.hash]
        raise DefinitionNotFound(f"no saga definition with {what} for tenant {tenant!r}")

    def send_latest_check(
        self, unit: Unit, definition: SagaDefinition, *, tenant: str
    ) -> Callable[[], bool]:
        """Inside ``unit``: a check, called later, that ``definition`` is still the highest
        version of its name that ``tenant`` sees."""
        check_tenant(tenant)
        unit_of(MemoryUnit, unit).live()
        expected = definition.content_hash()

        def still_latest() -> bool:
            with self._lock:
                visible = self._visible(tenant, definition.name)
            return bool(visible) and visible[-1].hash == expected

        return still_latest

    def _versions(self, owner: str | None, name: str) -> list[DefinitionRecord]:
        """The owner's records of ``name``, lowest version first (held lock)."""
        return sorted((r for (o, n, _), r in self._records.items() if o == owner and n == name),
                      key=lambda r: r.version)

    def _visible(self, tenant: str, name: str) -> list[DefinitionRecord]:
        """What ``tenant`` sees under ``name``: the shared versions when the shared set holds
        the name, else its own (held lock)."""
        return self._versions(None, name) or self._versions(tenant, name)

    def list(self, *, tenant: str) -> list[DefinitionRecord]:
        """Every definition ``tenant`` sees (the shared set and its own), by name, version."""
        check_tenant(tenant)
        with self._lock:
            names = {name for owner, name, _ in self._records if owner in (None, tenant)}
            return [record for name in sorted(names) for record in self._visible(tenant, name)]


if TYPE_CHECKING:  # mypy checks that the class keeps its port's signatures
    from events.definition_store.port import Definitions

    def _conforms(definitions: MemoryDefinitions) -> Definitions:
        return definitions
