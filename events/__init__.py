"""Storing events: the envelope, the type registry, and the PostgreSQL event store."""

from events.chain import ChainBreak, ChainReport, verify_chain
from events.errors import (
    CheckpointConflict,
    ConcurrencyError,
    EventDecodeError,
    EventIdConflict,
    EventSchemaError,
    EventStoreError,
    InvalidEvent,
    MigrationChecksumMismatch,
    MigrationError,
    RegistryConflict,
    StoreUnavailable,
    SubscriptionBusy,
    UnknownEventType,
    UnknownSchemaVersion,
    UnregisteredEventModel,
)
from events.migrate import apply_migrations
from events.model import (
    ANY,
    GENESIS_HASH,
    NO_STREAM,
    AppendResult,
    ExpectedVersion,
    NewEvent,
    Position,
    RecordedEvent,
    StreamState,
)
from events.prepare import DEFAULT_MAX_EVENT_BYTES, MAX_STREAM_ID_LENGTH, MAX_TYPE_LENGTH
from events.registry import EventRegistry, EventSchema, Upcaster
from events.store import EventStore, UnitOfWork
from events.subscription import Batch, GateVerdict, Subscription, stream_version_gate

__all__ = [
    "ANY",
    "DEFAULT_MAX_EVENT_BYTES",
    "GENESIS_HASH",
    "MAX_STREAM_ID_LENGTH",
    "MAX_TYPE_LENGTH",
    "NO_STREAM",
    "AppendResult",
    "Batch",
    "ChainBreak",
    "ChainReport",
    "CheckpointConflict",
    "ConcurrencyError",
    "EventDecodeError",
    "EventIdConflict",
    "EventRegistry",
    "EventSchema",
    "EventSchemaError",
    "EventStore",
    "EventStoreError",
    "ExpectedVersion",
    "GateVerdict",
    "InvalidEvent",
    "MigrationChecksumMismatch",
    "MigrationError",
    "NewEvent",
    "Position",
    "RecordedEvent",
    "RegistryConflict",
    "StoreUnavailable",
    "StreamState",
    "Subscription",
    "SubscriptionBusy",
    "UnitOfWork",
    "UnknownEventType",
    "UnknownSchemaVersion",
    "UnregisteredEventModel",
    "Upcaster",
    "apply_migrations",
    "stream_version_gate",
    "verify_chain",
]
