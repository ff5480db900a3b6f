"""Which workers of the fleet are alive, and what they do: Celery's remote control, asked once.

The workers answer Celery's remote control unless a deployment turned it off
(``SAGAFLEET_CELERY_REMOTE_CONTROL=false``, :class:`~workers.celery_app.BrokerSettings`).
:func:`inspect_fleet` broadcasts a ``ping`` and waits ``timeout_s`` for the replies (a
broadcast cannot know how many workers will answer, so it always waits that long), then
asks the workers that answered for their ``active`` tasks and ``stats`` with a reply limit
of that many, which returns as soon as all of them replied. The answer is a
:class:`FleetInspection`: the workers, or why none could be listed (remote control off, no
reply, the broker unreachable), never an exception for a page to catch.

Task arguments are never read from the replies: a step's arguments name a saga (which may
be another tenant's) and an agent command's may carry what must not be shown; a task is
its name, id and start time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from celery import Celery
from kombu.exceptions import KombuError, OperationalError


class InspectionOutcome(StrEnum):
    """Why the list of workers is what it is."""

    ANSWERED = "answered"  # at least one worker replied
    NO_REPLY = "no_reply"  # remote control is on, but nobody answered in time
    REMOTE_CONTROL_OFF = "remote_control_off"  # the fleet does not answer remote control
    BROKER_UNREACHABLE = "broker_unreachable"


@dataclass(frozen=True)
class ActiveTask:
    """A task a worker is running now (never its arguments)."""

    name: str
    task_id: str
    started_at: datetime | None


@dataclass(frozen=True)
class WorkerState:
    """One worker that answered: its hostname, what it runs, what it has processed."""

    hostname: str
    active: list[ActiveTask] = field(default_factory=list)
    processed: Mapping[str, int] = field(default_factory=dict)
    pid: int | None = None
    concurrency: int | None = None
    uptime_s: float | None = None

    @property
    def processed_total(self) -> int:
        """Every task this worker has received since it started."""
        return sum(self.processed.values())


@dataclass(frozen=True)
class FleetInspection:
    """The workers that answered (by hostname), or the reason none are listed."""

    outcome: InspectionOutcome
    workers: list[WorkerState]
    timeout_s: float
    detail: str = ""

    @property
    def message(self) -> str:
        """What a person should read when no worker is listed."""
        if self.outcome is InspectionOutcome.REMOTE_CONTROL_OFF:
            return ("the fleet's workers do not answer Celery's remote control "
                    "(SAGAFLEET_CELERY_REMOTE_CONTROL=false), so they cannot be listed here; "
                    "the queue and the sagas still show their work")
        if self.outcome is InspectionOutcome.NO_REPLY:
            return (f"no worker answered within {self.timeout_s:g} s: none is running, or "
                    "they are too busy to reply (their work still shows in the sagas)")
        if self.outcome is InspectionOutcome.BROKER_UNREACHABLE:
            return f"the broker cannot be reached to ask the workers: {self.detail}"
        return f"{len(self.workers)} worker(s) answered"


def inspect_fleet(app: Celery, *, remote_control: bool, timeout_s: float = 1.0
                  ) -> FleetInspection:
    """Ask the fleet's workers who is alive, what each runs and has processed."""
    if not remote_control:
        return FleetInspection(InspectionOutcome.REMOTE_CONTROL_OFF, [], timeout_s)
    try:
        pings = app.control.inspect(timeout=timeout_s).ping() or {}
        if not pings:
            return FleetInspection(InspectionOutcome.NO_REPLY, [], timeout_s)
        names = sorted(pings)
        asked = app.control.inspect(destination=names, timeout=timeout_s, limit=len(names))
        active = asked.active() or {}
        stats = asked.stats() or {}
    except (KombuError, OperationalError, OSError) as exc:
        return FleetInspection(InspectionOutcome.BROKER_UNREACHABLE, [], timeout_s,
                               f"{type(exc).__name__}: {exc}")
    workers = [_worker(name, active.get(name) or [], stats.get(name) or {}) for name in names]
    return FleetInspection(InspectionOutcome.ANSWERED, workers, timeout_s)


def _worker(hostname: str, active: list[Any], stats: Mapping[str, Any]) -> WorkerState:
    tasks = [ActiveTask(str(t.get("name") or t.get("type") or "?"), str(t.get("id") or "?"),
                        _started(t.get("time_start")))
             for t in active if isinstance(t, Mapping)]
    total = stats.get("total")
    processed = ({str(k): int(v) for k, v in total.items() if isinstance(v, int)}
                 if isinstance(total, Mapping) else {})
    pool = stats.get("pool")
    concurrency = pool.get("max-concurrency") if isinstance(pool, Mapping) else None
    uptime = stats.get("uptime")
    pid = stats.get("pid")
    return WorkerState(hostname, tasks, processed,
                       pid if isinstance(pid, int) else None,
                       concurrency if isinstance(concurrency, int) else None,
                       float(uptime) if isinstance(uptime, int | float) else None)


def _started(time_start: Any) -> datetime | None:
    """A task's ``time_start`` (seconds since the epoch, as the worker's clock says)."""
    if isinstance(time_start, int | float) and time_start > 0:
        return datetime.fromtimestamp(time_start, UTC)
    return None
