"""An event store opened for reading only: on a PostgreSQL hot standby, or on the primary by
a command that must not write.

Every read of :class:`~events.eventstore.postgres.EventStore` works as on the primary, and the
gap-safe
``read_all`` stays gap-safe on a standby: there ``pg_current_snapshot()`` is built from the
replayed WAL (the standby counts every xid it has seen, and every lower one, as running until
it replays that transaction's end), so nothing below the snapshot's xmin can still commit.
A standby lags: a read that must see a just-committed event goes to the primary instead.

Writes are refused twice: the store's own writing methods raise :class:`ReadOnlyStore`
naming the store's source (the setting that routed reads here), and every session is opened
with ``default_transaction_read_only`` so a write through a borrowed connection fails on the
server too.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final, NoReturn

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from pydantic import BaseModel

from events.errors import ReadOnlyStore
from events.eventstore.model import (
    ANY,
    KEEP_DUE,
    AppendResult,
    DueStream,
    DueTime,
    ExpectedVersion,
    NewEvent,
)
from events.eventstore.postgres import EventStore, UnitOfWork

if TYPE_CHECKING:
    from events.eventstore.registry import EventRegistry
    from events.eventstore.subscription import Subscription

READ_ONLY_OPTION: Final = "-c default_transaction_read_only=on"
"""The server option every session of a read-only store starts with."""

# The lag of a standby: 0 when it has replayed everything it received (an idle primary sends
# no transactions, and the last replay's age would otherwise grow forever); None on a primary.
_REPLAY_LAG = """
SELECT CASE
         WHEN NOT pg_is_in_recovery() THEN NULL
         WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0.0
         ELSE extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8
       END
"""


# libpq's read-write and read-only judge a server by the session's transaction_read_only,
# which READ_ONLY_OPTION sets on every server: read-write would then refuse them all, and
# read-only accept any. The server's role is what the URL asked for: judge by recovery.
_SAME_CHOICE: Final = {"read-write": "primary", "read-only": "standby"}


def read_only_conninfo(url: str) -> str:
    """``url`` with :data:`READ_ONLY_OPTION` added to whatever ``options`` it carries, and a
    multi-host URL's ``target_session_attrs`` of ``read-write`` (``read-only``) made
    ``primary`` (``standby``): the same server, chosen by whether it is in recovery."""
    given = conninfo_to_dict(url)
    options = f"{given['options']} {READ_ONLY_OPTION}" if given.get("options") else READ_ONLY_OPTION
    attrs = given.get("target_session_attrs")
    if isinstance(attrs, str) and attrs in _SAME_CHOICE:
        return make_conninfo(url, options=options, target_session_attrs=_SAME_CHOICE[attrs])
    return make_conninfo(url, options=options)


class ReadOnlyEventStore(EventStore):
    """The event store's reads on a server it must not write to; writes raise
    :class:`ReadOnlyStore` naming ``source`` (e.g. ``SAGAFLEET_READ_DATABASE_URL``)."""

    writes = False
    source: str = "a read-only event store"
    """Where this store reads from, as the operator configured it: named by every refusal."""

    @classmethod
    def open(
        cls,
        url: str,
        *,
        source: str,
        pool_size: int = 4,
        timeout: float = 10.0,
        registry: EventRegistry | None = None,
    ) -> ReadOnlyEventStore:
        """Open a read-only store on ``url``; ``source`` names it in every refusal."""
        store = cls.connect(
            read_only_conninfo(url), pool_size=pool_size, timeout=timeout, notify=False,
            registry=registry,
        )
        store.source = source
        return store

    def replay_lag_seconds(self) -> float | None:
        """How far the standby's replay is behind what it received, in seconds (0: caught
        up); None when the server is not a standby."""
        with self.connection() as conn:
            row = conn.execute(_REPLAY_LAG).fetchone()
        return None if row is None or row[0] is None else float(row[0])

    def _refuse(self, what: str) -> NoReturn:
        raise ReadOnlyStore(
            f"{what} refused: this event store reads from {self.source} and never writes; "
            "appends, claims and checkpoints go to the primary"
        )

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection for reads; a write through it is refused by the server, and
        that refusal names this store's source too."""
        try:
            with super().connection() as conn:
                yield conn
        except ReadOnlyStore as exc:
            self._refuse(f"a write through a borrowed connection ({exc})")

    def append(
        self,
        stream_id: str,
        events: Sequence[NewEvent | BaseModel],
        expected_version: ExpectedVersion = ANY,
        *,
        conn: psycopg.Connection[Any] | None = None,
        due_at: DueTime = KEEP_DUE,
    ) -> AppendResult:
        """Refused: :class:`ReadOnlyStore`."""
        self._refuse(f"append to {stream_id!r}")

    def defer_due(self, items: Sequence[DueStream]) -> int:
        """Refused: :class:`ReadOnlyStore` (due times are the sweeper's, on the primary)."""
        self._refuse("re-timing due streams")

    @contextmanager
    def transaction(
        self, *, pipelined: bool = False, savepoints: bool = True
    ) -> Iterator[UnitOfWork]:
        """Refused: :class:`ReadOnlyStore` (a unit of work writes)."""
        self._refuse("a write transaction")
        yield  # pragma: no cover - unreachable; makes this a generator for @contextmanager

    def migrate(self) -> list[str]:
        """Refused: :class:`ReadOnlyStore` (migrations run on the primary)."""
        self._refuse("migrate")

    def subscription(self, name: str, *, log_from: EventStore | None = None) -> Subscription:
        """Refused: :class:`ReadOnlyStore` (a subscription writes its checkpoint); follow the
        log from here with the primary's ``subscription(name, log_from=this store)``."""
        self._refuse(f"subscription {name!r}")
