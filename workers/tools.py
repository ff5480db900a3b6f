"""The tool contract: what a side-effecting tool promises the saga, and the allowlist of tools.

A tool is allowlisted by ``(name, version)`` in a
:class:`~saga_core.definitions.catalogue.ToolCatalogue`,
the one owner of what the tool is (dedupe by key, commit horizon, receipt fields, default
compensation); a :class:`ToolSet` pairs that catalogue with the implementations, registered
under the catalogue's refs, and a fleet refuses to start when the two disagree.

Workers call :meth:`Tool.execute` with the step's stable operation key and, after an
ambiguous outcome, :meth:`Tool.lookup` with the same key to reconcile. Every failure a tool
reports is a :class:`ToolError` whose :class:`~saga_core.contracts.ErrorClass` tells the
orchestrator what to do next; provider exceptions are translated into it at the adapter
boundary, exactly once.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from saga_core.contracts import ErrorClass, Receipt
from saga_core.definitions.catalogue import ToolCatalogue
from saga_core.errors import ErrorKind, SagaError
from saga_core.errors import UnknownToolError as CatalogueUnknownToolError

__all__ = [
    "Absent",
    "DuplicateToolError",
    "LookupResult",
    "Tool",
    "ToolError",
    "ToolRef",
    "ToolRegistry",
    "ToolSet",
    "ToolSetError",
    "ToolSetMismatch",
    "Unknown",
    "UnknownToolError",
    "load_tool_set",
]


@dataclass(frozen=True)
class Absent:
    """The provider confirms it holds no committed request under the key (yet).

    "Absent" proves nothing about a request that may still commit late: retrying after it
    is safe only for a tool whose catalogue spec dedupes by key, or after its commit horizon.
    """

    reason: str


@dataclass(frozen=True)
class Unknown:
    """The provider could not say whether the key's request committed (e.g. it is down)."""

    reason: str
    evidence: Mapping[str, Any] = field(default_factory=dict)


LookupResult = Receipt | Absent | Unknown
"""What reconciliation by key can learn: the receipt, confirmed absence, or nothing."""


class ToolError(SagaError):
    """A classified tool failure: the error class decides retry, compensation or escalation."""

    def __init__(
        self,
        error_class: ErrorClass,
        message: str,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        self.error_class = ErrorClass(error_class)
        self.message = message
        self.details: dict[str, Any] = dict(details or {})
        super().__init__(f"{self.error_class.value}: {message}")

    @property
    def may_have_committed(self) -> bool:
        """Whether the effect may exist despite the error (only a timeout after dispatch)."""
        return self.error_class is ErrorClass.AMBIGUOUS

    def __reduce__(self) -> tuple[Any, ...]:
        # Celery and multiprocessing pickle exceptions; keep every attribute across the trip.
        return (type(self), (self.error_class, self.message, self.details))


@runtime_checkable
class Tool(Protocol):
    """The implementation of one allowlisted tool: its effect and its reconciliation by key.

    What the tool *is* (name, version, dedupe by key, commit horizon, receipt fields, default
    compensation) is the catalogue's :class:`~saga_core.definitions.catalogue.ToolSpec`, its one
    owner;
    an implementation is bound to a spec by the ``(name, version)`` it is registered under.
    """

    def execute(self, args: Mapping[str, Any], key: str) -> Receipt:
        """Perform the effect under ``key`` (passed to the provider); raise :class:`ToolError`."""
        ...

    def lookup(self, key: str) -> LookupResult:
        """Reconcile by ``key`` after an ambiguous outcome; never raises for "not found"."""
        ...


class UnknownToolError(CatalogueUnknownToolError):
    """No tool is allowlisted under the requested name and version (names the known ones)."""

    def __init__(self, name: str, version: int, known_versions: tuple[int, ...] = ()) -> None:
        super().__init__(name, version)
        self.known_versions = known_versions
        if known_versions:
            listed = ", ".join(str(v) for v in known_versions)
            message = f"tool {name}@{version} is not allowlisted (known versions: {listed})"
        else:
            message = f"tool {name}@{version} is not allowlisted (unknown tool name {name!r})"
        self.args = (message,)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.name, self.version, self.known_versions))


class DuplicateToolError(SagaError):
    """A second tool was registered under a name and version that is already taken."""
    kind = ErrorKind.MISCONFIGURED

    def __init__(self, name: str, version: int) -> None:
        self.name = name
        self.version = version
        super().__init__(f"tool {name}@{version} is already registered")


ToolRef = tuple[str, int]
"""A tool as the catalogue names it: ``(name, version)``."""


class ToolRegistry:
    """The implementations, by the catalogue ref each one serves; nothing else can run."""

    def __init__(self, tools: Mapping[ToolRef, Tool] | None = None) -> None:
        self._tools: dict[ToolRef, Tool] = {}
        for (name, version), tool in (tools or {}).items():
            self.register(name, version, tool)

    def register(self, name: str, version: int, tool: Tool) -> None:
        """Serve ``name@version`` with ``tool``; registering the same ref twice is an error."""
        if (name, version) in self._tools:
            raise DuplicateToolError(name, version)
        self._tools[(name, version)] = tool

    def get(self, name: str, version: int) -> Tool:
        """The tool registered as ``name@version``, or :class:`UnknownToolError` naming it."""
        try:
            return self._tools[(name, version)]
        except KeyError:
            known = tuple(sorted(v for (n, v) in self._tools if n == name))
            raise UnknownToolError(name, version, known) from None

    def has(self, name: str, version: int) -> bool:
        """Whether ``name@version`` has an implementation."""
        return (name, version) in self._tools

    def refs(self) -> list[ToolRef]:
        """Every registered ``(name, version)``, sorted."""
        return sorted(self._tools)

    def __contains__(self, ref: object) -> bool:
        return ref in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter([self._tools[ref] for ref in sorted(self._tools)])

    def __len__(self) -> int:
        return len(self._tools)


class ToolSetMismatch(SagaError):
    """A tool set's catalogue and implementations disagree; names every tool on either side.

    ``missing``: catalogue tools with no implementation (a step would fail at run time);
    ``unlisted``: implementations the catalogue does not know (nothing could validate a step
    that uses them, so they would run unchecked).
    """

    kind = ErrorKind.MISCONFIGURED

    def __init__(self, missing: tuple[str, ...], unlisted: tuple[str, ...]) -> None:
        self.missing = missing
        self.unlisted = unlisted
        problems = []
        if missing:
            problems.append(f"catalogue tools without an implementation: {', '.join(missing)}")
        if unlisted:
            problems.append(f"implementations not in the catalogue: {', '.join(unlisted)}")
        super().__init__("tool set does not match its catalogue: " + "; ".join(problems))

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.missing, self.unlisted))


class Closeable(Protocol):
    """Something a tool set holds open (a connection pool, a client session)."""

    def close(self) -> None:
        """Release it."""
        ...


@dataclass(frozen=True)
class ToolSet:
    """What a fleet runs: the catalogue (what each tool is) paired with its implementations.

    ``resources`` are what the implementations hold open; :meth:`close` releases them.
    """

    catalogue: ToolCatalogue
    registry: ToolRegistry
    resources: tuple[Closeable, ...] = ()

    def check(self) -> None:
        """Raise :class:`ToolSetMismatch` unless catalogue and registry name the same tools."""
        listed, served = set(self.catalogue.refs()), set(self.registry.refs())
        if listed != served:
            raise ToolSetMismatch(
                missing=tuple(f"{n}@{v}" for n, v in sorted(listed - served)),
                unlisted=tuple(f"{n}@{v}" for n, v in sorted(served - listed)),
            )

    def close(self) -> None:
        """Release what the implementations hold open."""
        for resource in self.resources:
            resource.close()


class ToolSetError(SagaError):
    """A ``module:attribute`` tool-set reference cannot be loaded; the message says why."""
    kind = ErrorKind.MISCONFIGURED


def tool_set_target(reference: str) -> object:
    """What ``package.module:attribute`` names, imported (a ToolSet or a factory of one), or
    :class:`ToolSetError` saying which part of the reference is wrong."""
    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name or not attribute:
        raise ToolSetError(f"tool set {reference!r} must look like 'package.module:attribute'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ToolSetError(f"tool set {reference!r}: cannot import {module_name}: {exc} "
                           "(is its directory on PYTHONPATH?)") from None
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ToolSetError(f"tool set {reference!r}: {module_name} has no {attribute!r}") from None


def load_tool_set(reference: str) -> ToolSet:
    """Import ``package.module:attribute`` and return the :class:`ToolSet` it names.

    The attribute is a ToolSet or a callable returning one (called with no arguments, once
    per process), so a deployment can plug its own allowlisted tools into ``sagafleet
    worker`` without a line of sagafleet code changing.
    """
    target = tool_set_target(reference)
    found = target() if callable(target) and not isinstance(target, ToolSet) else target
    if not isinstance(found, ToolSet):
        raise ToolSetError(
            f"tool set {reference!r} gave a {type(found).__name__}, not a workers.tools.ToolSet"
        )
    return found
