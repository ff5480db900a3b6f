"""What the saga page shows, gathered for one tenant: the audit (timeline, hash chain, state
as of a log position), the definition the saga runs, its approvals with who answered them,
and the business-risk alerts on it now (projections.saga_alerts).

Everything comes from :func:`projections.audit` — the log, folded afresh, secrets masked,
another tenant's saga not found — and the principal directory (what kind of principal each
approver is). "As of position N" is the audit's own replay: the state, steps, receipts,
queue entries and budget are those folded up to N, while the timeline shows the whole
history with the events after N marked as later.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from application.principals.directory import PrincipalDirectory, PrincipalNotFound
from events import Position
from events.errors import InvalidArgument
from projections import (
    Alert,
    AlertThresholds,
    AuditReport,
    ProjectionContext,
    TimelineEntry,
    audit,
    saga_alerts,
)
from projections.rows import QueueRow, SagaRows, StepRunRow, SummaryRow
from saga_core.definitions.definition import SagaDefinition

APPROVAL_EVENTS = {"ApprovalRequested": "requested", "ApprovalGranted": "granted",
                   "ApprovalDenied": "denied"}
MAX_POSITION_CHARS = 48


@dataclass(frozen=True)
class ApprovalLine:
    """One approval request or answer, and who answered: the name and roles the event
    records, the kind the directory knows the principal as, and how it was authenticated."""

    at: datetime
    global_position: int
    step_id: str
    kind: str
    outcome: str  # requested, granted, denied
    action_hash: str
    approver: str | None
    roles: tuple[str, ...]
    principal_kind: str | None
    authenticated: str
    detail: str


@dataclass(frozen=True)
class ChainMark:
    """The hash-chain verdict on one event: ``ok`` (it and all before it check out),
    ``broken`` (the first event that does not), ``unverified`` (after a break)."""

    verdict: str
    reason: str


@dataclass(frozen=True)
class SagaDetail:
    """One saga as the page shows it, now or as of ``at``."""

    saga_id: str
    tenant: str
    at: Position | int | None
    history: AuditReport
    """The whole history (the timeline and its chain check)."""
    as_of: AuditReport
    """Folded up to ``at`` (the same report as ``history`` when ``at`` is None)."""
    state: SagaRows
    """The read-model rows folded up to ``at`` (``as_of.state``)."""
    definition: SagaDefinition
    approvals: tuple[ApprovalLine, ...]
    alerts: tuple[Alert, ...] = ()
    """The business-risk alerts on the saga now (none shown as of a past position)."""

    @property
    def summary(self) -> SummaryRow:
        """The saga's summary as of ``at``."""
        return self.state.summary

    @property
    def steps(self) -> tuple[StepRunRow, ...]:
        """Every operation's run as of ``at``."""
        return self.state.steps

    @property
    def queue(self) -> tuple[QueueRow, ...]:
        """What waited for a person as of ``at``."""
        return self.state.queue

    @property
    def last_position(self) -> int:
        """The global position of the saga's newest event."""
        return self.history.timeline[-1].global_position

    def included(self, entry: TimelineEntry) -> bool:
        """Whether ``entry`` is at or before ``at`` (part of the state shown)."""
        if self.at is None:
            return True
        if isinstance(self.at, Position):
            return Position.parse(entry.position) <= self.at
        return entry.global_position <= self.at

    def chain_mark(self, entry: TimelineEntry) -> ChainMark:
        """The chain check's verdict on one event of the history."""
        broken = self.history.chain_break_version
        if broken is None:
            return ChainMark("ok", "hash matches its content and links to the one before")
        if entry.stream_version < broken:
            return ChainMark("ok", "hash matches its content and links to the one before")
        if entry.stream_version == broken:
            return ChainMark("broken", self.history.chain_break or "the chain breaks here")
        return ChainMark("unverified", "after the break: the chain cannot vouch for it")


def parse_at(text: str | None) -> Position | int | None:
    """A log position from the replay form: ``N`` (a global position) or ``XID:N``; None
    when empty; InvalidArgument naming the text otherwise."""
    if text is None or not text.strip():
        return None
    value = text.strip()
    if len(value) > MAX_POSITION_CHARS:
        raise InvalidArgument(f"a log position has at most {MAX_POSITION_CHARS} characters")
    if ":" in value:
        return Position.parse(value)
    if not (value.isascii() and value.isdigit()):
        raise InvalidArgument(
            "'as of' takes a log position: N or XID:N (digits)")
    return int(value)


def _approval(entry: TimelineEntry, directory: PrincipalDirectory,
              tenant: str, known: dict[str, str | None]) -> ApprovalLine | None:
    outcome = APPROVAL_EVENTS.get(entry.type)
    if outcome is None:
        return None
    data: dict[str, Any] = entry.data
    approver = data.get("approver") if outcome != "requested" else None
    roles = tuple(str(r) for r in data.get("roles") or ())
    kind = None
    if isinstance(approver, str):
        if approver not in known:
            try:
                known[approver] = str(directory.get(tenant, approver).kind)
            except PrincipalNotFound:  # not (or no longer) in the directory
                known[approver] = None
        kind = known[approver]
    if outcome == "requested":
        authenticated = ""
        gate = data.get("role")
        detail = (f"scope {data.get('scope', '')}; needs role {gate}" if gate
                  else f"scope {data.get('scope', '')}")
        detail += f"; expires {data.get('expires_at', '')}"
    else:
        # A gate admits only an authenticated person holding one of its roles (saga_core.
        # approvals.check_approval), so an answer recorded with roles was one; answers
        # recorded before gates carry no roles and say nothing about how they were proven.
        authenticated = ("yes — by the principal directory (gates admit only authenticated "
                         "persons)" if roles else "not recorded (answered before gates)")
        detail = (f"grant expires {data.get('expires_at', '')}"
                  + (f", up to {data['up_to']}" if data.get("up_to") is not None else "")
                  if outcome == "granted" else "")
        if data.get("reason"):
            detail = "; ".join(part for part in (detail, f"reason: {data['reason']}") if part)
    return ApprovalLine(
        at=entry.at, global_position=entry.global_position, step_id=str(entry.step_id or ""),
        kind=str(entry.kind or "forward"), outcome=outcome,
        action_hash=str(data.get("action_hash", "")), approver=approver, roles=roles,
        principal_kind=kind, authenticated=authenticated, detail=detail)


def saga_detail(ctx: ProjectionContext, directory: PrincipalDirectory, *, tenant: str,
                saga_id: str, at: Position | int | None = None,
                thresholds: AlertThresholds | None = None) -> SagaDetail:
    """The saga page's data for ``tenant`` (SagaNotFound for another tenant's saga, exactly
    as for one that does not exist)."""
    history = audit(ctx, saga_id, tenant=tenant)
    as_of = audit(ctx, saga_id, at, tenant=tenant) if at is not None else history
    state = as_of.state
    if state is None:
        first = history.timeline[0]
        raise InvalidArgument(
            f"the saga starts at position {first.global_position} ({first.position}); "
            f"there is no state as of {at}")
    definition = ctx.definitions.by_hash(state.summary.definition_hash)
    known: dict[str, str | None] = {}
    approvals = tuple(
        line for entry in as_of.timeline
        if (line := _approval(entry, directory, tenant, known)) is not None)
    alerts = tuple(saga_alerts(ctx, tenant=tenant, saga_id=saga_id,
                               thresholds=thresholds)) if at is None else ()
    return SagaDetail(saga_id, tenant, at, history, as_of, state, definition, approvals, alerts)
