"""Cumulative limits: which calls of a gated tool count, and what one saga's calls sum to.

A call *counts* from its first claim (its ``StepStarted`` is committed before the tool is
called, so from then on it may have moved money) until it is known not to have: it failed
definitely (``StepFailed`` of any class but ambiguous: the provider refused it or it was never
dispatched) or, for a forward call, its compensation is done (succeeded or marked
compensated). Everything in between counts: started, outcome unknown, being reconciled,
confirmed absent (absence proves nothing about a late commit), verifying, succeeded, forced,
skipped by an operator, and a call scheduled again after any of those. The same rule
releases a tenant window's reservation (:func:`window_releases`); the window itself is
reserved when a worker claims the call (:mod:`application.gate_windows.postgres`).

Each counted call adds the gated amount of the request it was first claimed with (its
templates resolved against the receipts as they were then), so a later receipt cannot
shrink what was sent. A counted call whose amount cannot be judged makes the total unknown,
and an unknown total needs a person.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from saga_core.approval.risk_gates import AmountLimit, RiskGate
from saga_core.contracts import StepKind
from saga_core.definitions.definition import SagaDefinition
from saga_core.definitions.templates import TemplateContext, resolve_template
from saga_core.engine.resolved_commands import (
    operation_action_hash,
    resolve_arguments,
    template_context,
)
from saga_core.engine.state import RunStatus, SagaState, StepRun
from saga_core.errors import TemplateError

_UNDONE = frozenset({RunStatus.SUCCEEDED, RunStatus.FORCED})


@dataclass(frozen=True)
class RunningTotal:
    """What the saga's other counted calls of a gated tool sum to, before this call."""

    amount: Decimal
    calls: int
    # Counted calls whose amount cannot be judged ("step:kind"): the total is unknown.
    unjudged: tuple[str, ...] = ()

    def evidence(self, limit: float, this_call: Decimal | None) -> dict[str, Any]:
        """The running total as the approval evidence shows it."""
        after = self.amount + this_call if this_call is not None and not self.unjudged else None
        return {"limit": limit, "counted_calls": self.calls, "before": _number(self.amount),
                "with_this_call": _number(after) if after is not None else None,
                "unjudged_calls": list(self.unjudged)}


def _number(amount: Decimal) -> int | float:
    """An exact amount as a JSON number (amounts are bounded, so this is finite)."""
    return int(amount) if amount == amount.to_integral_value() else float(amount)


def may_have_moved(state: SagaState, run: StepRun) -> bool:
    """Whether ``run``'s operation counts: claimed, and not known to have had no effect."""
    if run.request_hash is None or run.status is RunStatus.FAILED:
        return False
    if run.kind is StepKind.FORWARD:
        undo = state.compensation.get(run.step_id)
        if undo is not None and undo.status in _UNDONE:
            return False
    return True


def calls_of(state: SagaState, tool: str) -> Iterator[StepRun]:
    """Every run of the saga (forward and compensation, retired steps too) calling ``tool``."""
    definition = state.definition
    for runs in (state.forward, state.compensation):
        for run in runs.values():
            if definition.tool_for(run.step_id, run.kind)[0] == tool:
                yield run


def claimed_arguments(state: SagaState, run: StepRun) -> dict[str, Any]:
    """The arguments ``run`` was first claimed with: its templates resolved against the
    forward receipts as they stood then (raises TemplateError if they do not resolve)."""
    step = state.definition.step(run.step_id)
    if run.kind is StepKind.COMPENSATION:
        if step.compensation is None:
            raise TemplateError(run.step_id, "no compensation")
        template = step.compensation.args
    else:
        template = step.args
    context = template_context(state, run.step_id, run.kind)
    first = run.forward_at_first_claim
    if first is not None:
        receipts = {sid: r.receipt for sid, r in first.items() if r.receipt is not None}
        own = receipts.get(run.step_id) if run.kind is StepKind.COMPENSATION else None
        context = TemplateContext(saga_id=context.saga_id, tenant=context.tenant,
                                  input=context.input, receipts=receipts, own_receipt=own)
    args: dict[str, Any] = resolve_template(template, context)
    return args


def running_total(state: SagaState, step_id: str, kind: StepKind, above: AmountLimit
                  ) -> RunningTotal:
    """What the saga's counted calls of the operation's tool, other than this operation,
    sum to in the amount ``above`` reads."""
    tool, _ = state.definition.tool_for(step_id, kind)
    amount, calls, unjudged = Decimal(0), 0, []
    for run in calls_of(state, tool):
        if (run.step_id, run.kind) == (step_id, kind) or not may_have_moved(state, run):
            continue
        calls += 1
        try:
            value = above.amount(claimed_arguments(state, run))
        except TemplateError:
            value = None
        if value is None:
            unjudged.append(f"{run.step_id}:{run.kind}")
        else:
            amount += value
    return RunningTotal(amount, calls, tuple(unjudged))


def saga_total_doubt(gate: RiskGate, state: SagaState, step_id: str, kind: StepKind,
                     args: dict[str, Any]) -> str | None:
    """Why this call needs a person under the gate's ``saga_total`` (None: it does not, or
    the gate declares none). A call whose own amount cannot be judged is the ``above``
    condition's to report."""
    if gate.saga_total is None or gate.above is None:
        return None
    this_call = gate.above.amount(args)
    if this_call is None:
        return None
    total = running_total(state, step_id, kind, gate.above)
    arg, limit = gate.above.arg, gate.saga_total.limit
    if total.unjudged:
        return (f"the saga total of {arg} cannot be summed: the amount of "
                f"{', '.join(total.unjudged)} cannot be judged")
    after = total.amount + this_call
    if after > Decimal(str(limit)):
        return (f"the saga total of {arg} would be {after:f} ({total.amount:f} in "
                f"{total.calls} earlier call(s) and {this_call:f} now), above {limit:g}")
    return None


def window_releases(before: SagaState, after: SagaState) -> list[str]:
    """The operation keys whose tenant window reservation ``after`` releases: runs of a
    tool with a tenant window that counted in ``before`` and no longer do."""
    definition = after.definition
    if not windowed(definition):
        return []
    released = []
    for runs in (after.forward, after.compensation):
        for run in runs.values():
            spec = definition.tool_spec(run.step_id, run.kind)
            if spec is None or spec.gate is None or spec.gate.tenant_window is None:
                continue
            old = before.run(run.step_id, run.kind) if _has_run(before, run) else None
            if (old is not None and old.operation_key == run.operation_key
                    and may_have_moved(before, old) and not may_have_moved(after, run)):
                released.append(run.operation_key)
    return released


def _has_run(state: SagaState, run: StepRun) -> bool:
    runs = state.forward if run.kind is StepKind.FORWARD else state.compensation
    return run.step_id in runs


# -- the tenant window: what a claim reserves -------------------------------------------------

#: The scope of an approval asked for because a claim would pass the tenant window: only a
#: grant given under it lets a call go over the window (a person saw the window's total).
TENANT_WINDOW_SCOPE = "over_tenant_window"


@dataclass(frozen=True)
class WindowCall:
    """What claiming one operation reserves in its tenant's window: ``window`` names the
    ledger every saga of the tenant shares (``<tool>:<amount arg>``)."""

    window: str
    operation_key: str
    amount: Decimal
    limit: Decimal
    period: timedelta
    # A person granted this very action over the window: reserve whatever the total.
    approved_over: bool


@dataclass(frozen=True)
class WindowTotal:
    """What a window held, before a call, when a claim asked to reserve it."""

    before: Decimal
    calls: int
    reserved: bool

    def evidence(self, call: WindowCall) -> dict[str, Any]:
        """The window as the approval evidence shows it."""
        return {"window": call.window, "limit": _number(call.limit),
                "period": _iso_period(call.period), "counted_calls": self.calls,
                "before": _number(self.before), "with_this_call": _number(self.before
                                                                         + call.amount)}


def _iso_period(period: timedelta) -> str:
    seconds = int(period.total_seconds())
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours}H" if hours else "", f"{minutes}M" if minutes else "",
             f"{secs}S" if secs else ""]
    return "PT" + "".join(parts)


def window_call(state: SagaState, step_id: str, kind: StepKind, now: datetime
                ) -> WindowCall | None:
    """What claiming this operation must reserve in its tenant's window (None: its tool's
    gate has no tenant window, or its amount cannot be judged: then the ``above`` condition
    asked a person, who saw the amount)."""
    spec = state.definition.tool_spec(step_id, kind)
    gate = spec.gate if spec is not None else None
    if gate is None or gate.tenant_window is None or gate.above is None:
        return None
    try:
        args = resolve_arguments(state, step_id, kind)
    except TemplateError:
        return None
    amount = gate.above.amount(args)
    if amount is None:
        return None
    run = state.run(step_id, kind)
    approval = run.approval
    approved_over = (
        approval is not None and approval.status == "granted"
        and approval.scope == TENANT_WINDOW_SCOPE
        and approval.grant_expires_at is not None and now < approval.grant_expires_at
        and approval.action_hash == operation_action_hash(state, step_id, kind)
    )
    window = gate.tenant_window
    return WindowCall(f"{spec.name if spec else ''}:{gate.above.arg}", run.operation_key,
                      amount, Decimal(str(window.limit)), window.period, approved_over)


def windowed(definition: SagaDefinition) -> bool:
    """Whether any tool the definition calls declares a tenant window (most do not: their
    commits skip the window entirely)."""
    return any(t.gate is not None and t.gate.tenant_window is not None
               for t in definition.tools)


def running_totals_text(gate: Mapping[str, Any]) -> list[str]:
    """The running totals of an approval request's gate evidence (``details.gate``), one
    line each, as the console queue and the command line show them."""
    lines = []
    saga = gate.get("saga_total")
    if isinstance(saga, Mapping):
        with_call = saga.get("with_this_call")
        after = f", {with_call:g} with this call" if isinstance(with_call, int | float) else ""
        unjudged = saga.get("unjudged_calls") or []
        doubt = f"; not summable: {', '.join(map(str, unjudged))}" if unjudged else ""
        lines.append(f"saga total: {saga.get('before')} in {saga.get('counted_calls')} "
                     f"earlier call(s){after} (limit {saga.get('limit')}){doubt}")
    window = gate.get("tenant_window")
    if isinstance(window, Mapping) and "before" in window:
        lines.append(f"tenant window {window.get('window')} over {window.get('period')}: "
                     f"{window.get('before')} in {window.get('counted_calls')} call(s), "
                     f"{window.get('with_this_call')} with this call "
                     f"(limit {window.get('limit')})")
    elif isinstance(window, Mapping):
        lines.append(f"tenant window: limit {window.get('limit')} per "
                     f"{window.get('period_s')} s, judged when the call is claimed")
    return lines
