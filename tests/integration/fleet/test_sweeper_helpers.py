"""A sweeper's backlog spread over helper processes (issue 35, recovery in seconds), on real
PostgreSQL and Redis: the helpers sweep what the sweeper alone would (the same re-publishes,
deferrals and rows), a dead helper's chunk is swept by the sweeper itself, and no process is
left behind."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta

import pytest
from fleet_harness import SandboxFleet, build_fleet
from trip_inputs import TRIP_INPUT

from application.orchestrator import utc_now
from sagafleet.example_sagas.registration import register_trip
from workers.celery_app import QUEUE_STEPS, broker_redis
from workers.sweeper import Sweeper, SweeperMisconfigured

QUEUE_WAIT_S = 1.0


@pytest.fixture
def fleet(database: str, broker: str) -> Iterator[SandboxFleet]:
    """A fleet on the machine's clock whose queued messages are overdue after 1 s."""
    base = build_fleet(database, broker)
    base.close()
    opened = SandboxFleet(replace(base.config, queue_wait_s=QUEUE_WAIT_S, republish_max_s=30,
                                  sweep_full_every_s=0))
    register_trip(opened)
    yield opened
    opened.close()


def _lost(fleet: SandboxFleet, count: int, prefix: str) -> set[str]:
    """Trips whose first messages no worker takes, overdue once this returns."""
    started = {str(fleet.client().start("trip", TRIP_INPUT, key=f"{prefix}-{n}").saga_id)
               for n in range(count)}
    time.sleep(QUEUE_WAIT_S * 2)
    broker_redis(fleet.config.broker_url).delete(QUEUE_STEPS)  # the broker lost them
    return started


@pytest.mark.parametrize("helpers", [0, 2])
def test_helpers_sweep_a_backlog_as_the_sweeper_alone_does(
        fleet: SandboxFleet, helpers: int) -> None:
    queue = broker_redis(fleet.config.broker_url)
    # given ten lost trips, swept in chunks of four by the sweeper alone or by two helpers
    lost = _lost(fleet, 10, "lost")
    sweeper = Sweeper(fleet, chunk=4, helpers=helpers)
    try:
        if helpers:
            sweeper.start_helpers()
            assert len(multiprocessing.active_children()) == helpers
        report = sweeper.sweep()
        # then either way every saga was read, its two holds re-published, it was re-timed
        assert (report.active, report.republished, report.advanced, report.deferred,
                report.errors) == (10, 20, 0, 10, [])
        assert queue.llen(QUEUE_STEPS) == 20
        with fleet.store.connection() as conn:
            rows = conn.execute("SELECT saga_id, count(*) FROM fleet.redeliveries"
                                " GROUP BY saga_id").fetchall()
        assert dict(rows) == dict.fromkeys(lost, 2)
    finally:
        sweeper.close()
    # and closing stops every helper
    assert multiprocessing.active_children() == []


def test_a_dead_helpers_chunk_is_swept_by_the_sweeper_and_the_pool_started_again(
        fleet: SandboxFleet) -> None:
    lost = _lost(fleet, 8, "dies")
    sweeper = Sweeper(fleet, chunk=2, helpers=2)
    try:
        # given the helpers are up, and then killed (an OOM kill, an operator's kill -9)
        sweeper.start_helpers()
        assert len(multiprocessing.active_children()) == 2
        for pid in [process.pid for process in multiprocessing.active_children()]:
            os.kill(pid, signal.SIGKILL)
        # when a pass runs, then it reports the lost chunks and sweeps them itself
        first = sweeper.sweep()
        assert first.errors and all("BrokenProcessPool" in error for error in first.errors)
        assert (first.active, first.republished, first.deferred) == (8, 16, 8)
        with fleet.store.connection() as conn:
            rows = conn.execute("SELECT saga_id, count(*) FROM fleet.redeliveries"
                                " GROUP BY saga_id").fetchall()
        assert dict(rows) == dict.fromkeys(lost, 2)
        # and the helpers are started again: the next backlog is theirs, without errors
        more = _lost(fleet, 4, "after")
        again = sweeper.sweep()
        assert again.errors == [] and again.active >= len(more)
        assert len(multiprocessing.active_children()) == 2
        with fleet.store.connection() as conn:
            swept = {row[0] for row in conn.execute(
                "SELECT saga_id FROM fleet.redeliveries").fetchall()}
        assert more <= swept
    finally:
        sweeper.close()
    assert multiprocessing.active_children() == []


def test_helpers_need_the_machines_clock(database: str, broker: str) -> None:
    base = build_fleet(database, broker)
    base.close()
    shifted = SandboxFleet(base.config, clock=lambda: utc_now() + timedelta(hours=1))
    try:
        with pytest.raises(SweeperMisconfigured, match="machine's clock"):
            Sweeper(shifted, helpers=2)
        assert Sweeper(shifted, helpers=0).helpers == 0
    finally:
        shifted.close()
