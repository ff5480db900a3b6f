"""Building a Fleet from Settings for the commands that need one."""

from __future__ import annotations

from dataclasses import replace

from saga_core.examples import trip_tool_catalogue
from sagafleet import runtime
from sagafleet.migrate import migrate_all
from sagafleet.settings import Settings
from workers.fleet import Fleet, FleetConfig
from workers.tools import load_tool_set


def build_fleet(
    settings: Settings,
    *,
    worker_id: str | None = None,
    migrate: bool = True,
    tools: str | None = None,
) -> Fleet:
    """A fleet on the configured (or embedded) servers, schema migrated.

    ``tools`` (else ``SAGAFLEET_TOOLS``) names the tool set, as ``package.module:attribute``;
    with none, the fleet runs no tool and checks definitions against the shipped trip
    catalogue (a worker refuses to start without a tool set before it gets here).
    """
    ends = runtime.endpoints(settings, need_broker=True)
    assert ends.broker_url is not None
    if migrate:
        migrate_all(ends.database_url)
    config = FleetConfig(
        database_url=ends.database_url,
        broker_url=ends.broker_url,
        lease_s=settings.lease_seconds,
        queue_wait_s=settings.queue_wait_seconds,
    )
    if worker_id:
        config = replace(config, worker_id=worker_id)
    reference = tools or settings.tools
    if reference is None:
        return Fleet(config, trip_tool_catalogue())
    return Fleet(config, load_tool_set(reference))
