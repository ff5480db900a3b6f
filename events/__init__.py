"""Storing events: the envelope, the type registry, and the PostgreSQL event store."""

from typing import TYPE_CHECKING

from saga_core.lazy_faces import lazy_face

if TYPE_CHECKING:
    from events.definition_store.memory import MemoryDefinitions
    from events.definition_store.port import Definitions
    from events.errors import (
        CheckpointConflict,
        ConcurrencyError,
        EventDecodeError,
        EventIdConflict,
        EventSchemaError,
        EventStoreError,
        InvalidArgument,
        InvalidEvent,
        MigrationChecksumMismatch,
        MigrationError,
        ReadOnlyStore,
        RegistryConflict,
        StoreUnavailable,
        SubscriptionBusy,
        UnknownEventType,
        UnknownSchemaVersion,
        UnregisteredEventModel,
    )
    from events.eventstore.memory import MemoryEventStore
    from events.eventstore.model import (
        ANY,
        EARLIEST,
        GENESIS_HASH,
        KEEP_DUE,
        NO_STREAM,
        AppendResult,
        DueStream,
        DueTime,
        ExpectedVersion,
        NewEvent,
        Position,
        RecordedEvent,
        ScannedEvent,
        StreamState,
        new_event_id,
    )
    from events.eventstore.postgres import EventStore, UnitOfWork
    from events.eventstore.prepare import (
        DEFAULT_MAX_EVENT_BYTES,
        MAX_STREAM_ID_LENGTH,
        MAX_TYPE_LENGTH,
    )
    from events.eventstore.read_only import ReadOnlyEventStore
    from events.eventstore.registry import EventRegistry, EventSchema, Upcaster
    from events.eventstore.subscription import Batch, GateVerdict, Subscription, stream_version_gate
    from events.integrity.chain import ChainBreak, ChainReport, verify_chain
    from events.migrate import apply_migrations
    from events.saga_log.memory import MemorySagaLog
    from events.saga_log.port import LoadedSaga, SagaLog, Unit
    from events.saga_log.postgres import PostgresSagaLog

__all__ = [
    "ANY",
    "DEFAULT_MAX_EVENT_BYTES",
    "EARLIEST",
    "GENESIS_HASH",
    "MAX_STREAM_ID_LENGTH",
    "MAX_TYPE_LENGTH",
    "KEEP_DUE",
    "NO_STREAM",
    "AppendResult",
    "Batch",
    "ChainBreak",
    "ChainReport",
    "CheckpointConflict",
    "ConcurrencyError",
    "Definitions",
    "DueStream",
    "DueTime",
    "EventDecodeError",
    "EventIdConflict",
    "EventRegistry",
    "EventSchema",
    "EventSchemaError",
    "EventStore",
    "EventStoreError",
    "ExpectedVersion",
    "GateVerdict",
    "InvalidArgument",
    "InvalidEvent",
    "LoadedSaga",
    "MemoryDefinitions",
    "MemoryEventStore",
    "MemorySagaLog",
    "MigrationChecksumMismatch",
    "MigrationError",
    "NewEvent",
    "Position",
    "PostgresSagaLog",
    "ReadOnlyEventStore",
    "ReadOnlyStore",
    "RecordedEvent",
    "RegistryConflict",
    "SagaLog",
    "ScannedEvent",
    "StoreUnavailable",
    "StreamState",
    "Subscription",
    "SubscriptionBusy",
    "Unit",
    "UnitOfWork",
    "UnknownEventType",
    "UnknownSchemaVersion",
    "UnregisteredEventModel",
    "Upcaster",
    "apply_migrations",
    "new_event_id",
    "stream_version_gate",
    "verify_chain",
]

# The names above are imported when first asked for (saga_core.lazy_faces): importing
# one module of the package does not import every module its face names.
__getattr__, __dir__ = lazy_face(__name__, __file__)
