"""The evidence a person gets when a saga asks for them, and the escalation that carries it.

``decide`` and the condition rules (:mod:`saga_core.engine.condition_rules`) build every escalation
and
approval request's evidence here: the intended action, the affected resource, the forward
receipt, the reason, the expected result, the residual risk, the deadline, the
alternatives, and the definition's business invariant in plain language when it states one.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from saga_core.contracts import StepKind
from saga_core.definitions.definition import StepDefinition
from saga_core.engine.corrections import correction_for
from saga_core.engine.decision_types import Escalate
from saga_core.engine.events import Evidence
from saga_core.engine.resolution import escalation_alternatives
from saga_core.engine.resolved_commands import redacted_arguments
from saga_core.engine.state import SagaState, StepRun
from saga_core.errors import TemplateError

COMPENSATION = StepKind.COMPENSATION



def evidence_for(
    state: SagaState,
    step: StepDefinition | None,
    run: StepRun | None,
    reason: str,
    now: datetime,
    *,
    alternatives: list[str],
    deadline: datetime | None = None,
    details: Mapping[str, Any] | None = None,
) -> Evidence:
    """The structured evidence for a person deciding about ``run`` of ``step`` (or about
    the saga as a whole when both are None)."""
    deadline = deadline or now + timedelta(seconds=state.definition.escalation_deadline_s)
    invariant = state.definition.invariant
    if invariant:
        # What must hold however the saga ends: the yardstick for every choice offered.
        details = {**(details or {}), "invariant": invariant}
    if step is None or run is None:
        return Evidence(
            intended_action="none", reason=reason, deadline=deadline, alternatives=alternatives,
            details=dict(details or {}),
        )
    tool, version = state.definition.tool_for(step.id, run.kind)
    forward = state.forward[step.id]
    try:
        args = redacted_arguments(state, step.id, run.kind)
    except TemplateError as exc:
        args = {"unresolved": str(exc)}
    undoing = run.kind is COMPENSATION
    if undoing:
        expected = f"{step.id}'s effect undone by {tool}@{version}"
    else:
        expected = f"{step.id} done by {tool}@{version}"
    residual = (
        f"{step.semantics} effect of {step.id} may remain"
        if undoing or step.leaves_effect
        else "none: the step has no effect to undo"
    )
    return Evidence(
        intended_action=f"{run.kind} {step.id}: {tool}@{version}",
        affected_resource=forward.receipt.resource_id if forward.receipt else None,
        forward_receipt=forward.receipt,
        reason=reason,
        expected_result=expected,
        residual_risk=residual,
        deadline=deadline,
        alternatives=alternatives,
        details={
            "args": args,
            "attempt": run.attempt,
            "operation_key": run.operation_key,
            "status": str(run.status),
            "error_class": str(run.error_class) if run.error_class else None,
            **(details or {}),
        },
    )


def escalate(
    state: SagaState,
    step: StepDefinition | None,
    run: StepRun | None,
    reason: str,
    now: datetime,
    *,
    details: Mapping[str, Any] | None = None,
) -> Escalate:
    """Pause the saga in MANUAL_INTERVENTION about ``run`` with ``reason`` and its evidence,
    offering the operator actions that fit it."""
    kind = run.kind if run is not None else None
    step_id = step.id if step is not None else None
    options = escalation_alternatives(state, kind, step_id)
    offer = correction_for(state, step_id, kind)
    if offer is not None:
        # What the pivot's correction would do, and what it would not undo.
        details = {**(details or {}), "correction": offer.as_evidence()}
    evidence = evidence_for(state, step, run, reason, now, alternatives=options, details=details)
    return Escalate(
        reason,
        step.id if step is not None else None,
        run.kind if run is not None else None,
        evidence,
    )
