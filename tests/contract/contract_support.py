"""What the contract tests build: a registered trip definition and saga events."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from application.gate_windows.port import GateWindows
from application.secrets.port import Secrets
from events.definition_store.port import Definitions
from events.eventstore.model import NO_STREAM, AppendResult
from events.saga_log.port import SagaLog
from saga_core import SagaDefinition
from saga_core.contracts import SagaStatus
from saga_core.engine.events import CancelRequested, SagaFinished, SagaStarted
from sagafleet.example_sagas import trip_definition


@dataclass(frozen=True)
class Ports:
    """One implementation's log, definitions and secrets, and the event store under the
    log (for what only event envelopes can say: event ids)."""

    kind: str
    log: SagaLog
    definitions: Definitions
    secrets: Secrets
    store: Any  # EventStore or MemoryEventStore: append/read_stream/read_all alike
    windows: GateWindows  # tenant windows, reserved in the log's units


T0 = datetime(2026, 1, 1, tzinfo=UTC)


def variant(definition: SagaDefinition, **changes: object) -> SagaDefinition:
    """``definition`` with fields changed (validated afresh, so its hash is recomputed)."""
    return SagaDefinition.model_validate({**definition.model_dump(mode="json"), **changes})


def registered(ports: Ports, tenant: str = "t") -> SagaDefinition:
    """The trip definition, registered with the ports as ``tenant``'s."""
    definition = trip_definition()
    ports.definitions.register(definition, tenant=tenant, registered_by="contract")
    return definition


def started(saga_id: str, definition: SagaDefinition, tenant: str = "t") -> SagaStarted:
    """The first event of a saga of ``definition``."""
    return SagaStarted(
        at=T0,
        saga_id=saga_id,
        tenant=tenant,
        definition_name=definition.name,
        definition_version=definition.version,
        definition_hash=definition.content_hash(),
        input={"traveller": "ada"},
        input_hash="h" * 64,
        retry_budget=definition.retry_budget,
    )


def finished(minutes: int = 1) -> SagaFinished:
    """A saga's last event."""
    return SagaFinished(at=T0 + timedelta(minutes=minutes), state=SagaStatus.COMPENSATED)


def start(ports: Ports, saga_id: str, tenant: str = "t") -> AppendResult:
    """Start a saga of the (registered) trip definition."""
    definition = registered(ports, tenant)
    return ports.log.append(saga_id, tenant, [started(saga_id, definition, tenant)], NO_STREAM)


def note(minutes: int) -> CancelRequested:
    """An event a running saga takes any number of times."""
    return CancelRequested(at=T0 + timedelta(minutes=minutes), actor="op", reason=str(minutes))
