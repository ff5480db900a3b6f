"""The fleet's composition: one explicit object holding the store, tools, broker and roles.

Built once per process from :class:`FleetConfig` (no globals, no import-time side effects);
connection pools are opened lazily per process, so a forked or threaded worker is safe.
"""

from __future__ import annotations

import os
import socket
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cached_property

from application.client import SagaClient
from application.command_signatures import CommandNonces
from application.gate_windows.postgres import PostgresGateWindows
from application.orchestrator import Orchestrator
from application.principals.directory import PrincipalDirectory
from application.principals.postgres import PostgresPrincipals
from application.secrets.guard import SecretGuard
from application.secrets.postgres import SecretVault
from application.telemetry.metrics import WorkerMetrics
from application.telemetry.tracing import trace_metadata
from events import EventStore
from events.definition_store.postgres import DefinitionStore
from events.eventstore.model import Clock, utc_now
from events.saga_log.postgres import PostgresSagaLog
from events.saga_log.streams import saga_registry
from saga_core.access.roles import Principal
from saga_core.definitions.catalogue import ToolCatalogue
from saga_core.engine.state_codec import DEFAULT_SNAPSHOT_EVERY
from saga_core.errors import ErrorKind, SagaError
from workers.celery_app import BrokerSettings, create_celery_app
from workers.dead_letters.store import DeadLetters
from workers.executor import StepExecutor
from workers.publisher import RedisStepPublisher
from workers.tasks import bind_tasks
from workers.tools import ToolRegistry, ToolSet


class NoToolSet(SagaError):
    """A fleet given only a catalogue was asked to run a tool (a worker needs a ToolSet)."""

    kind = ErrorKind.MISCONFIGURED


@dataclass(frozen=True)
class FleetConfig:
    """What a fleet process needs: endpoints and timing."""

    database_url: str
    broker_url: str
    # With a sentinel://…;sentinel://… broker URL: the name its Sentinels monitor the master
    # under (celery_app.BrokerSettings.sentinel_master).
    broker_sentinel_master: str | None = None
    worker_id: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    lease_s: float = 30.0
    queue_wait_s: float = 10.0
    # The longest gap between two re-publishes of one overdue item no worker takes (the gaps
    # grow from queue_wait_s), and how often the sweeper reads every active saga (0: never).
    republish_max_s: float = 300.0
    sweep_full_every_s: float = 600.0
    # Helper processes the sweeper spreads a backlog over (0: it sweeps in its own process;
    # workers.sweeper, "A backlog may be spread over helper processes").
    sweeper_processes: int = 0
    pool_size: int = 8
    inline_steps: int = 8  # steps a worker may run in turn without a broker round trip
    branch_threads: int = 8  # parallel branches of one saga a worker runs side by side
    # How long a message a worker took stays invisible to the others: what a killed worker
    # held comes back to another after it (celery_app.BrokerSettings).
    visibility_timeout_s: float = 600.0
    # Workers answer Celery's remote control and send events (celery_app.BrokerSettings).
    remote_control: bool = True
    # And send Celery task events (celery_app.BrokerSettings.task_events).
    task_events: bool = False
    # A load that folded more events than this past a saga's snapshot writes one (0: off).
    snapshot_every: int = DEFAULT_SNAPSHOT_EVERY

    @property
    def broker_settings(self) -> BrokerSettings:
        """The Celery app's settings for this fleet."""
        return BrokerSettings.for_visibility_timeout(
            self.broker_url, self.visibility_timeout_s, remote_control=self.remote_control,
            task_events=self.task_events,
            sentinel_master=self.broker_sentinel_master)


class Fleet:
    """Store, definitions, tools, Celery app and the orchestrating roles of one process."""

    def __init__(
        self,
        config: FleetConfig,
        tools: ToolSet | ToolCatalogue,
        *,
        clock: Clock = utc_now,
    ) -> None:
        """``tools``: the ToolSet this process runs steps with, checked here against its own
        catalogue (:class:`~workers.tools.ToolSetMismatch`: the fleet does not start), or
        only a catalogue, for a process that records and validates but calls no tool (the
        command line, the sweeper, an agent's client)."""
        self.config = config
        self.clock = clock
        if isinstance(tools, ToolSet):
            tools.check()
        self._tools = tools
        self.catalogue = tools.catalogue if isinstance(tools, ToolSet) else tools

    @cached_property
    def store(self) -> EventStore:
        """The event store, with saga event types registered (pool opened on first use)."""
        return EventStore.connect(
            self.config.database_url, pool_size=self.config.pool_size,
            registry=saga_registry(), notify=True,
        )

    @property
    def registry(self) -> ToolRegistry:
        """The implementations this fleet runs; :class:`NoToolSet` if it was given none."""
        if not isinstance(self._tools, ToolSet):
            raise NoToolSet("this fleet was given only a tool catalogue; running a step "
                            "needs a ToolSet (catalogue and implementations)")
        return self._tools.registry

    @cached_property
    def definitions(self) -> DefinitionStore:
        """Saga definitions by (name, version, hash)."""
        return DefinitionStore(self.store)

    @cached_property
    def repo(self) -> PostgresSagaLog:
        """Loads sagas from the log and appends their events (with the current trace's ids
        in their metadata when OpenTelemetry traces this process)."""
        return PostgresSagaLog(self.store, self.definitions, metadata=trace_metadata,
                               snapshot_every=self.config.snapshot_every)

    @cached_property
    def secrets(self) -> SecretVault:
        """Secret saga inputs, kept outside the log."""
        return SecretVault(self.store)

    @cached_property
    def gate_windows(self) -> PostgresGateWindows:
        """Tenant windows of gated amounts, reserved in the claims' transactions."""
        return PostgresGateWindows(self.store)

    @cached_property
    def principals(self) -> PrincipalDirectory:
        """The people and agents of every tenant, their tokens and signing keys."""
        return PostgresPrincipals(self.store, self.clock)

    def authenticate(self, token: str) -> Principal:
        """The principal a token proves (``Unauthenticated`` for any token that proves none)."""
        return self.principals.authenticate(token)

    @cached_property
    def celery(self):  # type: ignore[no-untyped-def]
        """The Celery app with the fleet's tasks bound to this fleet."""
        app = create_celery_app(self.config.broker_settings)
        bind_tasks(app, self)
        return app

    @cached_property
    def dead_letters(self) -> DeadLetters:
        """Messages that can never succeed, kept whole for an operator."""
        return DeadLetters(self.store)

    @cached_property
    def command_nonces(self) -> CommandNonces:
        """Single-use command ids of signed agent commands (``application.command_signatures``)."""
        return CommandNonces(self.store)

    @cached_property
    def publisher(self) -> RedisStepPublisher:
        """Publishes step commands after commits (one Redis round trip a publish)."""
        return RedisStepPublisher(self.celery)

    @cached_property
    def orchestrator(self) -> Orchestrator:
        """Where every saga event is written (decide, claim, append once)."""
        return Orchestrator(self.repo, self.clock,
                            queue_wait=timedelta(seconds=self.config.queue_wait_s),
                            on_race_lost=self.metrics.race_lost, windows=self.gate_windows)

    @cached_property
    def executor(self) -> StepExecutor:
        """Claims and runs step commands as this worker."""
        return StepExecutor(self.orchestrator, self.registry, self.secrets,
                            worker_id=self.config.worker_id,
                            lease=timedelta(seconds=self.config.lease_s),
                            metrics=self.metrics, guard=self.secret_guard)

    @cached_property
    def secret_guard(self) -> SecretGuard:
        """Looks for sagas' secret values wherever this process writes or shows, and counts
        what it replaces (``sagafleet_secret_scrubs_total``)."""
        return SecretGuard(self.secrets, self.metrics)

    @cached_property
    def metrics(self) -> WorkerMetrics:
        """This process's Prometheus instruments, in its own registry."""
        return WorkerMetrics()

    def client(self, *, tenant: str = "default", actor: str = "agent") -> SagaClient:
        """A SagaClient of this trusted program acting for ``tenant`` as the agent ``actor``
        (in process: it holds the database already; it may never approve)."""
        return self.client_for(Principal.in_process_agent(tenant, actor))

    def client_for(self, principal: Principal) -> SagaClient:
        """A SagaClient acting as ``principal`` (proven by the principal directory)."""
        return SagaClient(self.orchestrator, self.definitions, self.catalogue,
                          secrets=self.secrets, publisher=self.publisher,
                          principal=principal, guard=self.secret_guard)

    @cached_property
    def branches(self) -> ThreadPoolExecutor:
        """Threads for the parallel branches of a saga that this worker claimed together."""
        return ThreadPoolExecutor(max_workers=self.config.branch_threads,
                                  thread_name_prefix="sagafleet-branch")

    def close(self) -> None:
        """Close pools this fleet opened, and the tool set it was given (it owns it)."""
        threads = self.__dict__.pop("branches", None)
        if threads is not None:
            threads.shutdown(wait=True)
        store = self.__dict__.pop("store", None)
        if store is not None:
            store.close()
        if isinstance(self._tools, ToolSet):
            self._tools.close()
