"""A trace's sagas and events (``sagafleet find --trace``): the lineage read the other way.

A saga names its trace in ``SagaStarted.lineage``; a trace finds every event of the
tenant's sagas it started through the store's index (``EventStore.events_of_trace``).
Secret inputs are masked as in ``audit``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from events import RecordedEvent
from events.definition_store.port import check_tenant
from projections.context import ProjectionContext
from projections.masking import mask_input
from saga_core.engine.events import SagaStarted
from saga_core.limits import TRACE_EVENTS


@dataclass(frozen=True)
class TracedSaga:
    """One saga the trace started: its definition, who and what asked."""

    saga_id: str
    definition: str
    definition_version: int
    definition_hash: str
    lineage: dict[str, Any]
    input: dict[str, Any]


@dataclass(frozen=True)
class TracedEvent:
    """One event of the trace, in log order."""

    saga_id: str
    stream_version: int
    global_position: int
    type: str
    recorded_at: datetime
    step_id: str | None
    kind: str | None
    operation_key: str | None


@dataclass(frozen=True)
class TraceReport:
    """Everything one trace id finds in a tenant's log (``truncated``: more events exist
    than ``trace_events`` allows one read)."""

    trace_id: str
    sagas: list[TracedSaga]
    events: list[TracedEvent]
    truncated: bool


def _saga_id(record: RecordedEvent) -> str:
    return record.stream_id.removeprefix("saga-")


def find_trace(ctx: ProjectionContext, trace_id: str, *, tenant: str,
               limit: int = TRACE_EVENTS.value) -> TraceReport:
    """The tenant's sagas and events of ``trace_id`` (another tenant's are never found)."""
    check_tenant(tenant)
    records = ctx.store.events_of_trace(tenant, trace_id, limit=limit)
    registry = ctx.store.registry
    assert registry is not None
    sagas: list[TracedSaga] = []
    for record in records:
        if record.type != SagaStarted.event_type:
            continue
        started = registry.decode(record)
        assert isinstance(started, SagaStarted)
        definition = ctx.definitions.by_hash(started.definition_hash)
        sagas.append(TracedSaga(
            saga_id=started.saga_id, definition=started.definition_name,
            definition_version=started.definition_version,
            definition_hash=started.definition_hash,
            lineage=started.lineage.model_dump(exclude_none=True) if started.lineage else {},
            input=mask_input(definition, started.input)))
    events = [TracedEvent(
        saga_id=_saga_id(r), stream_version=r.stream_version,
        global_position=r.position.global_position, type=r.type, recorded_at=r.recorded_at,
        step_id=r.data.get("step_id"), kind=r.data.get("kind"),
        operation_key=r.data.get("operation_key")) for r in records]
    return TraceReport(trace_id=trace_id, sagas=sagas, events=events,
                       truncated=len(records) >= limit)
