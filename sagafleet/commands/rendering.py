"""The commands' typed reports: each renders itself as one JSON document and as text.

A report holds the rooms' own frozen records (or the saga view model); its JSON is theirs
as data (``asdict`` / ``model_dump``), its text reads their attributes, so a renamed field
fails type checking instead of printing a KeyError.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from application.views import SagaView
from events.integrity.anchor_audit import AnchorReport
from events.integrity.anchors import Checkpoint
from projections import (
    Alert,
    AuditReport,
    Metrics,
    ProjectionStatus,
    QueueRow,
    RebuildReport,
    SagaPage,
    VerifyReport,
)
from projections.lineage import TraceReport
from saga_core.approval.totals import running_totals_text


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def _budget_line(budget: dict[str, Any]) -> str:
    """A saga's limits in one line: cost spent of its budget, its deadline, a breach."""
    parts = []
    if budget["max_cost"] is not None:
        parts.append(f"spent {budget['spent']:g} of {budget['max_cost']:g}"
                     f" ({budget['remaining']:g} left)")
    if budget["deadline"] is not None:
        parts.append(f"time limit {budget['time_limit_s']:g} s, until {budget['deadline']}")
    if budget["exceeded"]:
        parts.append(f"EXCEEDED: {budget['exceeded']['reason']}")
    if budget["lifted"]:
        parts.append("limits lifted by an operator")
    return "; ".join(parts)


def _alert_line(alert: Alert) -> str:
    return f"[{alert.severity}] {alert.kind}: {alert.message} ({alert.saga_id})"


def _answered(approval: dict[str, Any] | None) -> str:
    """Who answered a run's approval request, and at which saga version ("" if nobody)."""
    if not approval or approval["status"] == "requested" or not approval.get("approver"):
        return ""
    verb = "approved" if approval["status"] == "granted" else "denied"
    version = approval.get("answered_version")
    return f"  ({verb} by {approval['approver']}{f' at version {version}' if version else ''})"


@dataclass(frozen=True)
class SagaReport:
    """A saga's state and steps (``status``, and what ``start``/``approve``/... left)."""

    view: SagaView

    def to_json(self) -> dict[str, Any]:
        """The saga view as JSON."""
        return self.view.model_dump(mode="json")

    def to_text(self) -> str:
        """One line for the saga, one per operation, then approvals and escalation."""
        v = self.view
        lines = [f"saga {v.saga_id}  {v.status}  ({v.definition} "
                 f"v{v.definition_version}, tenant {v.tenant})"]
        for s in v.steps:
            lines.append(f"  {s.step_id:<18} {s.kind:<13} {s.status:<18} attempt {s.attempt}"
                         f"{_answered(s.approval)}")
        for p in v.pending_approvals:
            lines.append(f"  awaiting approval: {p['step_id']} ({p['kind']}) "
                         f"hash {p['action_hash'][:16]}… until {p['expires_at']}")
        if v.budget:
            lines.append(f"  budget: {_budget_line(v.budget)}")
        if v.escalation:
            lines.append(f"  MANUAL INTERVENTION: {v.escalation['reason']}")
        return "\n".join(lines)


@dataclass(frozen=True)
class RegisteredDefinition:
    """A definition ``register`` stored: its name and version as given, and its hash."""

    name: Any
    version: Any
    hash: str

    def to_json(self) -> dict[str, Any]:
        """name, version, hash."""
        return asdict(self)

    def to_text(self) -> str:
        """One line."""
        return f"registered {self.name} v{self.version} (hash {self.hash[:16]}…)"


@dataclass(frozen=True)
class ResolveReport:
    """What ``resolve`` did: whether it recorded the action, and the saga after it."""

    saga_id: str
    action: str
    recorded: bool
    saga: SagaView

    def to_json(self) -> dict[str, Any]:
        """saga_id, action, recorded, and the saga view."""
        return {"saga_id": self.saga_id, "action": self.action, "recorded": self.recorded,
                "saga": self.saga.model_dump(mode="json")}

    def to_text(self) -> str:
        """One line: recorded and the saga's status, or that it was already recorded."""
        if self.recorded:
            return f"{self.action} recorded on saga {self.saga_id}; now {self.saga.status}"
        return f"{self.action} was already recorded; nothing to do"


_EVIDENCE_SHOWN = ("intended_action", "affected_resource", "expected_result", "residual_risk",
                   "alternatives")


@dataclass(frozen=True)
class QueueReport:
    """The operator queue, nearest deadline first."""

    entries: Sequence[QueueRow]

    def to_json(self) -> list[dict[str, Any]]:
        """Every entry's row."""
        return [asdict(e) for e in self.entries]

    def to_text(self) -> str:
        """Two or more lines per entry: what, deadline, reason and the evidence a human needs."""
        if not self.entries:
            return "the operator queue is empty"
        lines = []
        for e in self.entries:
            lines.append(f"{e.saga_id}  {e.entry}  {e.step_id}/{e.kind}  deadline {e.deadline}")
            lines.append(f"    reason: {e.reason}")
            # evidence is the escalation's free-form record (a JSON object), shown as stored
            for key in _EVIDENCE_SHOWN:
                if e.evidence.get(key):
                    lines.append(f"    {key.replace('_', ' ')}: {e.evidence[key]}")
            gate = _gate_line(e.evidence)
            if gate:
                lines.append(f"    who may answer: {gate}")
                lines += [f"    {line}" for line in running_totals_text(
                    e.evidence["details"]["gate"])]
            details = e.evidence.get("details")
            invariant = details.get("invariant") if isinstance(details, dict) else None
            if isinstance(invariant, str) and invariant:
                lines.append(f"    invariant: {invariant}")
            lines += _correction_lines(details)
        return "\n".join(lines)


def _correction_lines(details: Any) -> list[str]:
    """The pivot's correction an escalation offers (saga_core.engine.corrections: ``details.
    correction``): what it runs, what it does and what it does not undo."""
    offer = details.get("correction") if isinstance(details, dict) else None
    if not isinstance(offer, dict):
        return []
    undone = offer.get("does_not_undo")
    lines = [f"    correction (resolve {offer.get('action')}): {offer.get('tool')} on "
             f"{offer.get('step')}: {offer.get('does')}"]
    if isinstance(undone, list) and undone:
        lines.append(f"    it does not undo: {'; '.join(str(u) for u in undone)}")
    return lines


def _gate_line(evidence: dict[str, Any]) -> str:
    """The role, four-eyes rule and risk class an approval request names (saga_core's
    gate evidence, in ``details.gate``), or "" for an escalation."""
    details = evidence.get("details")
    gate = details.get("gate") if isinstance(details, dict) else None
    if not isinstance(gate, dict) or not gate.get("role"):
        return ""
    risk = f", {gate['risk_class']} risk" if gate.get("risk_class") else ""
    starter = ", not the saga's starter" if gate.get("four_eyes") else ""
    return f"a person with role {gate['role']}{starter}{risk}"


@dataclass(frozen=True)
class SagaListReport:
    """A page of the tenant's sagas, newest first, and where the next page starts."""

    page: SagaPage

    def to_json(self) -> dict[str, Any]:
        """tenant, the sagas' summary rows, and ``next_after`` (null on the last page)."""
        after = self.page.next_after
        return {"tenant": self.page.tenant, "sagas": [asdict(r) for r in self.page.sagas],
                "next_after": str(after) if after else None}

    def to_text(self) -> str:
        """A line per saga, then how to ask for the next page."""
        if not self.page.sagas:
            return f"no sagas for tenant {self.page.tenant}"
        lines = [f"{r.saga_id}  {r.state:<21} {r.definition_name} v{r.definition_version}"
                 f"  started {r.started_at.isoformat(timespec='seconds')}"
                 for r in self.page.sagas]
        if self.page.next_after:
            lines.append(f"more: the same command with --after '{self.page.next_after}'")
        return "\n".join(lines)


@dataclass(frozen=True)
class ProjectionStatusReport:
    """Every projection's table sets and lag."""

    projections: Sequence[ProjectionStatus]

    def to_json(self) -> list[dict[str, Any]]:
        """Each projection with its table sets and its active set's lag."""
        return [{**asdict(p), "lag": asdict(p.lag) if p.lag else None} for p in self.projections]

    def to_text(self) -> str:
        """A line per projection, one per table set."""
        lines = []
        for p in self.projections:
            lines.append(f"{p.name}: active v{p.active_version}")
            for t in p.table_sets:
                lines.append(
                    f"  v{t.version} {t.status:<9} checkpoint {t.checkpoint}"
                    f"  behind {t.events_behind} events / {t.seconds_behind:.1f}s"
                )
        return "\n".join(lines)


@dataclass(frozen=True)
class RebuildSummary:
    """What every rebuild did."""

    rebuilds: Sequence[RebuildReport]

    def to_json(self) -> list[dict[str, Any]]:
        """Each rebuild with its speed."""
        return [{**asdict(r), "events_per_s": round(r.events_per_s, 1)} for r in self.rebuilds]

    def to_text(self) -> str:
        """A line per rebuild."""
        return "\n".join(
            f"{r.name}: v{r.old_version} -> v{r.new_version}, {r.events_applied} events"
            f" in {r.elapsed_s:.1f}s ({round(r.events_per_s, 1)} events/s)"
            for r in self.rebuilds
        )


@dataclass(frozen=True)
class StatsReport:
    """The saga metrics per definition and tool, and the business-risk alerts."""

    metrics: Metrics
    alerts: Sequence[Alert]

    def to_json(self) -> dict[str, Any]:
        """metrics and alerts."""
        return {"metrics": asdict(self.metrics), "alerts": [asdict(a) for a in self.alerts]}

    def to_text(self) -> str:
        """A block per definition, a line per tool, then the alerts."""
        lines = []
        for m in self.metrics.definitions:
            ops = m.operations
            lines += [
                f"{m.definition}: {m.sagas} sagas, {m.finished} finished,"
                f" {m.waiting_for_operator} waiting for an operator",
                f"  completed {_pct(m.completion_rate)}  compensated"
                f" {_pct(m.compensation_rate)}  partially"
                f" {_pct(m.partial_compensation_rate)}  manual"
                f" {_pct(m.manual_intervention_rate)}",
                f"  ambiguous {_pct(ops.ambiguous_outcome_rate)}  reconciled"
                f" {_pct(ops.reconciliation_success_rate)}  duplicate effects"
                f" {ops.duplicate_effect_incidents}  retry amplification"
                f" {ops.retry_amplification:.2f}",
                f"  forward p50/p95 {ops.forward_latency_p50_s}/{ops.forward_latency_p95_s}s"
                f"  compensation p50/p95 {ops.compensation_latency_p50_s}/"
                f"{ops.compensation_latency_p95_s}s",
                f"  invariant restored p50/p95 {m.invariant_restore_p50_s}/"
                f"{m.invariant_restore_p95_s}s  oldest unfinished"
                f" {m.stuck_saga_max_age_s:.0f}s",
            ]
        for t in self.metrics.tools:
            ops = t.operations
            lines.append(
                f"  tool {t.tool} ({t.kind}): {ops.operations_started} ops,"
                f" ambiguous {_pct(ops.ambiguous_outcome_rate)}, duplicates"
                f" {ops.duplicate_effect_incidents}, amplification"
                f" {ops.retry_amplification:.2f}"
            )
        letters = self.metrics.dead_letters
        if letters is not None and letters.recorded:
            lines.append(f"dead letters: {letters.open} open, {letters.recorded} recorded"
                         " (sagafleet dead-letters)")
        if letters is not None and letters.refused:
            lines.append("signed commands refused: " + ", ".join(
                f"{refusal} {count}" for refusal, count in letters.refused.items()))
        lines += [f"ALERT {_alert_line(a)}" for a in self.alerts]
        return "\n".join(lines) or "no sagas yet"


@dataclass(frozen=True)
class AlertsReport:
    """The business-risk alerts."""

    alerts: Sequence[Alert]

    def to_json(self) -> list[dict[str, Any]]:
        """Every alert."""
        return [asdict(a) for a in self.alerts]

    def to_text(self) -> str:
        """A line per alert."""
        return "\n".join(_alert_line(a) for a in self.alerts) or "no alerts"


@dataclass(frozen=True)
class AuditView:
    """A saga's timeline from the log, its hash chain, and its state as of ``--at``."""

    report: AuditReport

    def to_json(self) -> dict[str, Any]:
        """The audit report as data, with ``ok`` and ``tampered`` (as verify's)."""
        doc = {**asdict(self.report), "ok": self.report.ok, "tampered": self.report.tampered}
        if self.report.anchors is not None:
            doc["anchors"] |= {"ok": self.report.anchors.ok,
                               "protection": self.report.anchors.protection}
        return doc

    def to_text(self) -> str:
        """A header with the chain check, a line per event, the state as of then, and the
        integrity checks verify would make of this saga."""
        r = self.report
        chain = "intact" if r.chain_ok else f"BROKEN ({r.chain_break})"
        lines = [f"saga {r.saga_id}: {r.events_total} events, hash chain {chain}"]
        if r.invariant:
            lines.append(f"invariant: {r.invariant}")
        if r.lineage:
            asked = " ".join(f"{k}={v}" for k, v in r.lineage.items())
            lines.append(f"lineage: {asked} tool_contracts={r.definition_hash[:16]}")
        for e in r.timeline:
            extra = " ".join(f"{name}={value}" for name, value in
                             (("step_id", e.step_id), ("kind", e.kind), ("actor", e.actor),
                              ("trace", e.trace_id))
                             if value)
            lines.append(
                f"  v{e.stream_version:<3} @{e.global_position:<8} {e.at}"
                f"  {e.type:<26} {extra}  #{e.event_hash[:12]}"
            )
        if r.state:
            s = r.state.summary
            lines.append(f"state as of {r.at or 'now'}: {s.state} (v{s.stream_version})")
        if r.snapshot_problem:
            lines.append(f"snapshot REFUSED: {r.snapshot_problem}")
        if r.anchors is not None:
            lines += _anchor_lines(r.anchors)
        lines.append("integrity: intact" if r.ok else
                     "integrity: TAMPERED" if r.tampered else "integrity: FAILED")
        return "\n".join(lines)


@dataclass(frozen=True)
class VerifyView:
    """What verify checked and every difference between the read models and the log."""

    report: VerifyReport

    def to_json(self) -> dict[str, Any]:
        """The verify report as data (the anchor findings under ``anchors``), ``ok`` and
        ``tampered``."""
        doc = {**asdict(self.report), "ok": self.report.ok, "tampered": self.report.tampered}
        if self.report.anchors is not None:
            doc["anchors"] |= {"ok": self.report.anchors.ok,
                               "protection": self.report.anchors.protection}
        return doc

    def to_text(self) -> str:
        """A summary line, a line per difference, then OK or the count."""
        r = self.report
        lines = [
            f"{r.projection} v{r.version}: {r.sagas_checked} sagas,"
            f" {r.streams_checked} streams, {r.broken_chains} broken chains,"
            f" {r.snapshots_checked} snapshots re-folded, {len(r.lagging)} lagging"
        ]
        for d in r.differences:
            column = f".{d.column}" if d.column else ""
            lines.append(
                f"  {d.saga_id} {d.table}[{d.key}]{column}: {d.problem}"
                f" (log {d.expected!r}, read model {d.actual!r})"
            )
        if r.anchors is not None:
            lines += _anchor_lines(r.anchors)
        if r.ok:
            lines.append("OK")
        else:
            found = r.anchors.findings if r.anchors is not None else []
            counts = [f"{len(found)} anchor findings"] if found else []
            counts += [f"{len(r.differences)} differences"] if r.differences else []
            lines.append(", ".join(counts))
        return "\n".join(lines)


def _anchor_lines(a: AnchorReport) -> list[str]:
    """The checkpoints verify checked, what they can prove here, and every finding."""
    if a.checkpoints:
        covered = (f"checkpoints: {a.checkpoints} (last {a.last_seq}, hash"
                   f" {(a.last_hash or '')[:16]}…, taken {a.last_taken_at}),"
                   f" {a.events_anchored} events anchored up to {a.anchored_upto},"
                   f" {a.events_not_anchored} after the last checkpoint (not yet anchored)")
    else:
        covered = f"checkpoints: none yet, {a.events_not_anchored} events not anchored"
    lines = [covered, f"  {a.protection}"]
    if a.high_water_mark is not None:
        reach = "" if a.high_water_mark_reached else (
            " — not checked: this server's WAL has not reached it yet (a lagging standby)")
        lines.append(f"  high-water mark kept outside the database: {a.high_water_mark}{reach}")
    if a.lost_in_promotion is not None:
        lines.append(
            f"  LOST IN A PROMOTION: {a.lost_in_promotion}, taken on timeline"
            f" {a.lost_in_promotion.timeline}, is not on this server, which was promoted since"
            " (a later WAL timeline): it went with the old primary's unreplicated tail"
            " (asynchronous replication), not with a table write; the mark is lowered to the"
            " chain this server holds")
    for loss in a.promotion_losses:
        lines.append(f"  earlier promotion: {loss}")
    for f in a.findings:
        where = f" (position {f.position})" if f.position else ""
        lines.append(f"  TAMPERED {f.problem}: {f.message}{where}")
    return lines


@dataclass(frozen=True)
class AnchorView:
    """What ``sagafleet anchor`` did: the checkpoint it took, or that nothing new was final."""

    taken: Checkpoint | None

    def to_json(self) -> dict[str, Any]:
        """``taken`` and, when one was, the checkpoint without its heads (their count)."""
        c = self.taken
        if c is None:
            return {"taken": False}
        return {"taken": True, "seq": c.seq, "anchor_hash": c.anchor_hash,
                "after": str(c.after), "upto": str(c.upto), "events": c.events,
                "streams": len(c.heads), "taken_at": c.taken_at.isoformat(),
                "signed": c.signed, "key_id": c.key_id}

    def to_text(self) -> str:
        """One line; the seq and hash are worth keeping elsewhere (verify --expect-anchor)."""
        c = self.taken
        if c is None:
            return "nothing new below the horizon: no checkpoint taken"
        signed = f"signed with key {c.key_id}" if c.signed else "UNSIGNED (no key configured)"
        return (f"checkpoint {c.seq}: {c.events} events of {len(c.heads)} streams, slice"
                f" ({c.after}, {c.upto}], {signed}\n  keep elsewhere:"
                f" --expect-anchor {c.seq}:{c.anchor_hash}")


@dataclass(frozen=True)
class TraceView:
    """The sagas a trace started (who and what asked) and their events in log order."""

    report: TraceReport

    def to_json(self) -> dict[str, Any]:
        """The trace report as data."""
        return asdict(self.report)

    def to_text(self) -> str:
        """A line per saga with its lineage, then a line per event."""
        r = self.report
        lines = [f"trace {r.trace_id}: {len(r.sagas)} sagas, {len(r.events)} events"
                 + (" (cut at the trace_events limit)" if r.truncated else "")]
        for s in r.sagas:
            asked = " ".join(f"{k}={v}" for k, v in s.lineage.items() if k != "trace_id")
            lines.append(f"  saga {s.saga_id} {s.definition} v{s.definition_version}"
                         f" #{s.definition_hash[:12]} {asked}".rstrip())
        for e in r.events:
            step = " ".join(x for x in (e.step_id, e.kind) if x)
            lines.append(f"    @{e.global_position:<8} {e.saga_id} v{e.stream_version:<3}"
                         f" {e.type:<26} {step}".rstrip())
        return "\n".join(lines)
