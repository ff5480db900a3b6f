"""A trace's events: every event a tenant's sagas recorded under one lineage trace id.

The reverse (a saga's trace) is its ``SagaStarted.lineage.trace_id``; each later event of
the saga carries it in its metadata as ``saga_trace_id``
(``events.saga_log.streams.SAGA_TRACE_KEY``),
which events migration 0008 indexes by tenant.

The index is on the ``tenant_id`` column, which someone with table access can edit: an event
is shown only when the tenant its hashed metadata names is the reader's too and its content
matches its hash (``events.integrity.chain.content_verifies``); one that does not is left out and
logged (``verify`` names it).
"""

from __future__ import annotations

import logging
from typing import Any, Final

import psycopg

from events.errors import InvalidArgument
from events.eventstore.driver import EVENT_COLUMNS, stored_event_rows
from events.eventstore.model import RecordedEvent
from events.integrity.chain import content_verifies
from saga_core.agents.lineage import InvalidLineage, check_trace_id
from saga_core.limits import TRACE_EVENTS

SAGA_TRACE_KEY: Final = "saga_trace_id"

log = logging.getLogger(__name__)

_BY_TRACE = f"""
SELECT {EVENT_COLUMNS} FROM eventstore.events
 WHERE tenant_id = %(tenant)s AND metadata ? 'saga_trace_id'
   AND metadata ->> 'saga_trace_id' = %(trace)s AND metadata ->> 'tenant' = %(tenant)s
 ORDER BY global_position
 LIMIT %(limit)s
"""  # noqa: S608 - EVENT_COLUMNS is a constant


def checked_trace_query(tenant: object, trace_id: object, limit: object) -> tuple[str, str, int]:
    """The arguments of a trace read, or InvalidArgument naming the wrong one."""
    if not isinstance(tenant, str) or not tenant:
        raise InvalidArgument("tenant must be a non-empty string")
    try:
        trace = check_trace_id(trace_id)
    except InvalidLineage as exc:
        raise InvalidArgument(str(exc)) from None
    if type(limit) is not int or not 1 <= limit <= TRACE_EVENTS.value:
        raise InvalidArgument(
            f"limit must be an int from 1 to {TRACE_EVENTS.value} ({TRACE_EVENTS.name})")
    return tenant, trace, limit


def events_of_trace_on(
    conn: psycopg.Connection[Any], tenant: str, trace_id: str, limit: int
) -> list[RecordedEvent]:
    """The tenant's events of the trace, oldest first, at most ``limit``."""
    tenant, trace_id, limit = checked_trace_query(tenant, trace_id, limit)
    with conn.cursor(row_factory=stored_event_rows, binary=True) as cur:
        cur.execute(_BY_TRACE, {"tenant": tenant, "trace": trace_id, "limit": limit})
        return [record for record in cur.fetchall() if _shown(record)]


def in_trace(record: RecordedEvent, tenant: str, trace_id: str) -> bool:
    """Whether ``record`` is the tenant's and belongs to the trace (the in-memory read)."""
    return (record.tenant_id == tenant and record.metadata.get("tenant") == tenant
            and record.metadata.get(SAGA_TRACE_KEY) == trace_id and _shown(record))


def _shown(record: RecordedEvent) -> bool:
    """Whether a trace read may show ``record``: its content matches its hash."""
    if content_verifies(record):
        return True
    log.warning("left %s@%d out of a trace read: it does not match its hash (see verify)",
                record.stream_id, record.stream_version)
    return False
