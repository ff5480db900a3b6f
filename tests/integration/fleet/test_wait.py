"""SagaClient.wait on the real fleet: it returns once a saga a real worker runs pauses for
an approval, times out on a saga nobody runs, hides another tenant's saga, refuses a bad
timeout, and still notices a change a writer with NOTIFY off made (the slow re-check)."""

from __future__ import annotations

import math
import threading
import time

import psycopg
import pytest
from trip_inputs import TRIP_INPUT

from application.client import MAX_WAIT_SECONDS, InvalidRequest
from events import EventStore
from events.saga_log.postgres import PostgresSagaLog
from events.saga_log.streams import SagaNotFound, saga_registry
from saga_core.contracts import SagaStatus
from saga_core.engine.events import SagaFinished

# Generous bound on waits that must settle (they return as soon as they do).
SETTLE_DEADLINE_S = 120.0
_LISTENERS = ("SELECT count(*) FROM pg_stat_activity "
              "WHERE datname = current_database() AND query = 'LISTEN eventstore_events'")


def test_wait_returns_once_a_running_saga_pauses_for_approval(fleet, workers):
    # given a trip above the approval limit, started while no worker runs yet
    client = fleet.client(tenant="acme")
    saga = client.start("trip", {**TRIP_INPUT, "amount": 250_000}, key="wait-approval")
    assert not client.status(saga.saga_id).pending_approvals
    # when a real worker process picks it up while the agent waits
    workers.start(1)
    waited = client.wait(saga.saga_id, SETTLE_DEADLINE_S)
    # then the wait returns settled at the approval: the saga waits for a person
    assert waited.settled
    assert waited.saga.status == SagaStatus.RUNNING and not waited.saga.terminal
    assert [p["step_id"] for p in waited.saga.pending_approvals] == ["capture_payment"]
    # and waiting again on a paused saga returns at once, settled
    assert client.wait(saga.saga_id, 0).settled


def test_wait_times_out_on_a_saga_nobody_runs(fleet):
    # given a saga started while no worker runs
    client = fleet.client(tenant="acme")
    saga = client.start("trip", TRIP_INPUT, key="wait-timeout")
    # when an agent waits briefly
    waited = client.wait(saga.saga_id, 0.5)
    # then the wait says it timed out, with the saga as it stands
    assert not waited.settled
    assert waited.saga.saga_id == saga.saga_id and waited.saga.status == SagaStatus.RUNNING


def test_another_tenants_saga_is_not_found_and_a_bad_timeout_is_named(fleet):
    acme = fleet.client(tenant="acme")
    saga = acme.start("trip", TRIP_INPUT, key="wait-tenant")
    with pytest.raises(SagaNotFound):
        fleet.client(tenant="globex").wait(saga.saga_id, 1)
    with pytest.raises(SagaNotFound):
        acme.wait("no-such-saga", 1)
    for bad in (-1, MAX_WAIT_SECONDS + 1, math.nan, math.inf, True, "5", None):
        with pytest.raises(InvalidRequest, match="wait timeout"):
            acme.wait(saga.saga_id, bad)


def test_a_change_written_with_notify_off_is_seen_by_the_slow_recheck(fleet, database):
    # given a saga nobody runs, and a writer whose store sends no NOTIFY
    client = fleet.client(tenant="acme")
    saga = client.start("trip", TRIP_INPUT, key="wait-quiet")
    with EventStore.connect(database, pool_size=2, notify=False,
                            registry=saga_registry()) as quiet_store, \
            psycopg.connect(database, autocommit=True) as admin:
        quiet = PostgresSagaLog(quiet_store, fleet.definitions)
        listening_before = admin.execute(_LISTENERS).fetchone()[0]

        def finish_once_the_wait_listens() -> None:
            deadline = time.monotonic() + SETTLE_DEADLINE_S
            while (admin.execute(_LISTENERS).fetchone()[0] <= listening_before
                   and time.monotonic() < deadline):
                time.sleep(0.05)
            version = quiet.load(saga.saga_id).version
            quiet.append(saga.saga_id, "acme", [SagaFinished(
                at=fleet.clock(), state=SagaStatus.COMPENSATED)], version, actor="test")

        writer = threading.Thread(target=finish_once_the_wait_listens)
        writer.start()
        try:
            # when the agent waits; then the re-check sees the saga finished
            waited = client.wait(saga.saga_id, SETTLE_DEADLINE_S)
        finally:
            writer.join()
    assert waited.settled and waited.saga.status == SagaStatus.COMPENSATED
