"""The in-memory ports: a :class:`~events.saga_log.SagaLog`, :class:`~events.saga_log.Definitions`,
:class:`~events.saga_log.Secrets` and :class:`~events.saga_log.GateWindows` that keep the
PostgreSQL implementations' contract (``tests/contract`` runs the same suite on both), for
``sagafleet.testing`` and users' tests.

Every object is thread-safe (one lock each). Build them together::

    definitions = MemoryDefinitions()
    log = MemorySagaLog(definitions, clock=clock)
    secrets = MemorySecrets()
    with log.unit_of_work() as unit:
        secrets.keep(saga_id, values, unit)
        log.append(saga_id, tenant, [started], NO_STREAM, unit=unit)
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any, NamedTuple

from events.definitions import (
    DefinitionNotFound,
    DefinitionRecord,
    SharedDefinitionName,
    check_definition_name,
    check_tenant,
    conflict,
)
from events.errors import InvalidArgument
from events.memory_store import MemoryEventStore, MemoryUnit
from events.model import KEEP_DUE, AppendResult, Clock, DueTime, ExpectedVersion, utc_now
from events.saga_log import Definitions, GateWindows, SagaLog, Secrets, Unit, unit_of
from events.sagas import SagaCodec, SagaStreams, saga_registry
from events.secret_inputs import (
    SecretRefRejected,
    new_ref,
    ref_digest,
    ref_problem,
    reveal_with,
)
from events.snapshots import SnapshotRead, StoredSnapshot, text_hash
from events.store_rules import checked_stream_list
from saga_core import SagaDefinition
from saga_core.events import SagaEvent
from saga_core.gates import MAX_WINDOW
from saga_core.snapshots import DEFAULT_SNAPSHOT_EVERY
from saga_core.totals import WindowCall, WindowTotal

__all__ = [
    "MemoryDefinitions", "MemoryEventStore", "MemoryGateWindows", "MemorySagaLog", "MemorySecrets",
    "MemorySnapshots", "MemoryUnit",
]


class MemorySagaLog(SagaStreams):
    """Sagas folded from a :class:`MemoryEventStore` (one of its own unless given)."""

    def __init__(
        self,
        definitions: Definitions,
        *,
        clock: Clock = utc_now,
        store: MemoryEventStore | None = None,
        snapshot_every: int = DEFAULT_SNAPSHOT_EVERY,
    ) -> None:
        """``snapshot_every``: see :class:`~events.sagas.SagaStreams`."""
        self.store = store if store is not None else MemoryEventStore(
            registry=saga_registry(), clock=clock
        )
        self.definitions = definitions
        self.registry = self.store.registry or saga_registry()
        self._appended = threading.Condition()
        self._appends = 0  # counts this log's appends and units: what a watcher waits on
        super().__init__(self.store, SagaCodec(self.registry, definitions),
                         MemorySnapshots(self.store), snapshot_every=snapshot_every)

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
        """Append as every log does, then wake this log's watchers (a unit wakes them as it
        ends, when its appends are applied)."""
        result = super().append(saga_id, tenant, events, expected_version, actor=actor,
                                unit=unit, trace_id=trace_id, due_at=due_at)
        if unit is None:
            self._wake()
        return result

    @contextmanager
    def unit_of_work(self) -> Iterator[MemoryUnit]:
        """A unit of work: applied on a clean exit, nothing at all on an exception."""
        try:
            with self.store.transaction() as unit:
                yield unit
        finally:
            self._wake()  # a spurious wake-up (nothing applied) only means "look again"

    def watch(self) -> AbstractContextManager[_MemoryChanges]:
        """Wake-ups on this log's own appends (not on another log sharing its store)."""
        return nullcontext(_MemoryChanges(self, self._appends))

    def _wake(self) -> None:
        with self._appended:
            self._appends += 1
            self._appended.notify_all()

    def _within(self, unit: Unit) -> MemoryUnit:
        mine = unit_of(MemoryUnit, unit)
        if mine.store is not self.store:
            raise InvalidArgument("this unit of work belongs to another in-memory log")
        return mine


class _Kept(NamedTuple):
    """One stream's snapshot as the in-memory store keeps it: its state as JSON text only
    (each reader decodes its own copy), sealed with that text's hash when written."""

    schema: str
    snapshot: StoredSnapshot  # its state left out: ``text`` holds it
    text: str
    sealed: str


class MemorySnapshots:
    """The in-memory :class:`~events.snapshots.Snapshots`: one per stream, kept as JSON
    text (as PostgreSQL keeps it: a reader decodes a copy, never a live state), sealed with
    that text's hash as PostgreSQL seals its jsonb text."""

    def __init__(self, store: MemoryEventStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._kept: dict[str, _Kept] = {}

    def read_from_snapshots(
        self, stream_ids: Sequence[str], schema: str
    ) -> dict[str, SnapshotRead]:
        """Each stream id to its snapshot of ``schema`` and the events a fold from it needs
        (as PostgreSQL reads them: the first, then those from the snapshot's version on)."""
        checked_stream_list(stream_ids)
        return {stream_id: self._read(stream_id, schema) for stream_id in dict.fromkeys(stream_ids)}

    def _read(self, stream_id: str, schema: str) -> SnapshotRead:
        with self._lock:
            kept = self._kept.get(stream_id)
        if kept is None or kept.schema != schema:
            return SnapshotRead(None, self.store.read_stream(stream_id))
        first = self.store.read_stream(stream_id, to_version=1)
        if not first:
            return SnapshotRead(None, [])
        snapshot = self._fresh(kept)
        after = self.store.read_stream(stream_id, after_version=max(snapshot.version, 2) - 1)
        return SnapshotRead(snapshot, [*first, *after])

    @staticmethod
    def _fresh(kept: _Kept) -> StoredSnapshot:
        """A kept snapshot with its own copy of the state, decoded from the text kept, and
        whether that text still matches its seal."""
        return dataclasses.replace(kept.snapshot, state=json.loads(kept.text),
                                   state_intact=text_hash(kept.text) == kept.sealed)

    def read_snapshots(
        self, stream_ids: Sequence[str], schema: str
    ) -> dict[str, StoredSnapshot]:
        """The snapshot of ``schema`` of each stream that has one, as kept."""
        checked_stream_list(stream_ids)
        with self._lock:
            found = {s: self._kept.get(s) for s in stream_ids}
        return {s: self._fresh(kept) for s, kept in found.items()
                if kept is not None and kept.schema == schema}

    def save_snapshot(self, snapshot: StoredSnapshot, schema: str) -> None:
        """Keep ``snapshot`` unless the stream has a newer one of the same ``schema``
        (within the stream: one beyond its head goes)."""
        text = json.dumps(snapshot.state)
        head = self.store.stream_version(snapshot.stream_id)
        with self._lock:
            kept = self._kept.get(snapshot.stream_id)
            if (kept is None or kept.schema != schema
                    or not snapshot.version < kept.snapshot.version <= head):
                self._kept[snapshot.stream_id] = _Kept(
                    schema, dataclasses.replace(snapshot, state=None), text, text_hash(text))

    def drop_snapshots(self) -> int:
        """Forget every snapshot; return how many there were."""
        with self._lock:
            dropped = len(self._kept)
            self._kept.clear()
        return dropped


class _MemoryChanges:
    """A watcher of one :class:`MemorySagaLog`: woken by appends after the last it saw."""

    def __init__(self, log: MemorySagaLog, seen: int) -> None:
        self._log = log
        self._seen = seen

    def wait(self, timeout: float) -> bool:
        """Block until the log appended since the last wake-up or ``timeout`` seconds pass."""
        with self._log._appended:
            woken = self._log._appended.wait_for(lambda: self._log._appends != self._seen,
                                                 timeout)
            self._seen = self._log._appends
        return woken


class MemoryDefinitions:
    """Saga definitions by ``(name, version, hash)`` in this process, each owned by a tenant
    or shared; who sees what is :mod:`events.definitions`' rule."""

    def __init__(self, clock: Clock = utc_now) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._by_hash: dict[str, SagaDefinition] = {}
        # (owner, name, version) -> record; owner None is the shared set
        self._records: dict[tuple[str | None, str, int], DefinitionRecord] = {}

    def register(
        self, definition: SagaDefinition, *, tenant: str, registered_by: str = ""
    ) -> str:
        """Store ``definition`` as ``tenant``'s (idempotent); return its hash. A name the
        shared set holds is refused unless this is the very content it holds."""
        check_tenant(tenant)
        digest = definition.content_hash()
        with self._lock:
            shared = self._versions(None, definition.name)
            if shared:
                if any(record.hash == digest for record in shared):
                    return digest
                raise SharedDefinitionName(definition.name)
            return self._store(tenant, definition, digest, registered_by)

    def register_shared(self, definition: SagaDefinition, *, registered_by: str = "") -> str:
        """Store ``definition`` in the shared, read-only built-in set (idempotent)."""
        with self._lock:
            return self._store(None, definition, definition.content_hash(), registered_by)

    def _store(self, owner: str | None, definition: SagaDefinition, digest: str,
               registered_by: str) -> str:
        """Keep a record unless the owner holds the name and version (held lock)."""
        key = (owner, definition.name, definition.version)
        record = self._records.get(key)
        if record is None:
            record = DefinitionRecord(definition.name, definition.version, digest,
                                      registered_by, self._clock(), tenant=owner)
            self._records[key] = record
            self._by_hash[digest] = definition
        if record.hash != digest:
            raise conflict(definition, record.hash, digest)
        return digest

    def by_hash(self, digest: str) -> SagaDefinition:
        """The definition whose content hash is ``digest``, whoever registered it."""
        with self._lock:
            found = self._by_hash.get(digest)
        if found is None:
            raise DefinitionNotFound(f"no saga definition with hash {digest!r}")
        return found

    def get(
        self, name: str, version: int | None = None, *, tenant: str,
        cached_latest: bool = False,
    ) -> SagaDefinition:
        """The definition ``name`` at ``version`` (the highest version when omitted) as
        ``tenant`` sees it; ``cached_latest`` changes nothing here: the latest is known."""
        check_tenant(tenant)
        check_definition_name(name)
        with self._lock:
            visible = self._visible(tenant, name)
            if version is None:
                record, what = (visible[-1] if visible else None), f"name {name!r}"
            else:
                record = next((r for r in visible if r.version == version), None)
                what = f"{name!r} version {version}"
            if record is not None:
                return self._by_hash[record.hash]
        raise DefinitionNotFound(f"no saga definition with {what} for tenant {tenant!r}")

    def send_latest_check(
        self, unit: Unit, definition: SagaDefinition, *, tenant: str
    ) -> Callable[[], bool]:
        """Inside ``unit``: a check, called later, that ``definition`` is still the highest
        version of its name that ``tenant`` sees."""
        check_tenant(tenant)
        unit_of(MemoryUnit, unit).live()
        expected = definition.content_hash()

        def still_latest() -> bool:
            with self._lock:
                visible = self._visible(tenant, definition.name)
            return bool(visible) and visible[-1].hash == expected

        return still_latest

    def _versions(self, owner: str | None, name: str) -> list[DefinitionRecord]:
        """The owner's records of ``name``, lowest version first (held lock)."""
        return sorted((r for (o, n, _), r in self._records.items() if o == owner and n == name),
                      key=lambda r: r.version)

    def _visible(self, tenant: str, name: str) -> list[DefinitionRecord]:
        """What ``tenant`` sees under ``name``: the shared versions when the shared set holds
        the name, else its own (held lock)."""
        return self._versions(None, name) or self._versions(tenant, name)

    def list(self, *, tenant: str) -> list[DefinitionRecord]:
        """Every definition ``tenant`` sees (the shared set and its own), by name, version."""
        check_tenant(tenant)
        with self._lock:
            names = {name for owner, name, _ in self._records if owner in (None, tenant)}
            return [record for name in sorted(names) for record in self._visible(tenant, name)]


@dataclass
class _Deposit:
    """One deposited secret: whose, until when, and (once spent) by which saga."""

    tenant: str
    text: str | None  # JSON text; None once spent (the value moved to the saga)
    expires_at: datetime
    spent_by: str | None = None
    held_by: MemoryUnit | None = None  # an open unit redeeming it (until it ends)


class MemorySecrets:
    """Secret saga inputs in this process: kept with the unit that starts the saga."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, dict[str, str]] = {}  # saga id -> name -> JSON text
        self._deposits: dict[str, _Deposit] = {}  # ref digest -> deposit

    def keep(self, saga_id: str, secrets: Mapping[str, Any], unit: Unit) -> None:
        """Store values for a saga when ``unit`` applies; the first write wins, so a
        replayed start changes nothing."""
        if not secrets:
            return
        # As JSON text, as the database holds it: each reveal hands out its own copy, and
        # a value JSON cannot hold fails here, as it does in the PostgreSQL vault.
        texts = {name: json.dumps(value) for name, value in secrets.items()}
        unit_of(MemoryUnit, unit).on_commit(lambda: self._keep(saga_id, texts))

    def _keep(self, saga_id: str, texts: Mapping[str, str]) -> None:
        with self._lock:
            kept = self._values.setdefault(saga_id, {})
            for name, text in texts.items():
                kept.setdefault(name, text)

    def reveal(self, saga_id: str, args: Any) -> tuple[Any, dict[str, Any]]:
        """``args`` with every placeholder replaced by its value, and the revealed values."""
        return reveal_with(saga_id, args, lambda names: self._fetch(saga_id, names))

    def _fetch(self, saga_id: str, names: list[str]) -> dict[str, Any]:
        with self._lock:
            kept = dict(self._values.get(saga_id, {}))
        return {name: json.loads(kept[name]) for name in names if name in kept}

    def purge(self, saga_id: str) -> None:
        """Forget a finished saga's secrets."""
        with self._lock:
            self._values.pop(saga_id, None)

    def kept(self, saga_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The values kept for each of ``saga_ids``, by saga id and field (none: absent)."""
        with self._lock:
            texts = {saga_id: dict(self._values[saga_id]) for saga_id in saga_ids
                     if self._values.get(saga_id)}
        return {saga_id: {name: json.loads(text) for name, text in kept.items()}
                for saga_id, kept in texts.items()}

    def deposit(self, tenant: str, value: Any, expires_at: datetime) -> str:
        """Hold ``value`` for ``tenant`` until ``expires_at`` under a new ref (kept by its
        digest, as the database keeps it)."""
        ref = new_ref()
        text = json.dumps(value)
        with self._lock:
            self._deposits[ref_digest(ref)] = _Deposit(tenant, text, expires_at)
        return ref

    def redeem(
        self, tenant: str, refs: Mapping[str, str], saga_id: str, now: datetime, unit: Unit
    ) -> dict[str, Any]:
        """The values behind ``refs`` by field, each ref spent when ``unit`` commits. A ref
        another open unit is redeeming counts as spent (PostgreSQL would make this one
        wait for that unit's end instead)."""
        mine = unit_of(MemoryUnit, unit)
        mine.live()
        if not refs:
            return {}
        digests = {field: ref_digest(ref) for field, ref in refs.items()}
        with self._lock:
            states = {field: self._state(self._deposits.get(d), tenant, now, mine)
                      for field, d in digests.items()}
            refused = sorted(field for field, state in states.items() if state != "ok")
            if refused:
                raise SecretRefRejected([ref_problem(f, states[f]) for f in refused])
            texts = {}
            for field, digest in digests.items():
                deposit = self._deposits[digest]
                deposit.held_by = mine
                texts[field] = deposit.text
        mine.on_commit(lambda: self._spend(set(digests.values()), saga_id))
        return {field: json.loads(text) for field, text in texts.items() if text is not None}

    @staticmethod
    def _state(deposit: _Deposit | None, tenant: str, now: datetime, unit: MemoryUnit) -> str:
        if deposit is None or deposit.tenant != tenant:
            return "unknown"
        held = deposit.held_by is not None and deposit.held_by.open and deposit.held_by is not unit
        if deposit.spent_by is not None or held:
            return "used"
        return "expired" if deposit.expires_at <= now else "ok"

    def _spend(self, digests: set[str], saga_id: str) -> None:
        with self._lock:
            for digest in digests:
                deposit = self._deposits.get(digest)
                if deposit is not None:
                    deposit.text, deposit.spent_by, deposit.held_by = None, saga_id, None

    def purge_expired(self, now: datetime) -> int:
        """Forget every ref that expired by ``now``, spent or not."""
        with self._lock:
            gone = [d for d, deposit in self._deposits.items() if deposit.expires_at <= now]
            for digest in gone:
                del self._deposits[digest]
        return len(gone)


@dataclass
class _Reservation:
    """One operation's reservation in a tenant window."""

    tenant: str
    window: str
    amount: Decimal
    reserved_at: datetime
    released: bool = False


class MemoryGateWindows:
    """Tenant windows in this process: a unit that reserves in a window holds it until the
    unit ends (as PostgreSQL's row lock does), so another unit's reservation waits and then
    sees what the first one committed."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._kept: dict[str, _Reservation] = {}  # operation key -> its reservation
        self._held: dict[tuple[str, str], MemoryUnit] = {}  # window -> the unit holding it

    def reserve(self, tenant: str, call: WindowCall, now: datetime, unit: Unit) -> WindowTotal:
        """The window's total without this operation, and whether the call was reserved
        (only within the limit, or approved over it); the reservation applies with ``unit``."""
        mine = unit_of(MemoryUnit, unit)
        mine.live()
        window = (tenant, call.window)
        with self._changed:
            while (holder := self._held.get(window)) is not None and holder is not mine:
                self._changed.wait()
            if holder is None:
                self._held[window] = mine
                mine.on_end(lambda: self._let_go(window))
            before, calls = self._sum(tenant, call.window, call.period, now, call.operation_key)
        fits = call.approved_over or before + call.amount <= call.limit
        if fits:
            kept = _Reservation(tenant, call.window, call.amount, now)
            mine.on_commit(lambda: self._keep(call.operation_key, kept))
        return WindowTotal(before, calls, fits)

    def release(self, tenant: str, operation_keys: Sequence[str], now: datetime,
                unit: Unit) -> int:
        """Stop counting these operations' reservations when ``unit`` commits; how many
        are counted now."""
        mine = unit_of(MemoryUnit, unit)
        keys = set(operation_keys)
        with self._changed:
            counted = [k for k in keys if (r := self._kept.get(k)) is not None
                       and r.tenant == tenant and not r.released]
        mine.on_commit(lambda: self._release(tenant, keys))
        return len(counted)

    def total(self, tenant: str, window: str, period: timedelta, now: datetime) -> WindowTotal:
        """The window's committed total in ``(now - period, now]``."""
        with self._changed:
            before, calls = self._sum(tenant, window, period, now, None)
        return WindowTotal(before, calls, reserved=False)

    def _sum(self, tenant: str, window: str, period: timedelta, now: datetime,
             without: str | None) -> tuple[Decimal, int]:
        since = now - period
        amounts = [r.amount for key, r in self._kept.items()
                   if r.tenant == tenant and r.window == window and not r.released
                   and r.reserved_at > since and key != without]
        return sum(amounts, Decimal(0)), len(amounts)

    def _keep(self, operation_key: str, reservation: _Reservation) -> None:
        with self._changed:
            self._kept[operation_key] = reservation
            # What no window can reach any more is forgotten, as PostgreSQL deletes it.
            stale = reservation.reserved_at - MAX_WINDOW
            for key in [k for k, r in self._kept.items() if r.reserved_at < stale]:
                del self._kept[key]

    def _release(self, tenant: str, keys: set[str]) -> None:
        with self._changed:
            for key in keys:
                reservation = self._kept.get(key)
                if reservation is not None and reservation.tenant == tenant:
                    reservation.released = True

    def _let_go(self, window: tuple[str, str]) -> None:
        with self._changed:
            self._held.pop(window, None)
            self._changed.notify_all()


if TYPE_CHECKING:  # mypy checks that each class keeps its port's signatures

    def _conforms(
        log: MemorySagaLog, definitions: MemoryDefinitions, secrets: MemorySecrets,
        windows: MemoryGateWindows,
    ) -> tuple[SagaLog, Definitions, Secrets, GateWindows]:
        return log, definitions, secrets, windows
