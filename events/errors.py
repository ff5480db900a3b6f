"""The event store's typed errors, all under :class:`saga_core.errors.SagaError`."""

from __future__ import annotations

from saga_core.errors import ErrorKind, SagaError


class EventStoreError(SagaError):
    """Root of every error the event store raises on purpose."""


class StoreUnavailable(EventStoreError):
    """The database could not be reached or the connection broke mid-operation."""

    kind = ErrorKind.UNAVAILABLE


class ConcurrencyError(EventStoreError):
    """The stream was not at the expected version; nothing was written."""

    kind = ErrorKind.CONFLICT

    def __init__(self, stream_id: str, expected: object, actual: int) -> None:
        self.stream_id = stream_id
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"stream {stream_id!r}: expected version {expected}, actual version {actual}"
        )


class EventIdConflict(EventStoreError):
    """An event id is already stored with different content (or in another append)."""

    kind = ErrorKind.CONFLICT

    def __init__(self, event_id: object, reason: str) -> None:
        self.event_id = event_id
        super().__init__(f"event id {event_id} already stored: {reason}")


class InvalidEvent(EventStoreError):
    """An event, stream id or type name was rejected before any write; says what is wrong."""

    kind = ErrorKind.INVALID_INPUT


class InvalidArgument(EventStoreError, ValueError):
    """A read's argument (stream id, version, position, page size) is malformed; says which.

    Also a ValueError, as ``Position.parse`` raised before it was typed."""

    kind = ErrorKind.INVALID_INPUT


class EventSchemaError(EventStoreError):
    """Root of the registry's errors: turning models into events and events into models."""

    kind = ErrorKind.INTEGRITY


class UnregisteredEventModel(EventSchemaError, InvalidEvent):
    """A pydantic model instance whose class was never registered was offered for append."""

    kind = ErrorKind.INVALID_INPUT


class UnknownEventType(EventSchemaError):
    """A recorded event's type name has no registered model."""


class UnknownSchemaVersion(EventSchemaError):
    """A recorded event's schema version is newer than known or has no upcaster path."""


class EventDecodeError(EventSchemaError):
    """An upcaster failed or the upcast data does not validate against the model."""


class RegistryConflict(EventSchemaError):
    """A type name or model class was registered twice with different meanings."""

    kind = ErrorKind.MISCONFIGURED


class MigrationError(EventStoreError):
    """A migration file failed, is malformed, or no longer matches what was applied."""

    kind = ErrorKind.MISCONFIGURED


class MigrationChecksumMismatch(MigrationError):
    """An already-applied migration file was edited; add a new file instead."""


class SubscriptionBusy(EventStoreError):
    """Another consumer holds this subscription's exclusive lock."""

    kind = ErrorKind.CONFLICT


class CheckpointConflict(EventStoreError):
    """The checkpoint could not move forward (it already passed this batch); rolled back."""

    kind = ErrorKind.CONFLICT


class ReadOnlyStore(EventStoreError):
    """A write was sent to a store opened for reading only (a hot standby); the message
    names the store's source, so the operator sees which setting routed it there."""

    kind = ErrorKind.MISCONFIGURED


def write_refused(exc: ReadOnlyStore) -> StoreUnavailable:
    """A writing store's write that its server refused as read-only: the server is a standby
    or a demoted or fenced primary, so a failover is under way (or the URL names a standby).
    Unavailable, not misconfigured: a retry reaches the new primary once there is one."""
    return StoreUnavailable(
        f"the database refused a write as read-only ({exc}): a standby, or a primary "
        "demoted or fenced by a failover; the connection was dropped, and the next one goes "
        "to the server that takes writes (give SAGAFLEET_DATABASE_URL every host, with "
        "target_session_attrs=read-write)")
