"""The sandbox: a simulator of the outside world for the demo, the tests and the scripts.

Flights, hotels, payments and email each keep a ledger in their own PostgreSQL schema
(``sandbox_*``), dedupe by Stripe-like idempotency keys written in the same transaction
as the effect, version their resources, and fail at every boundary a fault rule in
``sandbox_control`` asks for. :mod:`sagafleet.sandbox.invariants` reads the ledgers back to
prove "no duplicate net effect".

It is no part of the production path: ``workers`` and ``projections`` never import it,
``sagafleet db migrate`` never creates its schemas (:func:`install` does, for whoever sets
the sandbox up), and a worker runs it only when told to::

    sagafleet worker --tools sagafleet.sandbox:trip_tool_set
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from events.migrate import apply_migrations
from sagafleet.sandbox._db import ConnectionSource, open_pool
from sagafleet.sandbox.adapters import (
    COMMIT_HORIZON_S,
    SandboxCatalogueError,
    SandboxTool,
    TripSandbox,
    build_trip_sandbox,
    classify_provider_error,
    trip_catalogue,
)
from sagafleet.sandbox.errors import ProviderError, ProviderTimeout
from sagafleet.sandbox.faults import Boundary, FaultHit, FaultInjector, FaultRule
from sagafleet.sandbox.invariants import (
    DuplicateEffect,
    LedgerTotals,
    TripLedger,
    duplicate_effects,
    ledger_for_saga,
    ledger_totals,
    saga_ledgers,
)
from sagafleet.sandbox.provider import ProviderResponse, SandboxProvider, StoredRequest
from sagafleet.sandbox.providers import (
    EmailProvider,
    FlightsProvider,
    HotelsProvider,
    PaymentsProvider,
)
from workers.tools import ToolSet

if TYPE_CHECKING:
    from sagafleet.sandbox.settings import SandboxSettings
    from sagafleet.settings import Settings

__all__ = [
    "COMMIT_HORIZON_S",
    "MIGRATIONS_DIR",
    "NAMESPACE",
    "TOOL_SET",
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
    "TripLedger",
    "SandboxCatalogueError",
    "SandboxProvider",
    "SandboxTool",
    "StoredRequest",
    "TripSandbox",
    "build_trip_sandbox",
    "classify_provider_error",
    "configured_ledgers",
    "duplicate_effects",
    "install",
    "ledger_for_saga",
    "ledger_totals",
    "open_pool",
    "open_trip_sandbox",
    "saga_ledgers",
    "trip_catalogue",
    "trip_tool_set",
]

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
NAMESPACE = "sandbox"
TOOL_SET = "sagafleet.sandbox:trip_tool_set"
"""How ``sagafleet worker --tools`` (or ``SAGAFLEET_TOOLS``) names the sandbox's tool set."""


def install(database_url: str) -> list[str]:
    """Create or upgrade the sandbox's schemas (idempotent); return the files newly applied."""
    return apply_migrations(database_url, NAMESPACE, MIGRATIONS_DIR)


def open_trip_sandbox(
    database_url: str, *, latency_s: float = 0.0, pool_size: int = 8
) -> TripSandbox:
    """The trip sandbox over a pool of its own; closing its tool set closes the pool.

    The schemas must exist already (:func:`install`): opening never changes a database.
    """
    pool = open_pool(database_url, max_size=pool_size)
    sandbox = build_trip_sandbox(pool, latency_s=latency_s)
    return replace(sandbox, tools=replace(sandbox.tools, resources=(pool,)))


def configured_ledgers(settings: Settings, sandbox: SandboxSettings) -> str:
    """Where the configured sandbox keeps its ledgers: ``SAGAFLEET_SANDBOX_DATABASE_URL``,
    else the fleet's database (``SAGAFLEET_DATABASE_URL``, else the embedded server)."""
    from sagafleet import runtime
    from sagafleet.settings import reveal

    return reveal(sandbox.sandbox_database_url) or runtime.database_url(settings)


def trip_tool_set() -> ToolSet:
    """The trip tools over the sandbox, for ``sagafleet worker --tools`` (see :data:`TOOL_SET`).

    Reads the process's settings once: the sandbox lives in ``SAGAFLEET_SANDBOX_DATABASE_URL``
    when set, else in the fleet's database (``SAGAFLEET_DATABASE_URL``, else the embedded
    server), and every provider call waits ``SAGAFLEET_TOOL_LATENCY_SECONDS`` first.
    """
    # Imported here: the settings are the command line's concern, and a test or script that
    # builds the sandbox itself never needs them.
    from sagafleet.sandbox.settings import SandboxSettings
    from sagafleet.settings import Settings

    settings, knobs = Settings.from_env(), SandboxSettings.from_env()
    sandbox = open_trip_sandbox(configured_ledgers(settings, knobs),
                                latency_s=knobs.tool_latency_seconds)
    return sandbox.tools
