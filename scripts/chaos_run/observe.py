"""What the run reads back from PostgreSQL, set-based: one query per question, never one
round trip per saga (a 1000-saga run asks these every second).

Every function opens its own short connection, so a PostgreSQL restart costs the caller
one failed call (psycopg.Error), never a poisoned pool.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import class_row

from events.saga_log.streams import STREAM_PREFIX
from saga_core.contracts import SagaStatus


@dataclass(frozen=True)
class SagaFacts:
    """One saga as its log tells it, folded in SQL: enough to judge settlement and commands."""

    saga_id: str
    tenant: str
    key: str | None
    finished: str | None  # the SagaFinished state, if any
    finished_at: datetime | None
    manual_at: int | None  # position of the last ManualInterventionRequired
    resolved_at: int | None  # position of the last OperatorAction
    manual_reason: str | None  # the evidence reason of the last ManualInterventionRequired
    cancel_requested: bool
    manual_step: str | None = None  # the step of the last ManualInterventionRequired

    @property
    def status(self) -> str:
        """Terminal state, MANUAL_INTERVENTION while a pause is unanswered, else OPEN."""
        if self.finished is not None:
            return self.finished
        if self.manual_at is not None and (self.resolved_at or 0) < self.manual_at:
            return str(SagaStatus.MANUAL_INTERVENTION)
        return "OPEN"

    @property
    def settled(self) -> bool:
        """Terminal, or paused for a person (with or without evidence: the check says which)."""
        return self.status != "OPEN"


_FACTS = """
SELECT substr(stream_id, %(skip)s) AS saga_id,
       max(data->>'tenant') FILTER (WHERE event_type = 'SagaStarted') AS tenant,
       max(data->>'idempotency_key') FILTER (WHERE event_type = 'SagaStarted') AS key,
       max(data->>'state') FILTER (WHERE event_type = 'SagaFinished') AS finished,
       min(recorded_at) FILTER (WHERE event_type = 'SagaFinished') AS finished_at,
       max(global_position) FILTER (WHERE event_type = 'ManualInterventionRequired')
           AS manual_at,
       max(global_position) FILTER (WHERE event_type = 'OperatorAction') AS resolved_at,
       (array_agg(data->'evidence'->>'reason' ORDER BY global_position DESC)
           FILTER (WHERE event_type = 'ManualInterventionRequired'))[1] AS manual_reason,
       (array_agg(coalesce(data->>'kind', '') || ' ' || coalesce(data->>'step_id', '')
                  ORDER BY global_position DESC)
           FILTER (WHERE event_type = 'ManualInterventionRequired'))[1] AS manual_step,
       coalesce(bool_or(event_type = 'CancelRequested'), false) AS cancel_requested
  FROM eventstore.events
 WHERE stream_id LIKE %(prefix)s
 GROUP BY stream_id
"""

# Approval requests not answered since they were (last) asked, per saga, step and kind.
_AWAITING = """
WITH asked AS (
    SELECT stream_id, data->>'step_id' AS step, data->>'kind' AS kind,
           max(global_position) AS pos
      FROM eventstore.events WHERE event_type = 'ApprovalRequested'
     GROUP BY 1, 2, 3),
answered AS (
    SELECT stream_id, data->>'step_id' AS step, data->>'kind' AS kind,
           max(global_position) AS pos
      FROM eventstore.events WHERE event_type IN ('ApprovalGranted', 'ApprovalDenied')
     GROUP BY 1, 2, 3),
finished AS (
    SELECT DISTINCT stream_id FROM eventstore.events WHERE event_type = 'SagaFinished')
SELECT DISTINCT substr(a.stream_id, %(skip)s)
  FROM asked a LEFT JOIN answered b USING (stream_id, step, kind)
 WHERE (b.pos IS NULL OR b.pos < a.pos)
   AND a.stream_id NOT IN (SELECT stream_id FROM finished)
"""


def saga_facts(database_url: str) -> dict[str, SagaFacts]:
    """Every saga in the log, by id."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        cur = conn.cursor(row_factory=class_row(SagaFacts))
        rows = cur.execute(_FACTS, {"skip": len(STREAM_PREFIX) + 1,
                                    "prefix": STREAM_PREFIX + "%"}).fetchall()
    return {row.saga_id: row for row in rows}


def awaiting_approval(database_url: str) -> list[str]:
    """Sagas with an approval request nobody answered yet (sorted, for a stable order)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        rows = conn.execute(_AWAITING, {"skip": len(STREAM_PREFIX) + 1}).fetchall()
    return sorted(r[0] for r in rows)


def definition_names(database_url: str) -> set[str]:
    """Every registered definition name (a submitted plan's effect is its definition)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        return {r[0] for r in conn.execute("SELECT DISTINCT name FROM eventstore.definitions")}


@dataclass(frozen=True)
class DeadLetter:
    """A command message the fleet refused or could not act on, with its reason."""

    task: str
    task_id: str | None  # kept since fleet migration 0003; None before
    kwargs: dict[str, Any]
    reason: str


def _message_kwargs(message: Any) -> dict[str, Any]:
    """The keyword arguments of a stored message: ``{"args", "kwargs"}``, as JSON text
    before migration 0003 (truncated at 4000 characters) or under ``$json`` when jsonb
    could not hold it."""
    try:
        if isinstance(message, str):
            message = json.loads(message)
        if isinstance(message, dict) and isinstance(message.get("$json"), str):
            message = json.loads(message["$json"])
    except ValueError:
        return {}
    kwargs = message.get("kwargs") if isinstance(message, dict) else None
    if isinstance(kwargs, dict) and isinstance(kwargs.get("envelope"), str):
        try:  # a signed command: its arguments are the envelope's
            args = json.loads(kwargs["envelope"]).get("args")
        except (ValueError, AttributeError):
            return {}
        return args if isinstance(args, dict) else {}
    return kwargs if isinstance(kwargs, dict) else {}


def command_dead_letters(database_url: str) -> list[DeadLetter]:
    """The dead-lettered ``sagafleet.commands.*`` messages, their keyword arguments parsed
    (on the table as fleet migration 0001 made it, and as 0003 extends it)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        columns = {r[0] for r in conn.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = 'fleet' AND table_name = 'dead_letters'")}
        whole = "message" in columns and "task_id" in columns
        query = ("SELECT task, task_id, coalesce(message, to_jsonb(body)), reason"
                 if whole else "SELECT task, NULL, body, reason")
        rows = conn.execute(query + " FROM fleet.dead_letters"
                            " WHERE task LIKE 'sagafleet.commands.%' ORDER BY id").fetchall()
    return [DeadLetter(task, task_id, _message_kwargs(message), reason)
            for task, task_id, message, reason in rows]
