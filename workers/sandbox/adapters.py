"""Tool adapters for the trip saga: the sandbox providers behind the :class:`Tool` contract.

This is the one place provider exceptions become :class:`ToolError`s
(:func:`classify_provider_error`). The allowlisted tools are::

    flights.hold@1   flights.release@1   hotels.hold@1          hotels.release@1
    payments.capture@1   payments.refund@1   email.send_itinerary@1   email.send_correction@1

All of them dedupe by key by default: every sandbox provider keeps Stripe-like idempotency
keys, email included (a mail API with idempotency keys, not bare SMTP). A test may build
the sandbox with ``non_deduping={...}`` to get tools that truly cannot dedupe.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from saga_core.contracts import ErrorClass, Receipt
from workers.sandbox._db import ConnectionSource
from workers.sandbox.errors import ProviderError, ProviderTimeout
from workers.sandbox.faults import FaultInjector
from workers.sandbox.provider import ProviderResponse, SandboxProvider
from workers.sandbox.providers import (
    EmailProvider,
    FlightsProvider,
    HotelsProvider,
    PaymentsProvider,
)
from workers.tools import Absent, LookupResult, ToolError, ToolRegistry, Unknown

__all__ = ["SandboxTool", "TripSandbox", "build_trip_registry", "build_trip_sandbox"]

# Injected slow visibility defaults to 2 s and the demo mix uses 1 s; a request may become
# visible to lookup this long after it was dispatched. Per-tool horizons follow the trip
# catalogue (saga_core/examples/trip_tools.yaml).
DEFAULT_COMMIT_HORIZON_S = 30.0
TRIP_COMMIT_HORIZONS_S: dict[str, float] = {
    "flights.hold": 30.0,
    "flights.release": 30.0,
    "hotels.hold": 30.0,
    "hotels.release": 30.0,
    "payments.capture": 60.0,
    "payments.refund": 60.0,
    "email.send_itinerary": 120.0,
    "email.send_correction": 120.0,
}

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
    """One operation of a sandbox provider, allowlisted as ``name@version``."""

    name: str
    version: int
    provider: SandboxProvider
    operation: str
    dedupes_by_key: bool = True
    commit_horizon_s: float = DEFAULT_COMMIT_HORIZON_S

    @property
    def ref(self) -> str:
        """``name@version``, as error messages name the tool."""
        return f"{self.name}@{self.version}"

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


@dataclass(frozen=True)
class TripSandbox:
    """The trip providers, their fault injector and the registry of their tools."""

    flights: FlightsProvider
    hotels: HotelsProvider
    payments: PaymentsProvider
    email: EmailProvider
    faults: FaultInjector
    registry: ToolRegistry


def build_trip_sandbox(
    db: ConnectionSource,
    *,
    latency_s: float = 0.0,
    commit_horizons_s: Mapping[str, float] | None = None,
    non_deduping: Collection[str] = (),
) -> TripSandbox:
    """Providers and tools over ``db`` (a conninfo: one connection per call; or a pool the
    caller owns and closes).

    ``non_deduping`` names tools (e.g. ``{"email.send_itinerary"}``) whose provider then
    ignores repeated keys and which declare ``dedupes_by_key=False``: for tests of the
    "never blindly retry, wait out the commit horizon" path.
    """
    faults = FaultInjector(db)
    flights = FlightsProvider(db, faults=faults, latency_s=latency_s)
    hotels = HotelsProvider(db, faults=faults, latency_s=latency_s)
    payments = PaymentsProvider(db, faults=faults, latency_s=latency_s)
    email = EmailProvider(db, faults=faults, latency_s=latency_s)
    tools: list[tuple[str, SandboxProvider, str]] = [
        ("flights.hold", flights, "hold"),
        ("flights.release", flights, "release"),
        ("hotels.hold", hotels, "hold"),
        ("hotels.release", hotels, "release"),
        ("payments.capture", payments, "capture"),
        ("payments.refund", payments, "refund"),
        ("email.send_itinerary", email, "send_itinerary"),
        ("email.send_correction", email, "send_correction"),
    ]
    unknown = set(non_deduping) - {name for name, _, _ in tools}
    if unknown:
        raise ValueError(f"no such trip tools: {sorted(unknown)}")
    horizons = {**TRIP_COMMIT_HORIZONS_S, **(commit_horizons_s or {})}
    registry = ToolRegistry()
    for name, provider, operation in tools:
        if name in non_deduping:
            provider.stop_deduping(operation)
        registry.register(
            SandboxTool(
                name,
                1,
                provider,
                operation,
                dedupes_by_key=provider.dedupes(operation),
                commit_horizon_s=horizons.get(name, DEFAULT_COMMIT_HORIZON_S),
            )
        )
    return TripSandbox(flights, hotels, payments, email, faults, registry)


def build_trip_registry(db: ConnectionSource, latency_s: float = 0.0) -> ToolRegistry:
    """The allowlist of the eight trip tools at version 1 over the sandbox providers."""
    return build_trip_sandbox(db, latency_s=latency_s).registry
