"""The store's connections: lent from its pool, kept at hand between loans.

An append borrows a connection for one statement. Through ``psycopg_pool`` alone a loan
costs ``getconn`` and ``putconn`` (locks, statistics, logging calls, expiry and state
checks): measured in turns against a raw INSERT, that is ~9% of a single-event append's
client CPU and ~0.02 of its ratio to the raw INSERT (``scripts/bench_store.py``). The
lender keeps each returned connection on a stack instead, and lends it again with one
lock and one pop.

What the pool does stays done:

* **Its size bounds the connections.** A kept connection is still one the pool lent, and
  the lender lends it before asking the pool for another.
* **Nobody waits for a kept connection.** While any thread is waiting in ``getconn``, a
  returned connection goes back to the pool, which hands it to the waiter.
* **Broken or busy connections go back to the pool**, which discards, rolls back or
  replaces them: one that is closed or not idle is never kept.
* **Age and health checks still run.** Every :data:`RETURN_EVERY`-th return goes back to the
  pool (its ``max_lifetime`` expiry, reset and replacement run there), so a kept connection
  is checked at the pool's pace, however busy the store.
* **Closing returns them all** before the pool closes.

What differs: a store that falls quiet keeps its kept connections open (as many as its
busiest moment borrowed at once, at most the pool's size), where the pool alone would close
those above its minimum after ``max_idle``; they are checked again at its next returns.

**A lost server takes every connection with it.** When a returned connection is broken (its
server died, restarted, or failed over) the others almost surely are too: the kept ones go
back to the pool and the pool checks every idle connection at once (``ConnectionPool.check``,
one round trip each, only then), so one failed statement clears them all instead of each
kept connection failing one more caller. A writing store whose server refused a write as
read-only (a demoted or fenced primary) drops every connection (:meth:`ConnectionLender.drop`:
the pool replaces them all), so the next ones reach whichever server accepts writes now.
"""

from __future__ import annotations

import threading
from typing import Any, Final

import psycopg
from psycopg.errors import ReadOnlySqlTransaction
from psycopg.pq import TransactionStatus
from psycopg_pool import ConnectionPool, PoolClosed

from events.errors import ReadOnlyStore

RETURN_EVERY: Final = 256
"""One return in this many goes back to the pool, kept connection or not."""

_IDLE: Final = TransactionStatus.IDLE


class ConnectionLender:
    """Lends ``pool``'s connections (see the module's doc); thread-safe.

    ``drops_read_only``: a loan that ends in a read-only refusal drops its connection (a
    writing store's: its server no longer takes writes); a read-only store's keeps it (the
    refusal is its own session setting)."""

    def __init__(self, pool: ConnectionPool[psycopg.Connection[Any]], *,
                 drops_read_only: bool = False) -> None:
        self.pool = pool
        self.drops_read_only = drops_read_only
        self._kept: list[psycopg.Connection[Any]] = []
        self._lock = threading.Lock()
        self._waiting = 0  # threads inside pool.getconn
        self._returns = 0
        self._closed = False

    def loan(self) -> Loan:
        """A connection for a ``with`` block: borrowed on entry, given back on exit."""
        return Loan(self)

    def borrow(self) -> psycopg.Connection[Any]:
        """A connection: a kept one (the last returned), else one from the pool (waiting
        up to the pool's timeout: ``PoolTimeout``)."""
        with self._lock:
            if self._kept:
                return self._kept.pop()
            self._waiting += 1
        try:
            return self.pool.getconn()
        finally:
            with self._lock:
                self._waiting -= 1

    def give_back(self, conn: psycopg.Connection[Any]) -> None:
        """Return a borrowed connection: kept at hand when it is idle and nobody waits,
        back to the pool otherwise; a broken one makes the pool check every idle one."""
        # A closed or broken connection's status is UNKNOWN, never IDLE.
        if conn.pgconn.transaction_status == _IDLE:
            with self._lock:
                self._returns += 1
                if not (self._waiting or self._closed or self._returns % RETURN_EVERY == 0):
                    self._kept.append(conn)
                    return
        lost = conn.broken
        self.pool.putconn(conn)
        if lost:
            self._check_all()

    def drop(self, conn: psycopg.Connection[Any]) -> None:
        """Return a borrowed connection that must not serve again (its server refuses what
        this store must do there), and with it every other one to that server: the pool
        replaces them all (``drain``: the idle ones now, those lent out as they return)."""
        conn.close()
        with self._lock:
            kept, self._kept = self._kept, []
        for held in [*kept, conn]:
            self.pool.putconn(held)
        try:
            self.pool.drain()
        except PoolClosed:
            pass  # closing meanwhile: nothing left to replace

    def _check_all(self) -> None:
        """Hand the kept connections back and have the pool test every idle one, discarding
        (and replacing) those whose server is gone."""
        with self._lock:
            kept, self._kept = self._kept, []
        for held in kept:
            self.pool.putconn(held)
        try:
            self.pool.check()
        except PoolClosed:
            pass  # closing meanwhile: nothing left to check

    def close(self) -> None:
        """Give every kept connection back to the pool (before it closes); later returns go
        straight to the pool."""
        with self._lock:
            self._closed = True
            kept, self._kept = self._kept, []
        for conn in kept:
            self.pool.putconn(conn)


class Loan:
    """One loan of a :class:`ConnectionLender`'s connection, as a context manager (a class:
    an append takes one, and a generator's setup costs several times a method call's)."""

    __slots__ = ("conn", "lender")

    def __init__(self, lender: ConnectionLender) -> None:
        self.lender = lender

    def __enter__(self) -> psycopg.Connection[Any]:
        self.conn = self.lender.borrow()
        return self.conn

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if exc is not None and self.lender.drops_read_only and refused_as_read_only(exc):
            self.lender.drop(self.conn)
        else:
            self.lender.give_back(self.conn)


def refused_as_read_only(exc: BaseException) -> bool:
    """Whether ``exc`` is the server refusing a write because the session is read-only (a
    hot standby, a fenced primary), as the driver raised it or as the store translated it."""
    return isinstance(exc, ReadOnlySqlTransaction | ReadOnlyStore)
