"""Resolve where the database and broker are: configured URLs, or the embedded servers.

Services, ``db migrate``, ``embedded start`` and the demo start an embedded server that is
not running (:func:`database_url`, :func:`broker_url`); a command that only reads never
does (:func:`existing_database_url`): on a machine where the embedded database is not
running, or was never made, it says so in one line with a named exit code.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from events.eventstore.read_only import ReadOnlyEventStore
from events.saga_log.streams import saga_registry
from projections import ProjectionContext
from saga_core.errors import ErrorKind, SagaError
from sagafleet import embedded, embedded_state
from sagafleet.migrate import migrate_all, require_migrated
from sagafleet.settings import Settings, reveal


class NoDatabase(SagaError):
    """No database is configured and none was ever made under SAGAFLEET_HOME."""

    # Like an unmigrated database: the operator fixes how the command is run (exit 2).
    kind = ErrorKind.MISCONFIGURED


class DatabaseNotRunning(SagaError):
    """The embedded database exists but is not running, and a read command starts none."""

    kind = ErrorKind.UNAVAILABLE


@dataclass(frozen=True)
class Endpoints:
    """The database and broker URLs a command uses, and whether each is embedded."""

    database_url: str
    broker_url: str | None
    embedded_database: bool
    embedded_broker: bool


def database_url(settings: Settings) -> str:
    """The configured database URL, or the embedded PostgreSQL's (started if needed)."""
    configured = reveal(settings.database_url)
    if configured is not None:
        return configured
    return embedded.start_postgres(settings.home).url


def existing_database_url(settings: Settings) -> str:
    """The configured database URL, or the embedded PostgreSQL's if it already runs; never
    starts a server (:class:`NoDatabase`, exit 2; :class:`DatabaseNotRunning`, exit 6)."""
    configured = reveal(settings.database_url)
    if configured is not None:
        return configured
    home = settings.home.resolve()
    if embedded_state.postgres_running(home):
        return embedded.start_postgres(home).url  # it runs: this only reads its address
    if embedded_state.postgres_exists(home):
        raise DatabaseNotRunning(
            f"the embedded PostgreSQL under {home} is not running: start it with `sagafleet "
            "embedded start` (the demo stops the servers it started unless --keep-servers)")
    raise NoDatabase(
        f"no database: SAGAFLEET_DATABASE_URL is unset and there is no embedded one under "
        f"{home}; create it with `sagafleet db migrate` (or run `sagafleet demo "
        "--keep-servers`), or set SAGAFLEET_DATABASE_URL")


def quiet_broker_url(settings: Settings) -> str:
    """The configured broker URL, or the embedded Redis's address without starting it: for
    a command that reads and waits but publishes nothing (``wait``)."""
    configured = reveal(settings.broker_url)
    return configured if configured is not None else embedded_state.redis_url(settings.home)


def broker_url(settings: Settings) -> str:
    """The configured broker URL, or the embedded Redis's (started if needed)."""
    configured = reveal(settings.broker_url)
    if configured is not None:
        return configured
    return embedded.start_redis(settings.home).url


def endpoints(settings: Settings, *, need_broker: bool) -> Endpoints:
    """Resolve both endpoints at once, starting only what the command needs."""
    return Endpoints(
        database_url=database_url(settings),
        broker_url=broker_url(settings) if need_broker else None,
        embedded_database=settings.embedded_database,
        embedded_broker=settings.embedded_broker,
    )


READ_DATABASE_SETTING = "SAGAFLEET_READ_DATABASE_URL"
"""The setting that routes reads to a hot standby; every refused write names it."""


def read_database_url(settings: Settings, primary: str) -> tuple[str, str]:
    """Where reads that may lag go, and the setting that chose it: the hot standby when
    ``SAGAFLEET_READ_DATABASE_URL`` is set, else the ``primary`` URL."""
    replica = reveal(settings.read_database_url)
    if replica is not None:
        return replica, READ_DATABASE_SETTING
    return primary, f"the primary opened read-only ({READ_DATABASE_SETTING} is unset)"


@contextmanager
def read_side(settings: Settings) -> Iterator[ProjectionContext]:
    """The log and read models of an already migrated database, for commands that only read
    and may lag: on the hot standby when ``SAGAFLEET_READ_DATABASE_URL`` is set, read-only
    either way (a write raises ReadOnlyStore). No migration, no broker, no server started."""
    url, source = read_database_url(settings, existing_database_url(settings))
    with ProjectionContext.connect_read_only(url, source=source) as ctx:
        require_migrated(ctx.store)
        yield ctx


@contextmanager
def primary_side(settings: Settings) -> Iterator[ProjectionContext]:
    """The log and read models of an already migrated primary, for commands that write
    (rebuild, anchor, principals) and for reads that must see what was just committed
    (read-your-writes, e.g. ``status --fresh``): never the standby."""
    with ProjectionContext.connect(existing_database_url(settings)) as ctx:
        require_migrated(ctx.store)
        yield ctx


@contextmanager
def projector_side(settings: Settings) -> Iterator[ProjectionContext]:
    """The log and read models for a long-running projections service: migrated at start-up.
    With ``SAGAFLEET_READ_DATABASE_URL`` the log's pages come from the standby, while each
    batch's rows and checkpoint commit together on the primary (anchors too go there)."""
    url = database_url(settings)
    migrate_all(url)
    with ProjectionContext.connect(url, log_reads=log_reads(settings)) as ctx:
        yield ctx


def log_reads(settings: Settings) -> ReadOnlyEventStore | None:
    """The standby's read-only store a projector follows the log from, and the console
    reads from (None: no standby; the primary's store serves both)."""
    replica = reveal(settings.read_database_url)
    if replica is None:
        return None
    return ReadOnlyEventStore.open(replica, source=READ_DATABASE_SETTING,
                                   registry=saga_registry())
