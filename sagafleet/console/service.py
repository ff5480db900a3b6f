"""Building a running console from Settings: the fleet, the read side, sessions, the hub, and
(unless told not to) an in-process projector.

The console's pages read the projections' read models, which move only while a projector
runs. ``sagafleet console`` therefore runs one itself by default: each projection is consumed
under a PostgreSQL advisory lock, so when ``sagafleet projector`` (or another console) already
runs, this one simply stands by, and takes over if that one stops. ``--no-projector`` turns it
off where a separate projector service is guaranteed (compose).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta

from events.definition_store.postgres import DefinitionStore
from events.eventstore.read_only import ReadOnlyEventStore
from projections import ProjectionContext, Projector
from projections.alerts import AlertThresholds
from projections.prometheus import DEFAULT_WINDOW_S
from sagafleet import runtime
from sagafleet.console.core import Console
from sagafleet.console.live import LiveHub, LiveLimits
from sagafleet.console.sessions import SessionPolicy, SessionStore
from sagafleet.console.sso.signin import SsoSignIn
from sagafleet.console.throttle import SignInFailures, SignInThrottle, ThrottlePolicy
from sagafleet.fleetcli import build_fleet
from sagafleet.settings import Settings
from sagafleet.sso_settings import OidcSettings, oidc_settings
from workers.fleet import Fleet

__all__ = ["RunningConsole", "console_for", "edge_limits", "open_console"]


DEFAULT_LIVE_LIMITS = LiveLimits()
DEFAULT_SIGNIN = ThrottlePolicy()


def console_for(fleet: Fleet, policy: SessionPolicy,
                metrics_window_s: float = DEFAULT_WINDOW_S,
                read: ProjectionContext | None = None, *,
                live_limits: LiveLimits = DEFAULT_LIVE_LIMITS,
                signin: ThrottlePolicy = DEFAULT_SIGNIN,
                sso: OidcSettings | None = None) -> Console:
    """A console over an open fleet; pages read from ``read`` (a read replica's context;
    None: the fleet's store carries every query) and from the primary right after an
    action. Its business alerts use the metrics window, as the exporter's do; its live
    streams are bounded by ``live_limits``, its sign-ins throttled by ``signin``; ``sso``
    turns single sign-on on."""
    primary = ProjectionContext(fleet.store, fleet.definitions)
    sessions = SessionStore(fleet.store, fleet.principals, policy, fleet.clock)
    return Console(fleet=fleet, read=read or primary, fresh=primary, sessions=sessions,
                   live=LiveHub(fleet.store, limits=live_limits),
                   throttle=SignInThrottle(SignInFailures(fleet.store, signin, fleet.clock)),
                   alert_thresholds=AlertThresholds.for_window(metrics_window_s),
                   sso=SsoSignIn(sso, fleet.store, sessions, clock=fleet.clock)
                   if sso is not None else None)


def edge_limits(settings: Settings) -> tuple[LiveLimits, ThrottlePolicy]:
    """The live stream bounds and the sign-in throttle the settings ask for."""
    live = LiveLimits(per_session=settings.console_live_streams_per_session,
                      per_principal=settings.console_live_streams_per_principal,
                      per_tenant=settings.console_live_streams_per_tenant,
                      per_process=settings.console_live_streams)
    signin = ThrottlePolicy(free_failures=settings.console_signin_free_failures,
                            window=timedelta(seconds=settings.console_signin_window_seconds),
                            max_delay_s=settings.console_signin_max_delay_seconds)
    return live, signin


@dataclass
class RunningConsole:
    """A console and what it runs beside the web server; :meth:`close` stops both."""

    console: Console
    projector: Projector | None
    replica: ReadOnlyEventStore | None = None

    def close(self) -> None:
        """Stop the projector (releasing its locks), close the fleet and the replica's store."""
        if self.projector is not None:
            self.projector.stop()
        self.console.fleet.close()
        if self.replica is not None:
            self.replica.close()


def open_console(settings: Settings, *, run_projector: bool = True) -> RunningConsole:
    """The console of the configured database (migrated first: a long-running service)."""
    sso = oidc_settings(settings)  # a bad SAGAFLEET_OIDC_* stops the console before it serves
    policy = SessionPolicy(idle=timedelta(seconds=settings.console_session_idle_seconds),
                           absolute=timedelta(seconds=settings.console_session_max_seconds))
    fleet = build_fleet(settings)
    replica: ReadOnlyEventStore | None = None
    try:
        replica = runtime.log_reads(settings)
        read = ProjectionContext(replica, DefinitionStore(replica)) if replica else None
        live, signin = edge_limits(settings)
        console = console_for(fleet, policy, settings.metrics_window_seconds, read,
                              live_limits=live, signin=signin, sso=sso)
        # The in-process projector follows the log on the replica too (rows on the primary).
        following = replace(console.fresh, log_reads=replica)
        projector = Projector(following).start() if run_projector else None
    except BaseException:
        fleet.close()
        if replica is not None:
            replica.close()
        raise
    return RunningConsole(console, projector, replica)
