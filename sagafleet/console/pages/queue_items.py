"""What the queue page shows of each entry, read from the read models of one tenant.

:func:`queue_items` reads the tenant's operator queue (most urgent first: nearest deadline,
then oldest request), the summary and step rows of the sagas in it, and their definitions
(by hash: the definition store caches them), and makes each entry a :class:`QueueItem`: the seed's
evidence in named fields rather than a dict handed to a renderer. Everything it holds came
through the projections, which mask secret inputs (``projections.masking``); the arguments
were redacted by saga_core when the request was made.

The version an item carries (``seen_version``) is the saga's stream version as the read model
had it when the page was drawn: the actions are bound to it (``SagaClient``'s
``seen_version``), so a person never acts on a state they were not shown.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from application.principals.directory import PrincipalDirectory
from events.definition_store.port import DefinitionNotFound
from projections import ProjectionContext, QueueRow, StepRunRow, SummaryRow, operator_queue
from projections.store import read_rows
from projections.tables import active_version
from saga_core.approval.totals import running_totals_text
from saga_core.contracts import StepKind
from saga_core.definitions.definition import SagaDefinition
from saga_core.engine.resolution import ACTION_EFFECTS, OPERATOR_ACTIONS
from saga_core.engine.state import FORWARD_DONE, RunStatus
from sagafleet.console.amounts import Money, money_of
from sagafleet.console.pages.saga_context import SagaContext, started_contexts

__all__ = ["GateView", "QueueItem", "ResolveChoice", "queue_item", "queue_items",
           "queue_items_of"]

URGENT_WITHIN: Final = timedelta(minutes=10)
"""An entry whose deadline is this close is marked urgent."""


@dataclass(frozen=True)
class GateView:
    """Who may answer an approval request and why a person is asked (the risk gate)."""

    role: str
    four_eyes: bool
    risk_class: str | None
    reasons: tuple[str, ...]
    amount_arg: str | None
    amount: float | None
    # The saga's running total and the tenant window, when the gate declares them.
    totals: tuple[str, ...] = ()


@dataclass(frozen=True)
class ResolveChoice:
    """One typed operator action that fits a paused saga, and what it does."""

    action: str
    effect: str


@dataclass(frozen=True)
class Receipt:
    """A receipt recorded so far in the saga (masked by the read model)."""

    step_id: str
    kind: str
    status: str
    receipt: Mapping[str, Any]


@dataclass(frozen=True)
class QueueItem:
    """One thing waiting for a person, with the evidence to decide it."""

    row: QueueRow
    seen_version: int | None
    saga_state: str
    definition_label: str
    intended_action: str
    arguments: Mapping[str, Any]
    affected_resource: str | None
    receipts: tuple[Receipt, ...]
    on_approve: str
    on_deny: str
    residual_risk: str
    gate: GateView | None
    business_rules: tuple[str, ...]
    choices: tuple[ResolveChoice, ...]
    cancellable: bool
    urgent: bool
    context: SagaContext | None = None
    """Who started the saga, why, its lineage and masked input (None: not read)."""

    @property
    def money(self) -> Money | None:
        """The amount the gate judges, as money (None: no amount, or no currency known)."""
        return money_of(dict(self.arguments), self.gate.amount_arg if self.gate else None)

    @property
    def why_a_person(self) -> str:
        """Why a person is asked, in the gate's own words (the queue row's reason when the
        gate gave none)."""
        if self.gate is not None and self.gate.reasons:
            return "; ".join(self.gate.reasons)
        return self.row.reason

    def starter_excluded(self, name: str) -> bool:
        """Whether ``name`` started this saga and the gate keeps starters out (four eyes)."""
        return (self.gate is not None and self.gate.four_eyes and self.context is not None
                and bool(self.context.starter) and self.context.starter == name)

    @property
    def is_approval(self) -> bool:
        """An approval request (approve/deny), else a manual intervention (resolve/cancel)."""
        return self.row.entry == "approval"

    @property
    def kind(self) -> StepKind:
        """The operation of the step the entry is about."""
        return StepKind.COMPENSATION if self.row.kind == "compensation" else StepKind.FORWARD


def queue_items(ctx: ProjectionContext, *, tenant: str, now: datetime,
                limit: int = 100) -> list[QueueItem]:
    """``tenant``'s queue, most urgent first, each entry with its evidence."""
    return queue_items_of(ctx, operator_queue(ctx, tenant=tenant, limit=limit),
                          tenant=tenant, now=now)


def queue_items_of(ctx: ProjectionContext, rows: Sequence[QueueRow], *, tenant: str,
                   now: datetime,
                   directory: PrincipalDirectory | None = None) -> list[QueueItem]:
    """The entries ``rows`` of ``tenant``'s queue, in their order, each with its evidence
    (and, given the principal directory, who started its saga and why)."""
    if not rows:
        return []
    with ctx.connection() as conn:
        stored = read_rows(conn, active_version(conn, "sagas"), sorted({r.saga_id for r in rows}))
    chosen = []
    for row in rows:
        rows_of = stored.get(row.saga_id)
        summary = rows_of.summary if rows_of else None
        if summary is not None and summary.tenant != tenant:  # never another tenant's
            continue
        definition = _definition(ctx, summary.definition_hash) if summary else None
        chosen.append((row, summary, rows_of.steps if rows_of else (), definition))
    contexts = started_contexts(ctx, directory, tenant=tenant,
                                saga_ids=sorted({row.saga_id for row, *_ in chosen}),
                                definitions={row.saga_id: d for row, _, _, d in chosen}
                                ) if directory is not None else {}
    return [queue_item(row, summary, steps, definition, now, context=contexts.get(row.saga_id))
            for row, summary, steps, definition in chosen]


def _definition(ctx: ProjectionContext, digest: str) -> SagaDefinition | None:
    """The saga's definition (the store caches it by hash: one content per hash), or None
    when the store has none (the entry still shows, without the definition's rules)."""
    try:
        return ctx.definitions.by_hash(digest)
    except DefinitionNotFound:
        return None


def queue_item(row: QueueRow, summary: SummaryRow | None, steps: Sequence[StepRunRow],
               definition: SagaDefinition | None, now: datetime, *,
               context: SagaContext | None = None) -> QueueItem:
    """One entry's evidence, from its rows and definition (pure)."""
    evidence = row.evidence or {}
    raw_details = evidence.get("details")
    details: dict[str, Any] = raw_details if isinstance(raw_details, dict) else {}
    raw_args = details.get("args")
    arguments: dict[str, Any] = raw_args if isinstance(raw_args, dict) else {}
    kind = StepKind.COMPENSATION if row.kind == "compensation" else StepKind.FORWARD
    label = (f"{summary.definition_name} v{summary.definition_version}" if summary
             else row.definition_name)
    return QueueItem(
        row=row,
        seen_version=summary.stream_version if summary else None,
        saga_state=summary.state if summary else "unknown",
        definition_label=label,
        intended_action=str(evidence.get("intended_action") or _operation(row, steps)),
        arguments=arguments,
        affected_resource=evidence.get("affected_resource"),
        receipts=tuple(Receipt(s.step_id, s.kind, s.status, s.receipt)
                       for s in steps if s.receipt),
        on_approve=_on_approve(evidence, definition, row.step_id, kind),
        on_deny=_on_deny(definition, steps, kind),
        residual_risk=str(evidence.get("residual_risk") or ""),
        gate=_gate(details.get("gate")),
        business_rules=_business_rules(definition, row, kind),
        choices=_choices(evidence, row),
        cancellable="cancel" in (evidence.get("alternatives") or ())
        or (summary is not None and not summary.cancel_requested and row.entry == "approval"
            and kind is StepKind.FORWARD),
        urgent=row.deadline is not None and row.deadline - now <= URGENT_WITHIN,
        context=context,
    )


def _operation(row: QueueRow, steps: Sequence[StepRunRow]) -> str:
    step = next((s for s in steps if (s.step_id, s.kind) == (row.step_id, row.kind)), None)
    if step is None:
        return f"{row.kind} {row.step_id}".strip() or "the saga as a whole"
    return f"{row.kind} {row.step_id}: {step.tool}@{step.tool_version}"


def _gate(raw: object) -> GateView | None:
    if not isinstance(raw, dict) or not raw.get("role"):
        return None
    amount = raw.get("amount")
    return GateView(
        role=str(raw["role"]), four_eyes=bool(raw.get("four_eyes")),
        risk_class=str(raw["risk_class"]) if raw.get("risk_class") else None,
        reasons=tuple(str(r) for r in raw.get("reasons") or ()),
        amount_arg=str(raw["amount_arg"]) if raw.get("amount_arg") else None,
        amount=float(amount) if isinstance(amount, int | float) else None,
        totals=tuple(running_totals_text(raw)))


def _on_approve(evidence: Mapping[str, Any], definition: SagaDefinition | None,
                step_id: str, kind: StepKind) -> str:
    expected = str(evidence.get("expected_result") or f"{step_id} runs")
    policy = None
    if definition is not None and definition.has_step(step_id):
        policy = definition.approval_policy(step_id, kind)
    ttl = f"; the grant is valid for {policy.grant_ttl_s / 60:g} minutes" if policy else ""
    return f"the operation runs with these arguments: {expected}{ttl}"


def _on_deny(definition: SagaDefinition | None, steps: Sequence[StepRunRow],
             kind: StepKind) -> str:
    if kind is StepKind.COMPENSATION:
        return ("the compensation does not run: the saga pauses for manual intervention "
                "(the step's effect may remain)")
    pivot = definition.pivot if definition is not None else None
    passed = pivot is not None and any(
        s.step_id == pivot.id and s.kind == "forward" and RunStatus(s.status) in FORWARD_DONE
        for s in steps)
    if passed:
        return ("the operation does not run; the saga is past its pivot, so it pauses for "
                "manual intervention instead of compensating")
    done = sorted(s.step_id for s in steps
                  if s.kind == "forward" and s.status == RunStatus.SUCCEEDED)
    undo = f" ({', '.join(done)} undone in dependency order)" if done else ""
    return f"the operation does not run; the saga compensates what it did{undo}"


def _business_rules(definition: SagaDefinition | None, row: QueueRow,
                    kind: StepKind) -> tuple[str, ...]:
    rules = []
    if row.scope:
        rules.append(f"scope: {row.scope}")
    if definition is not None and definition.has_step(row.step_id):
        step = definition.step(row.step_id)
        described = (step.compensation.description if kind is StepKind.COMPENSATION
                     and step.compensation is not None else step.description)
        if described:
            rules.append(described)
        policy = definition.approval_policy(row.step_id, kind)
        if policy is not None and policy.above is not None:
            rules.append(f"a person approves when {policy.above.arg} is above "
                         f"{policy.above.limit:g}")
        if step.pivot:
            rules.append("this step is the saga's pivot: after it, only forward")
    if definition is not None and definition.description:
        rules.append(definition.description)
    return tuple(rules)


def _choices(evidence: Mapping[str, Any], row: QueueRow) -> tuple[ResolveChoice, ...]:
    if row.entry != "manual_intervention":
        return ()
    offered = evidence.get("alternatives") or ()
    return tuple(ResolveChoice(action, ACTION_EFFECTS[action]) for action in OPERATOR_ACTIONS
                 if action in offered and (row.step_id or action == "resume"))
