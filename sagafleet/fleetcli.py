"""Building a Fleet from Settings: migrated at a service's start-up, checked for a command."""

from __future__ import annotations

from dataclasses import replace

from sagafleet import runtime
from sagafleet.example_sagas import trip_tool_catalogue
from sagafleet.migrate import migrate_all, require_migrated
from sagafleet.settings import Settings
from workers.fleet import Fleet, FleetConfig
from workers.tools import load_tool_set


def build_fleet(
    settings: Settings, *, worker_id: str | None = None, tools: str | None = None
) -> Fleet:
    """A long-running service's fleet (worker, sweeper, MCP server): migrates the schema first.

    ``tools`` (else ``SAGAFLEET_TOOLS``) names the tool set, as ``package.module:attribute``;
    with none, the fleet runs no tool and checks definitions against the shipped trip
    catalogue (a worker refuses to start without a tool set before it gets here).
    """
    database_url = runtime.database_url(settings)
    migrate_all(database_url)
    return _fleet(settings, database_url, runtime.broker_url(settings), worker_id=worker_id,
                  tools=tools)


def command_fleet(settings: Settings) -> Fleet:
    """A one-shot command's fleet (start, approve, resolve, ...): never migrates; a database
    that is behind raises DatabaseNotMigrated."""
    return _checked(_fleet(settings, runtime.database_url(settings), runtime.broker_url(settings)))


def watching_fleet(settings: Settings) -> Fleet:
    """A fleet for a command that reads and waits but publishes nothing (``wait``): never
    migrates and starts no server — the embedded database must already run, and the
    embedded broker is only named, never started."""
    return _checked(_fleet(settings, runtime.existing_database_url(settings),
                           runtime.quiet_broker_url(settings)))


def _checked(fleet: Fleet) -> Fleet:
    """``fleet`` if its database is migrated; else closed, and DatabaseNotMigrated."""
    try:
        require_migrated(fleet.store)
    except BaseException:
        fleet.close()
        raise
    return fleet


def _fleet(
    settings: Settings, database_url: str, broker_url: str, *, worker_id: str | None = None,
    tools: str | None = None,
) -> Fleet:
    config = FleetConfig(
        database_url=database_url,
        broker_url=broker_url,
        broker_sentinel_master=settings.broker_sentinel_master,
        lease_s=settings.lease_seconds,
        queue_wait_s=settings.queue_wait_seconds,
        republish_max_s=settings.republish_max_s,
        sweep_full_every_s=settings.sweep_full_every_s,
        sweeper_processes=settings.sweeper_processes,
        visibility_timeout_s=settings.visibility_timeout_seconds,
        remote_control=settings.celery_remote_control,
        task_events=settings.celery_task_events,
        snapshot_every=settings.snapshot_every,
    )
    if worker_id:
        config = replace(config, worker_id=worker_id)
    reference = tools or settings.tools
    if reference is None:
        return Fleet(config, trip_tool_catalogue())
    return Fleet(config, load_tool_set(reference))
