"""What one worker process did, as Prometheus instruments (``prometheus_client``).

Each :class:`WorkerMetrics` owns its own registry (no global state: a test or a process
with two fleets gets two), which ``sagafleet worker --metrics-port`` serves on ``/metrics``
to the fleet role only (:mod:`sagafleet.metrics_http`: every tenant's work is counted here).
The fleet's Celery pools are ``solo`` and ``threads`` — one process per worker, never
prefork children — so in-process instruments are the whole truth and the multiprocess
mode (``PROMETHEUS_MULTIPROC_DIR``) is not needed.

Labels are bounded by the tool catalogue and fixed vocabularies: ``tool`` (a catalogue
name), ``kind`` (forward, compensation), ``outcome``/``result``/``task`` from the fixed sets
below — never a saga id, step id or operation key.
"""

from __future__ import annotations

import logging
from typing import Final

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    gc_collector,
    platform_collector,
    process_collector,
)

log = logging.getLogger(__name__)

STEP_OUTCOMES: Final = ("succeeded", "failed", "unknown")
"""How a tool call ended: a receipt, a classified failure, or an ambiguous outcome."""
COMMAND_OUTCOMES: Final = ("executed", "reconciled", "dropped", "escalated")
"""What became of one step command (``workers.executor.StepOutcome.status``)."""

# Tool calls take from milliseconds (a cache) to minutes (a slow provider): the default
# buckets stop at 10 s, and a step's time limit is up to 300 s.
STEP_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                       30.0, 60.0, 120.0, 300.0)


class WorkerMetrics:
    """The instruments of one worker process, in their own registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        # The process's CPU, memory, file descriptors and GC, as every Python exporter has.
        process_collector.ProcessCollector(registry=r)
        platform_collector.PlatformCollector(registry=r)
        gc_collector.GCCollector(registry=r)
        self.step_duration = Histogram(
            "sagafleet_worker_step_duration_seconds",
            "Time a tool call took (forward step or compensation), by tool, kind and outcome.",
            ["tool", "kind", "outcome"], buckets=STEP_BUCKETS, registry=r)
        self.step_commands = Counter(
            "sagafleet_worker_step_commands",
            "Step commands handled, by outcome (executed, reconciled, dropped: a stale or "
            "duplicate message, escalated).",
            ["outcome"], registry=r)
        self.claims = Counter(
            "sagafleet_worker_claims",
            "Operations this worker claimed (a StepStarted it appended), by tool and kind.",
            ["tool", "kind"], registry=r)
        self.races_lost = Counter(
            "sagafleet_worker_races_lost",
            "Appends that lost the race for a saga's stream version (re-read and re-decided).",
            registry=r)
        self.redeliveries = Counter(
            "sagafleet_worker_redeliveries",
            "Broker messages received again after a worker died or their visibility timeout "
            "ran out, by task.", ["task"], registry=r)
        self.reconciliations = Counter(
            "sagafleet_worker_reconciliations",
            "Lookups by operation key after an ambiguous outcome, by tool, kind and result "
            "(found, absent, unknown).", ["tool", "kind", "result"], registry=r)
        self.compensations = Counter(
            "sagafleet_worker_compensations",
            "Compensation calls this worker made, by tool and outcome.",
            ["tool", "outcome"], registry=r)
        self.dead_letters = Counter(
            "sagafleet_worker_dead_letters",
            "Messages this worker kept as dead letters (they can never succeed), by task.",
            ["task"], registry=r)

        self.secret_scrubs = Counter(
            "sagafleet_secret_scrubs",
            "Occurrences of a saga's secret value found where it must not be and replaced "
            "before they were written or shown, by place (application.secrets.guard.SCRUB_PLACES): "
            "anything above zero is a leak that was stopped — find its source.",
            ["place"], registry=r)

    def step_called(self, tool: str, kind: str, outcome: str, seconds: float) -> None:
        """A tool call ended with ``outcome`` (one of :data:`STEP_OUTCOMES`)."""
        self.step_duration.labels(tool, kind, outcome).observe(seconds)
        if kind == "compensation":
            self.compensations.labels(tool, outcome).inc()

    def command_handled(self, outcome: str) -> None:
        """A step command came to ``outcome`` (one of :data:`COMMAND_OUTCOMES`)."""
        self.step_commands.labels(outcome).inc()

    def claimed(self, tool: str, kind: str, count: int = 1) -> None:
        """This worker appended ``count`` claims (StepStarted) for ``tool``."""
        self.claims.labels(tool, kind).inc(count)

    def race_lost(self) -> None:
        """An append met another writer's newer version (ConcurrencyError)."""
        self.races_lost.inc()

    def redelivered(self, task: str) -> None:
        """The broker handed out a message of ``task`` again."""
        self.redeliveries.labels(task).inc()

    def reconciled(self, tool: str, kind: str, result: str) -> None:
        """A lookup by key answered ``result`` (found, absent, unknown)."""
        self.reconciliations.labels(tool, kind, result).inc()

    def secret_scrubbed(self, place: str, count: int) -> None:
        """``count`` occurrences of a secret value were replaced at ``place``."""
        self.secret_scrubs.labels(place).inc(count)

    def dead_lettered(self, task: str) -> None:
        """A message of ``task`` was kept as a dead letter."""
        self.dead_letters.labels(task).inc()
