"""The tool contract: what a side-effecting tool promises the saga, and the allowlist of tools.

A tool is allowlisted by ``(name, version)``. Workers call :meth:`Tool.execute` with the
step's stable operation key and, after an ambiguous outcome, :meth:`Tool.lookup` with the
same key to reconcile. Every failure a tool reports is a :class:`ToolError` whose
:class:`~saga_core.contracts.ErrorClass` tells the orchestrator what to do next; provider
exceptions are translated into it at the adapter boundary, exactly once.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from saga_core.catalogue import ToolCatalogue
from saga_core.contracts import ErrorClass, Receipt
from saga_core.errors import ErrorKind, SagaError
from saga_core.errors import UnknownToolError as CatalogueUnknownToolError

__all__ = [
    "Absent",
    "DuplicateToolError",
    "LookupResult",
    "Tool",
    "ToolError",
    "ToolRegistry",
    "Unknown",
    "UnknownToolError",
]


@dataclass(frozen=True)
class Absent:
    """The provider confirms it holds no committed request under the key (yet).

    "Absent" proves nothing about a request that may still commit late: retrying after it
    is safe only for a tool that dedupes by key (see :attr:`Tool.commit_horizon_s`).
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
    """An allowlisted side-effecting operation of one external system.

    ``dedupes_by_key`` says the provider returns the stored result for a repeated key, so
    the orchestrator may retry with the same key after an ambiguous outcome once lookup
    confirms absence. ``commit_horizon_s`` is how late after dispatch a request may still
    commit (or become visible to :meth:`lookup`); a tool that cannot dedupe waits that
    long before it is retried, or escalates.
    """

    @property
    def name(self) -> str:
        """Allowlisted name, e.g. ``"flights.hold"``."""
        ...

    @property
    def version(self) -> int:
        """Contract version; a changed argument or receipt shape is a new version."""
        ...

    @property
    def dedupes_by_key(self) -> bool:
        """Whether the provider deduplicates requests by the operation key."""
        ...

    @property
    def commit_horizon_s(self) -> float:
        """Seconds after dispatch within which a request may still commit or become visible."""
        ...

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


class ToolRegistry:
    """The allowlist: tools by ``(name, version)``; anything not registered cannot run."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[tuple[str, int], Tool] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        """Allowlist ``tool``; registering the same ``(name, version)`` twice is an error."""
        ref = (tool.name, tool.version)
        if ref in self._tools:
            raise DuplicateToolError(*ref)
        self._tools[ref] = tool

    def get(self, name: str, version: int) -> Tool:
        """The tool allowlisted as ``name@version``, or :class:`UnknownToolError` naming it."""
        try:
            return self._tools[(name, version)]
        except KeyError:
            known = tuple(sorted(v for (n, v) in self._tools if n == name))
            raise UnknownToolError(name, version, known) from None

    def has(self, name: str, version: int) -> bool:
        """Whether ``name@version`` is allowlisted (definition validation asks this)."""
        return (name, version) in self._tools

    def refs(self) -> list[tuple[str, int]]:
        """Every allowlisted ``(name, version)``, sorted."""
        return sorted(self._tools)

    def __contains__(self, ref: object) -> bool:
        return ref in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter([self._tools[ref] for ref in sorted(self._tools)])

    def __len__(self) -> int:
        return len(self._tools)


@dataclass(frozen=True)
class ToolSet:
    """What a fleet runs: the catalogue (what each tool means) and its implementations."""

    catalogue: ToolCatalogue
    registry: ToolRegistry


class ToolSetError(SagaError):
    """A ``module:attribute`` tool-set reference cannot be loaded; the message says why."""
    kind = ErrorKind.MISCONFIGURED


def load_tool_set(reference: str) -> ToolSet:
    """Import ``package.module:attribute`` and return the :class:`ToolSet` it names.

    The attribute is a ToolSet or a callable returning one (called with no arguments, once
    per process), so a deployment can plug its own allowlisted tools into ``sagafleet
    worker`` without a line of sagafleet code changing.
    """
    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name or not attribute:
        raise ToolSetError(f"tool set {reference!r} must look like 'package.module:attribute'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ToolSetError(f"tool set {reference!r}: cannot import {module_name}: {exc}") from None
    try:
        target = getattr(module, attribute)
    except AttributeError:
        raise ToolSetError(f"tool set {reference!r}: {module_name} has no {attribute!r}") from None
    found = target() if callable(target) and not isinstance(target, ToolSet) else target
    if not isinstance(found, ToolSet):
        raise ToolSetError(
            f"tool set {reference!r} gave a {type(found).__name__}, not a workers.tools.ToolSet"
        )
    return found
