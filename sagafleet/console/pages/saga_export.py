"""A saga's history as one JSON document (``GET /sagas/{id}/export.json``): every event as the
audit reads it (secret inputs masked), the hash chain's verdict, and the lineage.

The document is what an auditor or an incident review keeps beside a ticket: the same facts
the saga page shows, in a form a program reads. It is built from
:class:`projections.AuditReport` (tenant-scoped: another tenant's saga is not found), so it
is masked exactly like the page; the route also passes it through the fleet's secret guard,
as every page is (``Console._shown``).
"""

from __future__ import annotations

from typing import Any, Final

from projections import AuditReport, TimelineEntry

__all__ = ["EXPORT_FORMAT", "saga_export"]

EXPORT_FORMAT: Final = "sagafleet.saga-history/1"
"""The document's format name and version (a reader checks it before reading on)."""


def _event(entry: TimelineEntry) -> dict[str, Any]:
    return {"stream_version": entry.stream_version, "position": entry.position,
            "global_position": entry.global_position, "type": entry.type,
            "at": entry.at.isoformat(), "recorded_at": entry.recorded_at.isoformat(),
            "actor": entry.actor, "step_id": entry.step_id, "kind": entry.kind,
            "operation_key": entry.operation_key, "trace_id": entry.trace_id,
            "event_hash": entry.event_hash, "prev_hash": entry.prev_hash, "data": entry.data}


def saga_export(report: AuditReport, *, tenant: str) -> dict[str, Any]:
    """The export document of one audited saga (pure)."""
    summary = report.state.summary if report.state is not None else None
    return {
        "format": EXPORT_FORMAT,
        "saga_id": report.saga_id,
        "tenant": tenant,
        "definition": ({"name": summary.definition_name, "version": summary.definition_version,
                        "hash": summary.definition_hash} if summary is not None
                       else {"hash": report.definition_hash}),
        "state": summary.state if summary is not None else None,
        "lineage": report.lineage,
        "chain": {
            "verdict": "intact" if report.ok else ("tampered" if report.tampered else "broken"),
            "chain_ok": report.chain_ok,
            "break": report.chain_break,
            "break_version": report.chain_break_version,
            "snapshot_problem": report.snapshot_problem,
            "checkpoints_ok": report.anchors.ok if report.anchors is not None else None,
        },
        "events_total": report.events_total,
        "events": [_event(entry) for entry in report.timeline],
    }
