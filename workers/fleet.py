"""The fleet's composition: one explicit object holding the store, tools, broker and roles.

Built once per process from :class:`FleetConfig` (no globals, no import-time side effects);
connection pools are opened lazily per process, so a forked or threaded worker is safe.
"""

from __future__ import annotations

import logging
import os
import socket
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cached_property

from psycopg_pool import ConnectionPool

from events import EventStore
from events.definitions import DefinitionConflict, DefinitionStore
from events.sagas import PostgresSagaLog, saga_registry
from saga_core.catalogue import ToolCatalogue
from saga_core.errors import ErrorKind, SagaError
from saga_core.examples import trip_definition, trip_tool_catalogue
from workers.celery_app import BrokerSettings, create_celery_app
from workers.client import SagaClient
from workers.executor import StepExecutor
from workers.orchestrator import Clock, Orchestrator, utc_now
from workers.publisher import CeleryPublisher
from workers.sandbox import build_trip_sandbox
from workers.sandbox._db import open_pool
from workers.secrets import SecretVault
from workers.tools import ToolRegistry

log = logging.getLogger(__name__)


class FleetMisconfigured(SagaError):
    """The tool catalogue and the registered implementations disagree."""

    kind = ErrorKind.MISCONFIGURED


@dataclass(frozen=True)
class FleetConfig:
    """What a fleet process needs: endpoints, timing, and the sandbox's knobs."""

    database_url: str
    broker_url: str
    worker_id: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    lease_s: float = 30.0
    queue_wait_s: float = 10.0
    tool_latency_s: float = 0.0
    pool_size: int = 8
    inline_steps: int = 8  # steps a worker may run in turn without a broker round trip
    branch_threads: int = 8  # parallel branches of one saga a worker runs side by side


class Fleet:
    """Store, definitions, tools, Celery app and the orchestrating roles of one process."""

    def __init__(
        self,
        config: FleetConfig,
        *,
        tools: ToolRegistry | None = None,
        catalogue: ToolCatalogue | None = None,
        clock: Clock = utc_now,
    ) -> None:
        self.config = config
        self.clock = clock
        self.catalogue = catalogue or trip_tool_catalogue()
        self._tools = tools

    @cached_property
    def store(self) -> EventStore:
        """The event store, with saga event types registered (pool opened on first use)."""
        return EventStore.connect(
            self.config.database_url, pool_size=self.config.pool_size,
            registry=saga_registry(), notify=True,
        )

    @cached_property
    def sandbox_pool(self) -> ConnectionPool:
        """Connections for the sandbox providers (their own schemas, same server)."""
        return open_pool(self.config.database_url, max_size=self.config.pool_size)

    @cached_property
    def tools(self) -> ToolRegistry:
        """The allowlisted tools: the given registry, or the trip sandbox providers."""
        registry = self._tools or build_trip_sandbox(
            self.sandbox_pool, latency_s=self.config.tool_latency_s
        ).registry
        missing = [f"{s.name}@{s.version}" for s in self.catalogue.tools
                   if not registry.has(s.name, s.version)]
        if missing:
            raise FleetMisconfigured(f"catalogue tools without an implementation: {missing}")
        return registry

    @cached_property
    def definitions(self) -> DefinitionStore:
        """Saga definitions by (name, version, hash)."""
        return DefinitionStore(self.store)

    @cached_property
    def repo(self) -> PostgresSagaLog:
        """Loads sagas from the log and appends their events."""
        return PostgresSagaLog(self.store, self.definitions)

    @cached_property
    def secrets(self) -> SecretVault:
        """Secret saga inputs, kept outside the log."""
        return SecretVault(self.store)

    @cached_property
    def celery(self):  # type: ignore[no-untyped-def]
        """The Celery app with the fleet's tasks bound to this fleet."""
        from workers.tasks import bind_tasks

        app = create_celery_app(BrokerSettings(broker_url=self.config.broker_url))
        bind_tasks(app, self)
        return app

    @cached_property
    def publisher(self) -> CeleryPublisher:
        """Publishes step commands after commits."""
        return CeleryPublisher(self.celery)

    @cached_property
    def orchestrator(self) -> Orchestrator:
        """Where every saga event is written (decide, claim, append once)."""
        return Orchestrator(self.repo, self.clock)

    @cached_property
    def executor(self) -> StepExecutor:
        """Claims and runs step commands as this worker."""
        return StepExecutor(self.orchestrator, self.tools, self.secrets,
                            worker_id=self.config.worker_id,
                            lease=timedelta(seconds=self.config.lease_s))

    def client(self, *, tenant: str = "default", actor: str = "agent") -> SagaClient:
        """A SagaClient acting for ``tenant`` as ``actor``."""
        return SagaClient(self.orchestrator, self.definitions, self.catalogue,
                          secrets=self.secrets, publisher=self.publisher,
                          tenant=tenant, actor=actor)

    def register_builtin_definitions(self) -> list[str]:
        """Register the shipped trip definition (idempotent); return the hashes registered.

        A stored ``trip`` of the same version with other content (a changed example without
        a version bump) is kept, with a warning: running sagas need their stored definition,
        and a worker must not refuse to start over an example.
        """
        trip = trip_definition()
        needed = {(s.tool, s.version) for s in trip.steps} | {
            (s.compensation.tool, s.compensation.version) for s in trip.steps if s.compensation
        }
        if any(self.catalogue.get(name, version) is None for name, version in needed):
            return []  # a fleet running its own tool set has no use for the example trip
        try:
            return [self.client(actor="sagafleet").register_definition(trip)]
        except DefinitionConflict as exc:
            log.warning("built-in definition not registered: %s", exc)
            return []

    @cached_property
    def branches(self) -> ThreadPoolExecutor:
        """Threads for the parallel branches of a saga that this worker claimed together."""
        return ThreadPoolExecutor(max_workers=self.config.branch_threads,
                                  thread_name_prefix="sagafleet-branch")

    def close(self) -> None:
        """Close pools this fleet opened."""
        threads = self.__dict__.pop("branches", None)
        if threads is not None:
            threads.shutdown(wait=True)
        for name in ("store", "sandbox_pool"):
            resource = self.__dict__.pop(name, None)
            if resource is not None:
                resource.close()
