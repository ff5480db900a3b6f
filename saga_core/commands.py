"""Resolving a step's command from state: tool, arguments, precondition, key and request hash.

Workers call :func:`resolve_command` (or :func:`resolve_arguments`) right before claiming; the
orchestrator resolves templates, a model never does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from saga_core.contracts import StepKind
from saga_core.keys import action_hash, payload_hash
from saga_core.state import SagaState
from saga_core.templates import TemplateContext, resolve_template

REDACTED = "<redacted>"


@dataclass(frozen=True)
class ResolvedCommand:
    """Everything a worker needs to call a tool for one operation, templates resolved."""

    step_id: str
    kind: StepKind
    tool: str
    version: int
    args: dict[str, Any]
    precondition: dict[str, Any]
    operation_key: str
    request_hash: str


def template_context(
    state: SagaState, step_id: str, kind: StepKind, *, redact: bool = False
) -> TemplateContext:
    """What this operation's templates resolve against (secret inputs masked if ``redact``)."""
    data = dict(state.input)
    if redact:
        for name, spec in state.definition.input.items():
            if spec.secret and name in data:
                data[name] = REDACTED
    own = state.forward[step_id].receipt if kind is StepKind.COMPENSATION else None
    return TemplateContext(
        saga_id=state.saga_id,
        tenant=state.tenant,
        input=data,
        receipts=state.receipts(),
        own_receipt=own,
    )


def _templates(state: SagaState, step_id: str, kind: StepKind) -> tuple[Any, Any]:
    step = state.definition.step(step_id)
    if kind is StepKind.COMPENSATION:
        if step.compensation is None:
            raise KeyError(f"step {step_id!r} has no compensation")
        return step.compensation.args, step.compensation.precondition
    return step.args, {}


def resolve_command(state: SagaState, step_id: str, kind: StepKind) -> ResolvedCommand:
    """Resolve a step's forward or compensation command; raises TemplateError if it cannot."""
    args_template, precondition_template = _templates(state, step_id, kind)
    context = template_context(state, step_id, kind)
    args = resolve_template(args_template, context)
    precondition = resolve_template(precondition_template, context)
    tool, version = state.definition.tool_for(step_id, kind)
    request = {"tool": tool, "version": version, "args": args, "precondition": precondition}
    return ResolvedCommand(
        step_id=step_id,
        kind=kind,
        tool=tool,
        version=version,
        args=args,
        precondition=precondition,
        operation_key=state.run(step_id, kind).operation_key,
        request_hash=payload_hash(request),
    )


def resolve_arguments(state: SagaState, step_id: str, kind: StepKind) -> dict[str, Any]:
    """The resolved arguments of a step's forward or compensation operation."""
    args: dict[str, Any] = resolve_command(state, step_id, kind).args
    return args


def redacted_arguments(state: SagaState, step_id: str, kind: StepKind) -> dict[str, Any]:
    """Resolved arguments with secret inputs masked: safe for evidence, logs and operators."""
    args_template, _ = _templates(state, step_id, kind)
    resolved: dict[str, Any] = resolve_template(
        args_template, template_context(state, step_id, kind, redact=True)
    )
    return resolved


def operation_action_hash(state: SagaState, step_id: str, kind: StepKind) -> str:
    """The hash an approval of this operation is bound to (saga, step, kind, resolved args)."""
    return action_hash(state.saga_id, step_id, kind, resolve_arguments(state, step_id, kind))
