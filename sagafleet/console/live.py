"""Live updates: one LISTEN connection per process, fanned out to the pages' event streams.

The store notifies ``eventstore_events`` after its appends commit
(:mod:`events.eventstore.waking`). A page must not refresh on the append itself: the read
models it shows move only when the projector has applied the event. So the hub's thread,
woken by a notification (:class:`events.eventstore.subscription.Notifications`, a dedicated
connection), watches the read models' progress (the stored subscription checkpoints, one
small query) for a short while and
announces ``moved`` to every subscriber each time that progress changes (at most twice a
second: each announcement makes every open page fetch its fragment). A quiet log still
gets looked at every ``poll_s`` (NOTIFY is a wake-up, never the truth).

Subscribers are bounded four ways (:class:`LiveLimits`): per session, per principal, per
tenant and per process. Each stream holds a connection of the HTTP server, so without the
narrower bounds one session opening as many streams as the process allows would leave every
other tenant's pages static. A stream over its session's, principal's or tenant's bound is
refused as that caller's excess (:class:`StreamQuotaExceeded`, 429), one over the process's
as the server's (:class:`TooManySubscribers`, 503); the page's script retries either with
exponential backoff and jitter. Each subscriber holds a queue of one: a slow page misses
nothing but intermediate wake-ups, it refreshes once to the latest state. An announcement
carries no data from the log (every tenant's pages share it): the page fetches its own,
tenant-scoped fragment.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Final

from events import EventStore
from events.eventstore.subscription import Notifications
from saga_core.errors import ErrorKind, SagaError

__all__ = ["HEARTBEAT_S", "MAX_SUBSCRIBERS", "LiveHub", "LiveLimits", "StreamOwner",
           "StreamQuotaExceeded", "TooManySubscribers"]

log = logging.getLogger(__name__)

MAX_SUBSCRIBERS: Final = 200
"""Open event streams per console process (each holds a connection of the HTTP server)."""
STREAMS_PER_TENANT: Final = 100
STREAMS_PER_PRINCIPAL: Final = 20
STREAMS_PER_SESSION: Final = 6
"""A person's tabs share a session; a browser opens about six connections per site over
HTTP/1.1 anyway."""
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
    """Every live-update slot of this console process is taken; the page retries later."""

    kind = ErrorKind.UNAVAILABLE


class StreamQuotaExceeded(SagaError):
    """This session, principal or tenant holds as many live streams as it may (``bound``
    says which); answered 429, the page retries later."""

    kind = ErrorKind.UNAVAILABLE

    def __init__(self, bound: str, limit: int) -> None:
        self.bound = bound
        self.limit = limit
        super().__init__(f"this {bound} already holds {limit} live pages (its limit); close "
                         "some, the others retry by themselves")


@dataclass(frozen=True)
class LiveLimits:
    """How many event streams a session, a principal, a tenant and the process may hold."""

    per_session: int = STREAMS_PER_SESSION
    per_principal: int = STREAMS_PER_PRINCIPAL
    per_tenant: int = STREAMS_PER_TENANT
    per_process: int = MAX_SUBSCRIBERS

    def __post_init__(self) -> None:
        if min(self.per_session, self.per_principal, self.per_tenant, self.per_process) < 1:
            raise ValueError("every live stream limit must be at least 1")


@dataclass(frozen=True)
class StreamOwner:
    """Whose stream it is: the session (by its digest, never its id), principal and tenant."""

    session: str
    tenant: str
    principal: str

    def keys(self) -> Iterator[tuple[str, tuple[str, ...]]]:
        """Each bound this stream counts against, with the key it is counted under."""
        yield "session", (self.session,)
        yield "principal", (self.tenant, self.principal)
        yield "tenant", (self.tenant,)


class LiveHub:
    """Announces read-model progress to the subscribed event streams of this process."""

    def __init__(self, store: EventStore, *, poll_s: float = 2.0,
                 limits: LiveLimits = LiveLimits(),
                 heartbeat_s: float = HEARTBEAT_S) -> None:
        self._store = store
        self.heartbeat_s = heartbeat_s
        """Seconds between the streams' heartbeat comments (each re-checks its session)."""
        self._poll_s = poll_s
        self.limits = limits
        self._queues: set[asyncio.Queue[int]] = set()
        self._held: Counter[tuple[str, tuple[str, ...]]] = Counter()
        """Open streams by (bound, key): what each session, principal and tenant holds."""
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

    def check_room(self, owner: StreamOwner) -> None:
        """Refuse a stream over a bound, asked before it starts: ``StreamQuotaExceeded`` for
        ``owner``'s session, principal or tenant, else ``TooManySubscribers`` for the
        process (so a caller over its own bound is told so even when the process is full)."""
        limits = {"session": self.limits.per_session, "principal": self.limits.per_principal,
                  "tenant": self.limits.per_tenant}
        for bound, key in owner.keys():
            if self._held[(bound, key)] >= limits[bound]:
                raise StreamQuotaExceeded(bound, limits[bound])
        if len(self._queues) >= self.limits.per_process:
            raise TooManySubscribers(
                f"this console already serves {self.limits.per_process} live pages; the page "
                "retries by itself")

    @asynccontextmanager
    async def subscription(self, owner: StreamOwner) -> AsyncIterator[asyncio.Queue[int]]:
        """A queue that receives the number of each announcement (``StreamQuotaExceeded`` or
        ``TooManySubscribers`` when a bound is reached)."""
        queue: asyncio.Queue[int] = asyncio.Queue(maxsize=1)
        with self._lock:
            self.check_room(owner)
            self._queues.add(queue)
            self._held.update(owner.keys())
        try:
            yield queue
        finally:
            with self._lock:
                self._queues.discard(queue)
                self._held.subtract(owner.keys())
                self._held += Counter()  # drops the keys that reached zero

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

