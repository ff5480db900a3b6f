"""The PostgreSQL :class:`~events.saga_log.port.SagaLog`: saga streams in the event store,
snapshots beside them, wake-ups by LISTEN/NOTIFY.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from events.definition_store.postgres import DefinitionStore
from events.errors import EventStoreError
from events.eventstore.postgres import EventStore, UnitOfWork
from events.eventstore.subscription import Notifications
from events.saga_log.port import Unit, unit_of
from events.saga_log.snapshots import PostgresSnapshots
from events.saga_log.streams import MetadataSource, SagaCodec, SagaStreams
from saga_core.engine.state_codec import DEFAULT_SNAPSHOT_EVERY


class PostgresSagaLog(SagaStreams):
    """The PostgreSQL :class:`~events.saga_log.port.SagaLog`: sagas folded from an EventStore."""

    def __init__(self, store: EventStore, definitions: DefinitionStore, *,
                 metadata: MetadataSource | None = None,
                 snapshot_every: int = DEFAULT_SNAPSHOT_EVERY) -> None:
        """``metadata``: more metadata for every append (see :class:`SagaCodec`);
        ``snapshot_every``: see :class:`SagaStreams`."""
        if store.registry is None:
            raise EventStoreError("a PostgresSagaLog needs a store opened with saga_registry()")
        super().__init__(store, SagaCodec(store.registry, definitions, metadata=metadata),
                         PostgresSnapshots(store), snapshot_every=snapshot_every)
        self.store = store
        self.definitions = definitions
        self.registry = store.registry

    def _within(self, unit: Unit) -> UnitOfWork:
        return unit_of(UnitOfWork, unit)

    def unit_of_work(self) -> AbstractContextManager[UnitOfWork]:
        """A pipelined transaction: appends, secrets and definition checks commit together.
        A conflict ends the unit (the port's promise), so its appends need no savepoints."""
        return self.store.transaction(pipelined=True, savepoints=False)

    def watch(self) -> Notifications:
        """The store's NOTIFYs on a dedicated connection of its own (closed with the block).

        The wake-ups this process's appends still owe go out first (they are sent after the
        commits, :mod:`events.eventstore.waking`), so an append this process made before the
        watch opened does not wake it (tests/contract/test_contract_watch.py). Another
        process's append committed just before may still do so: a wake-up only says "look
        again"."""
        self.store.wake_ups_sent()
        return Notifications(self.store)


if TYPE_CHECKING:  # mypy checks that the class keeps its port's signatures
    from events.saga_log.port import SagaLog

    def _conforms(log: PostgresSagaLog) -> SagaLog:
        return log
