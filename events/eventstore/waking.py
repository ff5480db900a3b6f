"""Wake-ups sent after commits: one NOTIFY for every append committed since the last one.

A subscriber learns of appends by ``LISTEN`` (:mod:`events.eventstore.subscription`); polling
is the truth, a NOTIFY only says "look again". The plain way to send it is inside the
append's own transaction (``pg_notify`` in the chained insert). It costs the commit dearly:
PostgreSQL takes a lock on the notification queue before a notifying transaction commits and
holds it until the commit is flushed, so commits that notified take turns instead of sharing
WAL flushes (``scripts/commit_ceiling.py``: on 16 connections the plain commits per second
fall to a fraction with a NOTIFY in each transaction). Past two workers the fleet stopped
growing there.

:class:`AfterCommitNotifier` sends the NOTIFY in a transaction of its own instead, on a
connection of its own, from a thread of its own, once the appends' transactions committed:

* **Nothing is missed.** A wake-up is asked for after the append committed
  (:meth:`AfterCommitNotifier.wake`), and the NOTIFY goes out after that, so a subscriber it
  wakes reads the append. Appends asked for while one NOTIFY is on its way get one more after
  it: one wake-up covers every append committed before it was sent.
* **The data commits share flushes again.** The notifying transaction writes nothing else; it
  commits without waiting for a WAL flush (PostgreSQL flushes asynchronously a transaction that
  wrote no WAL of its own), so the queue's lock is held for a moment, not for a flush.
* **Coalesced.** However many appends a process commits, it sends at most one NOTIFY at a
  time and one every :data:`INTERVAL_S`: a wake-up is announced at once after a quiet spell,
  and at most that much later under load (a subscriber reads a batch per wake-up anyway).
  The appends no longer carry a NOTIFY each, so a busy process costs the server less.
* **A wake-up never fails an append.** The notifier's errors (a lost server, a full
  notification queue behind a stuck listener) are logged and its connection replaced; the
  appends went through, and subscribers find them at their next poll. In-transaction
  notifies fail the append itself when the queue is full.
* **Forks.** The thread and connection belong to the process that started them; a forked
  child (Celery's prefork pool) starts its own at its first wake-up.
* **Exits.** A process that ends without closing its store (a one-shot command) still sends
  the wake-up it owes: an ``atexit`` hook closes every notifier still open.

The plain path stays: ``EventStore(notify_in_commit=True)`` notifies inside each append's
transaction, and an append on a caller's connection (``append(conn=...)``, whose commit the
store does not see) always does.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import weakref
from typing import Any, Final

import psycopg

from events.eventstore.driver import configure_connection

log = logging.getLogger(__name__)

NOTIFY_CHANNEL: Final = "eventstore_events"
"""The channel the store's wake-ups go to, and its subscribers ``LISTEN`` on."""

NOTIFY_CALL: Final = f"pg_notify('{NOTIFY_CHANNEL}', '')"
"""One wake-up, as SQL (the plain path puts it in the append's own statement)."""

NOTIFY_STATEMENT: Final = f"SELECT {NOTIFY_CALL}".encode()
"""The wake-up the notifier sends after the commits."""

INTERVAL_S: Final = 0.02
"""The least time between two NOTIFYs of one process: the first append after a quiet spell
is announced at once, those that follow within this time by one NOTIFY at its end."""

RETRY_AFTER_S: Final = 1.0
"""How long the notifier waits after a failed NOTIFY before it connects again."""

CLOSE_WAIT_S: Final = 5.0
"""How long :meth:`AfterCommitNotifier.close` waits for a NOTIFY on its way."""


_open: weakref.WeakSet[AfterCommitNotifier] = weakref.WeakSet()


@atexit.register
def _close_open_notifiers() -> None:
    """At the interpreter's exit, send the wake-ups still owed (see the module's doc)."""
    for notifier in list(_open):
        notifier.close()


class AfterCommitNotifier:
    """Sends one NOTIFY after the commits it is told of (see the module's doc); thread-safe.

    ``conninfo``: the store's server; the notifier opens one autocommit connection to it,
    at its first wake-up. ``interval_s``: the least time between two NOTIFYs."""

    def __init__(self, conninfo: str, *, interval_s: float = INTERVAL_S) -> None:
        self._conninfo = conninfo
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._pid = 0
        self._due = False
        self._sending = False
        self._closed = False
        self._wanted = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: psycopg.Connection[Any] | None = None
        self.sent = 0
        """NOTIFYs this process sent so far (for tests and benchmarks)."""

    def wake(self) -> None:
        """Ask for a NOTIFY: an append committed. Returns at once."""
        if self._pid != os.getpid():
            self._start()
        if not self._due:  # else one is owed: it goes out after this commit
            self._due = True
            self._wanted.set()

    def _start(self) -> None:
        with self._lock:
            if self._closed or self._pid == os.getpid():
                return
            # A fork's copies of the parent's thread, events and connection are not its own.
            self._conn = None
            self._due = False
            self._wanted, self._stop = threading.Event(), threading.Event()
            self.sent = 0
            self._thread = threading.Thread(target=self._run, name="eventstore-notifier",
                                            daemon=True)
            self._pid = os.getpid()
            self._thread.start()
            _open.add(self)

    def _run(self) -> None:
        wanted, stop = self._wanted, self._stop
        while not stop.is_set():
            wanted.wait()
            wanted.clear()
            if not self._due:
                continue
            self._sending = True
            self._due = False
            try:
                self._send()
            except psycopg.Error as exc:
                log.warning("eventstore wake-up not sent (subscribers find the appends at "
                            "their next poll): %s", exc)
                self._disconnect()
                self._due = True  # the appends since still want one
                pause = RETRY_AFTER_S
            else:
                pause = self.interval_s
            finally:
                self._sending = False
            stop.wait(pause)
            if self._due:  # a failed one is still owed
                wanted.set()
        self._disconnect()

    def settled(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds until every wake-up asked for so far went out (or
        failed); True if none is left (``EventStore.wake_ups_sent``)."""
        deadline = time.monotonic() + timeout
        while self._due or self._sending:
            if self._pid != os.getpid() or time.monotonic() >= deadline:
                return False
            time.sleep(0.002)
        return True

    def _send(self) -> None:
        conn = self._conn
        if conn is None or conn.closed:
            conn = psycopg.connect(self._conninfo, autocommit=True)
            configure_connection(conn)
            self._conn = conn
        conn.execute(NOTIFY_STATEMENT)
        self.sent += 1

    def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except psycopg.Error:  # already lost with its server
                pass

    def close(self) -> None:
        """Send the NOTIFY still asked for, then stop the thread and close its connection."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread if self._pid == os.getpid() else None
        if thread is None:
            return
        self._stop.set()
        self._wanted.set()
        thread.join(CLOSE_WAIT_S)
