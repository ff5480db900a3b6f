"""Sandbox providers that behave like real external systems, for the demo and the tests.

Flights, hotels, payments and email each keep a ledger in their own PostgreSQL schema
(``sandbox_*``), dedupe by Stripe-like idempotency keys written in the same transaction
as the effect, version their resources, and fail at every boundary a fault rule in
``sandbox_control`` asks for. :mod:`workers.sandbox.invariants` reads the ledgers back to
prove "no duplicate net effect".
"""

from __future__ import annotations

from pathlib import Path

from events.migrate import apply_migrations
from workers.sandbox._db import ConnectionSource, open_pool
from workers.sandbox.adapters import (
    SandboxTool,
    TripSandbox,
    build_trip_registry,
    build_trip_sandbox,
    classify_provider_error,
)
from workers.sandbox.errors import ProviderError, ProviderTimeout
from workers.sandbox.faults import Boundary, FaultHit, FaultInjector, FaultRule
from workers.sandbox.invariants import (
    DuplicateEffect,
    LedgerTotals,
    SagaLedger,
    duplicate_effects,
    ledger_for_saga,
    ledger_totals,
    saga_ledgers,
)
from workers.sandbox.provider import ProviderResponse, SandboxProvider, StoredRequest
from workers.sandbox.providers import (
    EmailProvider,
    FlightsProvider,
    HotelsProvider,
    PaymentsProvider,
)

__all__ = [
    "MIGRATIONS_DIR",
    "NAMESPACE",
    "Boundary",
    "ConnectionSource",
    "DuplicateEffect",
    "EmailProvider",
    "FaultHit",
    "FaultInjector",
    "FaultRule",
    "FlightsProvider",
    "HotelsProvider",
    "LedgerTotals",
    "PaymentsProvider",
    "ProviderError",
    "ProviderResponse",
    "ProviderTimeout",
    "SagaLedger",
    "SandboxProvider",
    "SandboxTool",
    "StoredRequest",
    "TripSandbox",
    "build_trip_registry",
    "build_trip_sandbox",
    "classify_provider_error",
    "duplicate_effects",
    "ledger_for_saga",
    "ledger_totals",
    "migrate",
    "open_pool",
    "saga_ledgers",
]

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
NAMESPACE = "sandbox"


def migrate(conninfo: str) -> list[str]:
    """Create or upgrade the sandbox schemas (idempotent); return the files newly applied."""
    return apply_migrations(conninfo, NAMESPACE, MIGRATIONS_DIR)
