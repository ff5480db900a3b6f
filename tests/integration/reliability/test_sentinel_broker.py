"""The fleet on Redis Sentinel: a master, a replica and three Sentinels started here from the
machine's ``redis-server`` (``scripts/failover_run/servers.py``, the failover run's own).
Workers, and the fleet a console or the MCP gateway builds from its settings, get the
``sentinel://…;sentinel://…`` URL and the master's name; the master is SIGKILLed and the
Sentinels promote the replica; nothing is restarted, and sagas keep completing."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fleet_harness import LEASE_S, QUEUE_WAIT_S, WorkerProcesses, settle
from trip_inputs import TRIP_INPUT

from saga_core.contracts import SagaStatus
from sagafleet import embedded
from sagafleet.fleetcli import build_fleet
from sagafleet.settings import Settings
from workers.celery_app import broker_redis

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from failover_run.servers import SENTINEL_MASTER, RedisGroup  # noqa: E402

from sagafleet.example_sagas.registration import register_trip  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture
def group() -> Iterator[RedisGroup]:
    """A Redis master, its replica and three Sentinels; every process stopped afterwards."""
    if embedded.find_redis_on_path() is None:
        pytest.skip("no redis-server on PATH: apt install redis-server")
    with tempfile.TemporaryDirectory(prefix="sf-sentinel-") as root:
        started = RedisGroup(Path(root))
        try:
            started.start()
            yield started
        finally:
            started.stop()


def test_workers_and_clients_carry_on_through_a_sentinel_failover(
    database: str, group: RedisGroup, tmp_path: Path
) -> None:
    # given a worker and a fleet built from settings (as the console and the gateway build
    # theirs) on the Sentinels' URL with the master's name
    sentinel = {"SAGAFLEET_BROKER_URL": group.url,
                "SAGAFLEET_BROKER_SENTINEL_MASTER": SENTINEL_MASTER}
    fleet = build_fleet(Settings.from_env({
        "SAGAFLEET_DATABASE_URL": database, "SAGAFLEET_LEASE_SECONDS": str(LEASE_S),
        "SAGAFLEET_QUEUE_WAIT_SECONDS": str(QUEUE_WAIT_S), **sentinel}))
    workers = WorkerProcesses(database, group.url, tmp_path)
    try:
        register_trip(fleet)
        workers.start(1, extra_env=sentinel)
        client = fleet.client()
        # when a saga runs, the master dies and the Sentinels promote the replica, and
        # another saga is started
        before = client.start("trip", dict(TRIP_INPUT), key="before-failover").saga_id
        assert settle(fleet, [before]) == {before: SagaStatus.COMPLETED}
        old_master = group.master_port()
        group.kill_master()
        after = client.start("trip", dict(TRIP_INPUT), key="after-failover").saga_id
        # then the worker, still the same process, completes it through the new master
        assert settle(fleet, [after]) == {after: SagaStatus.COMPLETED}
        assert [p.poll() for p in workers.procs] == [None]
        master = broker_redis(group.url, SENTINEL_MASTER)
        try:
            assert master.info("server")["tcp_port"] == group.master_port() != old_master
        finally:
            master.close()
    finally:
        workers.stop()
        fleet.close()
