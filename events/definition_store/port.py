"""The definitions port: validated saga definitions by ``(name, version, hash)``, per tenant.

Register a validated definition for a tenant, or into the shared, read-only built-in set
every tenant sees; load it by hash (any owner's: a saga's ``SagaStarted`` names it) or, for a
tenant, by name (highest version when none is given). A tenant never sees another tenant's
definitions, and may not register a name the shared set holds
(:class:`~events.definition_store.postgres.SharedDefinitionName`). Adapters beside it:
:mod:`events.definition_store.postgres` and :mod:`events.definition_store.memory`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, cast

from events.errors import EventStoreError, InvalidArgument
from events.saga_log.port import Unit
from saga_core import SagaDefinition
from saga_core.definitions.definition import definition_name_problem
from saga_core.errors import ErrorKind
from saga_core.keys import text_problem


class Definitions(Protocol):
    """Saga definitions by ``(name, version, hash)``, each owned by a tenant or shared.

    What a tenant sees under a name: the shared set's versions when the shared set holds the
    name, else its own; never another tenant's (absent to it: ``DefinitionNotFound``). A name
    and version never change content within one owner.
    """

    def register(
        self, definition: SagaDefinition, *, tenant: str, registered_by: str = ""
    ) -> str:
        """Store a validated definition as ``tenant``'s (idempotent); return its content
        hash. ``DefinitionConflict`` if the tenant holds the name and version with other
        content; ``SharedDefinitionName`` if the shared set holds the name (the very content
        the shared set holds is already the tenant's to use: its hash, nothing stored)."""
        ...

    def register_shared(self, definition: SagaDefinition, *, registered_by: str = "") -> str:
        """Store a validated definition in the shared, read-only built-in set (the system's
        own, visible to every tenant; idempotent); ``DefinitionConflict`` as above."""
        ...

    def by_hash(self, digest: str) -> SagaDefinition:
        """The definition with that content hash, whoever registered it;
        ``DefinitionNotFound`` if none."""
        ...

    def get(
        self, name: str, version: int | None = None, *, tenant: str,
        cached_latest: bool = False,
    ) -> SagaDefinition:
        """``name`` at ``version`` (the highest when omitted) as ``tenant`` sees it;
        ``DefinitionNotFound``."""
        ...

    def send_latest_check(
        self, unit: Unit, definition: SagaDefinition, *, tenant: str
    ) -> Callable[[], bool]:
        """Inside ``unit``: a check, called later, that ``definition`` is still the highest
        version of its name that ``tenant`` sees."""
        ...

    def list(self, *, tenant: str) -> list[DefinitionRecord]:
        """Every definition ``tenant`` sees (the shared set and its own), by name and version."""
        ...


class DefinitionConflict(EventStoreError):
    """The name and version are registered already (by the same owner) with other content."""
    kind = ErrorKind.CONFLICT


class DefinitionNotFound(EventStoreError):
    """No definition with that name, version or hash is registered (that this tenant sees)."""
    kind = ErrorKind.NOT_FOUND


class SharedDefinitionName(EventStoreError):
    """A tenant tried to register a name the shared built-in set holds: shadowing it would
    make the name mean one thing to this tenant and another in every shared document."""
    kind = ErrorKind.CONFLICT

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(
            f"definition name {name!r} belongs to the shared built-in set, which every tenant "
            f"sees and none may replace; register yours under another name")


@dataclass(frozen=True)
class DefinitionRecord:
    """A registered definition's identity, owner (None: the shared set) and registration."""

    name: str
    version: int
    hash: str
    registered_by: str
    registered_at: datetime
    tenant: str | None = None

    @property
    def shared(self) -> bool:
        """Whether it belongs to the shared, read-only built-in set every tenant sees."""
        return self.tenant is None


def check_tenant(tenant: object) -> str:
    """``tenant`` if it names a tenant (a non-blank string of plain text); InvalidArgument
    otherwise, so no lookup ever runs for "no tenant" and sees more than one tenant's
    definitions, and a NUL never reaches the database."""
    if not isinstance(tenant, str) or not tenant.strip() or text_problem(tenant) is not None:
        raise InvalidArgument("a definition's tenant must be a non-blank string of plain text")
    return tenant


def check_definition_name(name: object) -> str:
    """``name`` if a definition could have it; InvalidArgument (invalid input) otherwise: a
    name with a NUL, say, is the caller's mistake on every path, never a database error."""
    problem = definition_name_problem(name)
    if problem is not None:
        raise InvalidArgument(problem)
    return cast(str, name)  # a str: definition_name_problem checked


def conflict(definition: SagaDefinition, stored: str, digest: str) -> DefinitionConflict:
    """The error for a name and version whose stored content hash differs."""
    return DefinitionConflict(
        f"definition {definition.name!r} version {definition.version} is registered "
        f"with hash {stored[:12]}…, not {digest[:12]}…; register a new version instead")
