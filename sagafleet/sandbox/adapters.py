"""Tool adapters for the trip saga: the sandbox providers behind the :class:`Tool` contract.

This is the one place provider exceptions become :class:`ToolError`s
(:func:`classify_provider_error`). The tools, each ``provider.operation`` at version 1::

    flights.hold   flights.release   hotels.hold        hotels.release
    payments.capture   payments.refund   email.send_itinerary   email.send_correction

What each tool is (dedupe by key, commit horizon, receipt fields, compensation) is the
sandbox's catalogue (:func:`trip_catalogue`), its one owner. Every provider keeps
Stripe-like idempotency keys, email included (a mail API with idempotency keys, not bare
SMTP), so a catalogue that says a tool does not dedupe is cautious, never wrong; a test may
build the sandbox with ``non_deduping={...}`` to get providers that truly cannot dedupe.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from saga_core.contracts import ErrorClass, Receipt
from saga_core.definitions.catalogue import ToolCatalogue
from saga_core.errors import SagaError
from sagafleet.example_sagas import trip_tool_catalogue
from sagafleet.sandbox._db import ConnectionSource
from sagafleet.sandbox.errors import ProviderError, ProviderTimeout
from sagafleet.sandbox.faults import FaultInjector
from sagafleet.sandbox.provider import ProviderResponse, SandboxProvider
from sagafleet.sandbox.providers import (
    EmailProvider,
    FlightsProvider,
    HotelsProvider,
    PaymentsProvider,
)
from workers.tools import Absent, LookupResult, ToolError, ToolRegistry, ToolSet, Unknown

__all__ = [
    "COMMIT_HORIZON_S",
    "SandboxCatalogueError",
    "SandboxTool",
    "TripSandbox",
    "build_trip_sandbox",
    "trip_catalogue",
]

# How late a sandbox request can still commit or become visible to lookup: the slowest
# injected visibility is a few seconds (slow_visibility defaults to 2 s, the demo's mix uses
# 1 s). The shipped trip catalogue keeps the cautious figures of real providers (up to
# 120 s), which would make every demo and test wait minutes for a horizon to pass.
COMMIT_HORIZON_S = 5.0


def trip_catalogue() -> ToolCatalogue:
    """The trip tools as the sandbox providers honour them: the shipped trip catalogue with
    the sandbox's commit horizon."""
    return ToolCatalogue(tools=[
        spec.model_copy(update={"commit_horizon_s": COMMIT_HORIZON_S})
        for spec in trip_tool_catalogue().tools
    ])


_TRANSIENT_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})


def classify_provider_error(status: int, code: str) -> ErrorClass:
    """The saga's error class for a provider's HTTP-like status and error code."""
    if status in _TRANSIENT_STATUSES:
        return ErrorClass.TRANSIENT
    if status == 401:
        return ErrorClass.AUTH_EXPIRED
    if status == 412:
        return ErrorClass.PRECONDITION_FAILED
    if status in (402, 409) and code != "compensation_rejected":
        return ErrorClass.BUSINESS_REJECTION
    # 400 invalid, 403 wrong owner, 404 missing target, 422 reused key, refused compensation
    return ErrorClass.PERMANENT


@dataclass(frozen=True)
class SandboxTool:
    """One operation of a sandbox provider, serving the catalogue tool ``provider.operation``."""

    provider: SandboxProvider
    operation: str

    @property
    def ref(self) -> str:
        """``provider.operation``, as error messages name the tool."""
        return f"{self.provider.name}.{self.operation}"

    def execute(self, args: Mapping[str, Any], key: str) -> Receipt:
        """Perform the operation under ``key``; every failure is a classified ToolError."""
        try:
            response = self.provider.perform(self.operation, args, key)
        except ProviderTimeout as exc:
            raise ToolError(
                ErrorClass.AMBIGUOUS,
                f"{self.ref} timed out after dispatch; reconcile by key {key!r}",
                {"tool": self.ref, "key": key},
            ) from exc
        except ProviderError as exc:
            raise ToolError(
                classify_provider_error(exc.status, exc.code),
                f"{self.ref}: {exc.message}",
                {
                    "tool": self.ref,
                    "key": key,
                    "status": exc.status,
                    "code": exc.code,
                    **exc.details,
                },
            ) from exc
        return _receipt(response)

    def lookup(self, key: str) -> LookupResult:
        """Reconcile by ``key``: the receipt, Absent (nothing visible), or Unknown."""
        try:
            stored = self.provider.lookup(key, self.operation)
        except (ProviderError, ProviderTimeout) as exc:
            evidence: dict[str, Any] = {"tool": self.ref, "key": key, "error": str(exc)}
            if isinstance(exc, ProviderError):
                evidence.update(status=exc.status, code=exc.code)
            return Unknown(f"{self.provider.name} could not answer a lookup", evidence)
        if stored is None:
            return Absent(f"{self.provider.name} has no visible request under key {key!r}")
        if stored.operation != self.operation:
            return Unknown(
                f"key {key!r} belongs to {self.provider.name}.{stored.operation},"
                f" not {self.operation}",
                {"tool": self.ref, "key": key, "operation": stored.operation},
            )
        return _receipt(stored.response)


def _receipt(response: ProviderResponse) -> Receipt:
    return Receipt(
        resource_id=response.resource_id,
        version=response.version,
        status=response.status,
        fields=dict(response.fields),
    )


class SandboxCatalogueError(SagaError):
    """The sandbox was asked for tools it cannot be: unknown names, or a catalogue promise
    (dedupe by key) that its providers would break."""


@dataclass(frozen=True)
class TripSandbox:
    """The trip providers, their fault injector and the tool set of their tools, over ``db``
    (where the ledgers and the fault rules are read: give it to ledger_for_saga and co)."""

    db: ConnectionSource
    flights: FlightsProvider
    hotels: HotelsProvider
    payments: PaymentsProvider
    email: EmailProvider
    faults: FaultInjector
    tools: ToolSet

    @property
    def registry(self) -> ToolRegistry:
        """The implementations of the eight trip tools."""
        return self.tools.registry


def build_trip_sandbox(
    db: ConnectionSource,
    *,
    latency_s: float = 0.0,
    non_deduping: Collection[str] = (),
) -> TripSandbox:
    """Providers and tools over ``db`` (a conninfo: one connection per call; or a pool the
    caller owns and closes), paired with :func:`trip_catalogue`.

    ``non_deduping`` names tools (e.g. ``{"email.send_itinerary"}``) whose provider then
    ignores repeated keys: for tests of the "never blindly retry, wait out the commit
    horizon" path. A tool the catalogue says dedupes by key cannot be made one of them.
    """
    faults = FaultInjector(db)
    flights = FlightsProvider(db, faults=faults, latency_s=latency_s)
    hotels = HotelsProvider(db, faults=faults, latency_s=latency_s)
    payments = PaymentsProvider(db, faults=faults, latency_s=latency_s)
    email = EmailProvider(db, faults=faults, latency_s=latency_s)
    catalogue = trip_catalogue()
    tools = {
        (f"{provider.name}.{operation}", 1): SandboxTool(provider, operation)
        for provider in (flights, hotels, payments, email)
        for operation in provider.operations
    }
    unknown = set(non_deduping) - {name for name, _ in tools}
    if unknown:
        raise SandboxCatalogueError(f"no such trip tools: {sorted(unknown)}")
    promised = sorted(
        name for name in non_deduping
        if (spec := catalogue.get(name, 1)) is not None and spec.dedupes_by_key
    )
    if promised:
        raise SandboxCatalogueError(
            f"the sandbox catalogue says {promised} dedupe by key; they cannot be non-deduping"
        )
    for name in non_deduping:
        tools[(name, 1)].provider.stop_deduping(tools[(name, 1)].operation)
    tool_set = ToolSet(catalogue, ToolRegistry(tools))
    return TripSandbox(db, flights, hotels, payments, email, faults, tool_set)
