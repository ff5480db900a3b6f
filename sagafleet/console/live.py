"""Live updates: one LISTEN connection per process, fanned out to the pages' event streams.

The store's appends ``pg_notify('eventstore_events')`` (:mod:`events.appending`). A page must
not refresh on the append itself: the read models it shows move only when the projector has
applied the event. So the hub's thread, woken by a notification
(:class:`events.subscription.Notifications`, a dedicated connection), watches the read models'
progress (the stored subscription checkpoints, one small query) for a short while and
announces ``moved`` to every subscriber each time that progress changes (at most twice a
second: each announcement makes every open page fetch its fragment). A quiet log still
gets looked at every ``poll_s`` (NOTIFY is a wake-up, never the truth).

Subscribers are bounded (:data:`MAX_SUBSCRIBERS`; one more is refused, 503) and each holds a
queue of one: a slow page misses nothing but intermediate wake-ups, it refreshes once to the
latest state. An announcement carries no data from the log (every tenant's pages share it):
the page fetches its own, tenant-scoped fragment.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

from events import EventStore
from events.subscription import Notifications
from saga_core.errors import ErrorKind, SagaError

__all__ = ["HEARTBEAT_S", "MAX_SUBSCRIBERS", "LiveHub", "TooManySubscribers"]

log = logging.getLogger(__name__)

MAX_SUBSCRIBERS: Final = 200
"""Open event streams per console process (each holds a connection of the HTTP server)."""
HEARTBEAT_S: Final = 15.0
"""A comment line this often keeps proxies from closing a quiet stream."""
SETTLE_S: Final = 3.0
"""How long after a wake-up the hub keeps watching the read models catch up."""
WATCH_EVERY_S: Final = 0.1
ANNOUNCE_EVERY_S: Final = 0.5
"""At most two announcements a second: a busy log must not make every open page fetch its
fragment ten times a second."""

_PROGRESS = ("SELECT coalesce(string_agg(name || ':' || last_position::text, ','"
             " ORDER BY name), '') FROM eventstore.checkpoints")


class TooManySubscribers(SagaError):
    """Every live-update slot of this console process is taken; the page stays static."""

    kind = ErrorKind.UNAVAILABLE


class LiveHub:
    """Announces read-model progress to the subscribed event streams of this process."""

    def __init__(self, store: EventStore, *, poll_s: float = 2.0,
                 max_subscribers: int = MAX_SUBSCRIBERS,
                 heartbeat_s: float = HEARTBEAT_S) -> None:
        self._store = store
        self.heartbeat_s = heartbeat_s
        """Seconds between the streams' heartbeat comments (each re-checks its session)."""
        self._poll_s = poll_s
        self._max = max_subscribers
        self._queues: set[asyncio.Queue[int]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.announced = 0
        self._last_announced = 0.0
        """How many announcements were made (a counter for tests and diagnostics)."""

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the listening thread; announcements are delivered on ``loop``."""
        self._loop = loop
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="console-live", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the listening thread (its connection closes with it)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    @property
    def subscribers(self) -> int:
        """How many event streams are open now."""
        return len(self._queues)

    def check_room(self) -> None:
        """``TooManySubscribers`` when every slot is taken (asked before a stream starts)."""
        if len(self._queues) >= self._max:
            raise TooManySubscribers(
                f"this console already serves {self._max} live pages; reload later")

    @asynccontextmanager
    async def subscription(self) -> AsyncIterator[asyncio.Queue[int]]:
        """A queue that receives the number of each announcement (``TooManySubscribers`` when
        the bound is reached)."""
        queue: asyncio.Queue[int] = asyncio.Queue(maxsize=1)
        with self._lock:
            self.check_room()
            self._queues.add(queue)
        try:
            yield queue
        finally:
            with self._lock:
                self._queues.discard(queue)

    # -- the listening thread ---------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._listen()
            except Exception as exc:  # noqa: BLE001 - the database went away: wait, listen again
                log.warning("console live updates: %s; retrying", exc)
                self._stop.wait(self._poll_s)

    def _listen(self) -> None:
        with Notifications(self._store) as notifications:
            seen = self._progress()
            while not self._stop.is_set():
                notified = notifications.wait(self._poll_s)
                if notified:
                    seen = self._settle(seen)
                else:  # a quiet interval: look once anyway
                    now = self._progress()
                    if now != seen:
                        seen = now
                        self._announce()

    def _settle(self, seen: str) -> str:
        """Watch the read models for SETTLE_S after a wake-up; announce their changes, at
        most one per ANNOUNCE_EVERY_S (every open page fetches its fragment on each)."""
        quiet = 0.0
        while quiet < SETTLE_S and not self._stop.is_set():
            now = self._progress()
            if now != seen and time.monotonic() - self._last_announced >= ANNOUNCE_EVERY_S:
                seen = now
                self._announce()
                quiet = 0.0  # still moving: keep watching
            self._stop.wait(WATCH_EVERY_S)
            quiet += WATCH_EVERY_S
        return seen

    def _progress(self) -> str:
        with self._store.connection() as conn:
            row = conn.execute(_PROGRESS).fetchone()
        return str(row[0]) if row else ""

    def _announce(self) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        self.announced += 1
        self._last_announced = time.monotonic()
        number = self.announced
        try:
            loop.call_soon_threadsafe(self._deliver, number)
        except RuntimeError:  # the loop closed meanwhile (shutdown)
            pass

    def _deliver(self, number: int) -> None:
        """On the loop: put the announcement in every queue, replacing an unread one."""
        for queue in list(self._queues):
            _put_latest(queue, number)


def _put_latest(queue: asyncio.Queue[int], number: int) -> None:
    if queue.full():
        try:
            queue.get_nowait()
        except asyncio.QueueEmpty:
            pass
    queue.put_nowait(number)

