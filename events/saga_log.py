"""The ports the saga engine reads and writes through, and nothing else.

Three contracts, each with a PostgreSQL implementation (``events.sagas.PostgresSagaLog``,
``events.definitions.DefinitionStore``, ``workers.secrets.SecretVault``) and an in-memory
one (``events.memory``) that ``sagafleet.testing`` runs users' tests on. One contract test
suite (``tests/contract``) runs against both, so the in-memory log is a product held to the
same promises, not a mock:

* **SagaLog** — load one saga (from its snapshot, events/snapshots.py, when one checks
  out), load its whole history, load many, drop every snapshot, append events at an expected version
  (optimistic: ``ConcurrencyError`` when another writer got there first; idempotent by
  event id), optionally inside a :class:`Unit` of work; watch for appends
  (:class:`Changes`, a wake-up, never the truth). Each saga has a due time, set by the
  append that moves it (kept unless given) or by :meth:`SagaLog.defer` while the saga is
  still at a version: :meth:`SagaLog.due` finds the sagas due by a time, without reading
  the others.
* **Definitions** — register a validated definition for a tenant by ``(name, version,
  hash)``, or into the shared, read-only built-in set every tenant sees; load it by hash
  (any owner's: a saga's ``SagaStarted`` names it) or, for a tenant, by name (highest
  version when none is given). A tenant never sees another tenant's definitions, and may
  not register a name the shared set holds (:class:`~events.definitions.SharedDefinitionName`).
* **GateWindows** — a tenant window's ledger of reservations (``saga_core.totals``): reserve
  what claiming an operation adds, inside the claim's unit, only if the window's total in
  its period stays within the limit (or a person approved going over it), atomically
  against every other saga of the tenant; release reservations of operations that turned
  out to have had no effect; read a window's total.
* **Secrets** — keep a saga's secret inputs (in the unit that starts it), reveal them into
  a tool call's arguments, tell what a saga keeps (so it can be looked for by value), purge
  them when the saga ends; hold a value deposited ahead of
  a start under a single-use ref (``events.secret_inputs``), redeem it in the unit that
  starts the saga, forget refs that expired.

A :class:`Unit` is opaque to callers: whatever is written with it commits together on a
clean exit of ``SagaLog.unit_of_work()`` and not at all on an exception. A conflict may
surface at an append inside the unit or, when another writer committed the same stream
first, as the block ends (the in-memory log; PostgreSQL makes that writer wait instead):
either way it is ``ConcurrencyError`` and nothing of the unit is written. Each
implementation refuses another's unit (``InvalidArgument``, see :func:`unit_of`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

from events.errors import InvalidArgument
from events.model import KEEP_DUE, AppendResult, DueTime, ExpectedVersion, Position
from saga_core import SagaDefinition
from saga_core.errors import SagaError
from saga_core.events import SagaEvent
from saga_core.totals import WindowCall, WindowTotal

if TYPE_CHECKING:
    from events.definitions import DefinitionRecord
    from events.sagas import LoadedSaga, SagaHistory


class Unit(Protocol):
    """One open unit of work; appends and side writes made with it commit together."""


U = TypeVar("U")


def unit_of(kind: type[U], unit: Unit) -> U:
    """``unit`` as the concrete unit an implementation writes with, or InvalidArgument for
    another implementation's unit (its writes would not commit together with this one's)."""
    if not isinstance(unit, kind):
        raise InvalidArgument(
            f"a {type(unit).__name__} is not a unit of work here: pass the unit that "
            f"this log's unit_of_work() opened (a {kind.__name__})"
        )
    return unit


class DueSaga(NamedTuple):
    """A saga's due time at a stream version: what :meth:`SagaLog.due` finds, and what
    :meth:`SagaLog.defer` sets (None clears it) while the saga is still at that version."""

    saga_id: str
    version: int
    due_at: datetime | None


class Changes(Protocol):
    """A wake-up on appends to the log, opened before the first look (so none is missed)."""

    def wait(self, timeout: float) -> bool:
        """Block until something was appended or ``timeout`` seconds pass; True if woken.

        A wake-up only says "look again" (it may be another saga's append), and silence
        proves nothing (PostgreSQL's NOTIFY can be off): callers re-check on a slow
        interval too.
        """
        ...


class SagaLog(Protocol):
    """Where sagas live: fold one or many from their streams, append at a version."""

    def load(
        self, saga_id: str, *, tenant: str | None = None, at: Position | None = None
    ) -> LoadedSaga:
        """Fold a saga (up to ``at``); ``SagaNotFound`` if absent or another tenant's."""
        ...

    def load_history(
        self, saga_id: str, *, tenant: str | None = None, at: Position | None = None
    ) -> SagaHistory:
        """Fold every event of a saga (up to ``at``), keeping them: what a trace, an audit
        or a repeated click's check reads; ``SagaNotFound`` as :meth:`load`."""
        ...

    def load_many(self, saga_ids: Sequence[str]) -> dict[str, LoadedSaga | SagaError]:
        """Each id to its folded saga, or to the error loading it alone would raise."""
        ...

    def drop_snapshots(self) -> int:
        """Forget every snapshot of saga state (never the truth: loads fold whole streams
        until new ones are written); return how many there were."""
        ...

    def append(
        self,
        saga_id: str,
        tenant: str,
        events: Sequence[SagaEvent],
        expected_version: ExpectedVersion,
        *,
        actor: str | None = None,
        unit: Unit | None = None,
        trace_id: str | None = None,
        due_at: DueTime = KEEP_DUE,
    ) -> AppendResult:
        """Append at ``expected_version`` (``ConcurrencyError`` if the stream moved);
        ``trace_id``: the saga's lineage trace, put in each event's metadata; ``due_at``:
        the saga's next due time (None: none; by default it stays as it was)."""
        ...

    def due(self, now: datetime, limit: int, *, since: datetime | None = None) -> list[DueSaga]:
        """The sagas due by ``now`` (and, with ``since``, after it), the longest due first
        (at most ``limit``)."""
        ...

    def defer(self, items: Sequence[DueSaga]) -> int:
        """Set each saga's due time (None clears it) only while it is still at the item's
        version (an append in between wins); how many were set."""
        ...

    def unit_of_work(self) -> AbstractContextManager[Unit]:
        """A unit of work: commit on clean exit, nothing at all on an exception."""
        ...

    def watch(self) -> AbstractContextManager[Changes]:
        """Wake-ups on appends, held open for the block (how ``SagaClient.wait`` sleeps)."""
        ...


class Definitions(Protocol):
    """Saga definitions by ``(name, version, hash)``, each owned by a tenant or shared.

    What a tenant sees under a name: the shared set's versions when the shared set holds the
    name, else its own; never another tenant's (absent to it: ``DefinitionNotFound``). A name
    and version never change content within one owner.
    """

    def register(
        self, definition: SagaDefinition, *, tenant: str, registered_by: str = ""
    ) -> str:
        """Store a validated definition as ``tenant``'s (idempotent); return its content
        hash. ``DefinitionConflict`` if the tenant holds the name and version with other
        content; ``SharedDefinitionName`` if the shared set holds the name (the very content
        the shared set holds is already the tenant's to use: its hash, nothing stored)."""
        ...

    def register_shared(self, definition: SagaDefinition, *, registered_by: str = "") -> str:
        """Store a validated definition in the shared, read-only built-in set (the system's
        own, visible to every tenant; idempotent); ``DefinitionConflict`` as above."""
        ...

    def by_hash(self, digest: str) -> SagaDefinition:
        """The definition with that content hash, whoever registered it;
        ``DefinitionNotFound`` if none."""
        ...

    def get(
        self, name: str, version: int | None = None, *, tenant: str,
        cached_latest: bool = False,
    ) -> SagaDefinition:
        """``name`` at ``version`` (the highest when omitted) as ``tenant`` sees it;
        ``DefinitionNotFound``."""
        ...

    def send_latest_check(
        self, unit: Unit, definition: SagaDefinition, *, tenant: str
    ) -> Callable[[], bool]:
        """Inside ``unit``: a check, called later, that ``definition`` is still the highest
        version of its name that ``tenant`` sees."""
        ...

    def list(self, *, tenant: str) -> list[DefinitionRecord]:
        """Every definition ``tenant`` sees (the shared set and its own), by name and version."""
        ...


class GateWindows(Protocol):
    """Tenant windows of gated amounts, shared by every saga of a tenant (sliding periods)."""

    def reserve(self, tenant: str, call: WindowCall, now: datetime, unit: Unit) -> WindowTotal:
        """Inside ``unit``: the window's total in ``(now - call.period, now]`` without this
        operation, and whether the call was reserved: only if that total plus its amount
        stays within ``call.limit``, or ``call.approved_over``. Another unit reserving in
        the same window waits for this one to end, so two sagas never both slip under."""
        ...

    def release(self, tenant: str, operation_keys: Sequence[str], now: datetime,
                unit: Unit) -> int:
        """Inside ``unit``: stop counting these operations' reservations; how many were."""
        ...

    def total(self, tenant: str, window: str, period: timedelta, now: datetime) -> WindowTotal:
        """The window's total in ``(now - period, now]`` as committed (``reserved`` False)."""
        ...


class Secrets(Protocol):
    """Secret saga inputs: kept outside the log, revealed only into tool arguments."""

    def keep(self, saga_id: str, secrets: Mapping[str, Any], unit: Unit) -> None:
        """Store values for a saga in the unit that starts it; the first write wins."""
        ...

    def reveal(self, saga_id: str, args: Any) -> tuple[Any, dict[str, Any]]:
        """``args`` with every placeholder replaced, and the revealed values by name."""
        ...

    def purge(self, saga_id: str) -> None:
        """Forget a finished saga's secrets."""
        ...

    def kept(self, saga_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The values kept for each of ``saga_ids``, by saga id and field (a saga with none,
        or purged, is absent): what the last line of defence looks for by value."""
        ...

    def deposit(self, tenant: str, value: Any, expires_at: datetime) -> str:
        """Hold ``value`` for ``tenant`` until ``expires_at``; return a new unguessable ref
        (``events.secret_inputs.new_ref``). Only the ref's digest is stored with it."""
        ...

    def redeem(
        self, tenant: str, refs: Mapping[str, str], saga_id: str, now: datetime, unit: Unit
    ) -> dict[str, Any]:
        """Inside the unit that starts ``saga_id``: the value behind each ref (field -> ref)
        by field, each ref spent when the unit commits (and not at all otherwise).
        ``SecretRefRejected`` names every field whose ref is unknown to ``tenant`` (or
        another tenant's), expired at ``now``, or spent by another unit."""
        ...

    def purge_expired(self, now: datetime) -> int:
        """Forget every ref that expired by ``now``, spent or not; return how many."""
        ...
