"""The store's connection lender on a real PostgreSQL: kept connections are lent again,
and whatever the pool does for a returned connection still happens."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.pq import TransactionStatus
from psycopg_pool import ConnectionPool

from events import EventStore, NewEvent
from events.errors import StoreUnavailable
from events.eventstore.lending import RETURN_EVERY, ConnectionLender

pytestmark = pytest.mark.integration


@pytest.fixture
def pool(fresh_database: str) -> Iterator[ConnectionPool[Any]]:
    """A pool of one connection at most: any second borrower has to wait for it."""
    with ConnectionPool(fresh_database, min_size=1, max_size=1, timeout=5,
                        kwargs={"autocommit": True}) as opened:
        yield opened


def _requests(pool: ConnectionPool[Any]) -> int:
    return int(pool.get_stats().get("requests_num", 0))


def test_a_returned_connection_is_lent_again_without_asking_the_pool(
    pool: ConnectionPool[Any],
) -> None:
    lender = ConnectionLender(pool)
    first = lender.borrow()
    lender.give_back(first)
    asked = _requests(pool)
    for _ in range(10):
        again = lender.borrow()
        assert again is first
        lender.give_back(again)
    assert _requests(pool) == asked


def test_a_thread_waiting_in_the_pool_gets_the_returned_connection(
    pool: ConnectionPool[Any],
) -> None:
    lender = ConnectionLender(pool)
    held = lender.borrow()
    got: list[psycopg.Connection[Any]] = []
    waiter = threading.Thread(target=lambda: got.append(lender.borrow()))
    waiter.start()
    while not pool.get_stats().get("requests_queued"):  # the waiter is in the pool's queue
        threading.Event().wait(0.01)
    lender.give_back(held)  # not kept: someone waits
    waiter.join(timeout=5)
    assert got == [held]
    lender.give_back(got[0])


def test_a_connection_left_in_a_transaction_goes_back_to_the_pool_rolled_back(
    pool: ConnectionPool[Any],
) -> None:
    lender = ConnectionLender(pool)
    conn = lender.borrow()
    conn.execute("BEGIN")
    conn.execute("CREATE TEMP TABLE left_open (n int)")
    lender.give_back(conn)
    again = lender.borrow()  # from the pool, which rolled the transaction back
    assert again.info.transaction_status == TransactionStatus.IDLE
    assert again.execute("SELECT to_regclass('pg_temp.left_open')").fetchone() == (None,)
    lender.give_back(again)


def test_a_broken_connection_is_replaced_by_the_pool(pool: ConnectionPool[Any]) -> None:
    lender = ConnectionLender(pool)
    conn = lender.borrow()
    conn.close()
    lender.give_back(conn)
    fresh = lender.borrow()
    assert fresh is not conn
    assert fresh.execute("SELECT 1").fetchone() == (1,)
    lender.give_back(fresh)


def test_every_so_many_returns_go_through_the_pool(pool: ConnectionPool[Any]) -> None:
    lender = ConnectionLender(pool)
    conn = lender.borrow()
    lender.give_back(conn)
    asked = _requests(pool)
    for _ in range(RETURN_EVERY * 3):
        lender.give_back(lender.borrow())
    assert _requests(pool) == asked + 3  # each pass through the pool is one more getconn


def test_closing_the_store_closes_its_kept_connections(fresh_database: str) -> None:
    store = EventStore.connect(fresh_database, pool_size=2)
    store.migrate()
    store.append("lending-1", [NewEvent("Noted", {"n": 1})])
    with store.connection() as conn:
        kept = conn
    store.close()
    assert kept.closed
    with pytest.raises(StoreUnavailable):
        store.append("lending-1", [NewEvent("Noted", {"n": 2})])
