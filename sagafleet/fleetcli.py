"""Building a Fleet from Settings for the commands that need one."""

from __future__ import annotations

from dataclasses import replace

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
    """A fleet on the configured (or embedded) servers, schema migrated, trip registered.

    ``tools`` (else ``SAGAFLEET_TOOLS``) names the tool set to run instead of the trip
    sandbox, as ``package.module:attribute``.
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
        tool_latency_s=settings.tool_latency_seconds,
    )
    if worker_id:
        config = replace(config, worker_id=worker_id)
    reference = tools or settings.tools
    if reference is None:
        return Fleet(config)
    tool_set = load_tool_set(reference)
    return Fleet(config, tools=tool_set.registry, catalogue=tool_set.catalogue)
