"""Building a running console from Settings: the fleet, the read side, sessions, the hub, and
(unless told not to) an in-process projector.

The console's pages read the projections' read models, which move only while a projector
runs. ``sagafleet console`` therefore runs one itself by default: each projection is consumed
under a PostgreSQL advisory lock, so when ``sagafleet projector`` (or another console) already
runs, this one simply stands by, and takes over if that one stops. ``--no-projector`` turns it
off where a separate projector service is guaranteed (compose).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from projections import ProjectionContext, Projector
from projections.alerts import AlertThresholds
from projections.prometheus import DEFAULT_WINDOW_S
from sagafleet.console.core import Console
from sagafleet.console.live import LiveHub
from sagafleet.console.sessions import SessionPolicy, SessionStore
from sagafleet.fleetcli import build_fleet
from sagafleet.settings import Settings
from workers.fleet import Fleet

__all__ = ["RunningConsole", "console_for", "open_console"]


def console_for(fleet: Fleet, policy: SessionPolicy,
                metrics_window_s: float = DEFAULT_WINDOW_S) -> Console:
    """A console over an open fleet (the fleet's store carries every query); its business
    alerts use the metrics window, as the exporter's do."""
    read = ProjectionContext(fleet.store, fleet.definitions)
    return Console(fleet=fleet, read=read,
                   sessions=SessionStore(fleet.store, fleet.principals, policy, fleet.clock),
                   live=LiveHub(fleet.store),
                   alert_thresholds=AlertThresholds.for_window(metrics_window_s))


@dataclass
class RunningConsole:
    """A console and what it runs beside the web server; :meth:`close` stops both."""

    console: Console
    projector: Projector | None

    def close(self) -> None:
        """Stop the projector (releasing its locks) and close the fleet."""
        if self.projector is not None:
            self.projector.stop()
        self.console.fleet.close()


def open_console(settings: Settings, *, run_projector: bool = True) -> RunningConsole:
    """The console of the configured database (migrated first: a long-running service)."""
    policy = SessionPolicy(idle=timedelta(seconds=settings.console_session_idle_seconds),
                           absolute=timedelta(seconds=settings.console_session_max_seconds))
    fleet = build_fleet(settings)
    try:
        console = console_for(fleet, policy, settings.metrics_window_seconds)
        projector = Projector(console.read).start() if run_projector else None
    except BaseException:
        fleet.close()
        raise
    return RunningConsole(console, projector)
