"""Resolving a step's command from state: tool, arguments, precondition, key and request hash.

Workers call :func:`resolve_command` (or :func:`resolve_arguments`) right before claiming; the
orchestrator resolves templates, a model never does.

One operation key must mean one request. A key is stable across attempts (retries, lookups,
re-claims after a lease ran out, redelivered messages), so every later attempt under it must
send what the first one was claimed with. :func:`key_reuse` is the one owner of that rule:
``decide`` asks it before it schedules another attempt (or asks for an approval of one), and
a worker asks it again inside the claim's commit, so no tool is called under a key with
another payload; the saga escalates instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from saga_core.contracts import Receipt, StepKind
from saga_core.definitions.derived import Derived
from saga_core.definitions.templates import (
    Reference,
    Resolver,
    TemplateContext,
    compile_template,
    references,
)
from saga_core.engine.state import SagaState
from saga_core.errors import TemplateError
from saga_core.keys import action_hash, payload_hash

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
    return step.args, step.precondition


#: Each operation's templates compiled (args, precondition), by definition content hash,
#: step and kind.
_RESOLVERS: Derived[tuple[str, str, StepKind], tuple[Resolver, Resolver]] = Derived(4096)


def _resolvers(state: SagaState, step_id: str, kind: StepKind) -> tuple[Resolver, Resolver]:
    """The operation's args and precondition templates compiled
    (``saga_core.definitions.templates.compile_template``), once per definition."""
    return _RESOLVERS.get((state.definition.content_hash(), step_id, kind),
                          lambda: _compiled(state, step_id, kind))


def _compiled(state: SagaState, step_id: str, kind: StepKind) -> tuple[Resolver, Resolver]:
    args_template, precondition_template = _templates(state, step_id, kind)
    return compile_template(args_template), compile_template(precondition_template)


def resolve_command(state: SagaState, step_id: str, kind: StepKind) -> ResolvedCommand:
    """Resolve a step's forward or compensation command; raises TemplateError if it cannot."""
    args_of, precondition_of = _resolvers(state, step_id, kind)
    context = template_context(state, step_id, kind)
    args = args_of(context)
    precondition = precondition_of(context)
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
    """The resolved arguments of a step's forward or compensation operation (what
    resolve_command resolves as ``args``, without the precondition and the request hash:
    decide and the gate checks ask for these on every commit)."""
    args_of, _ = _resolvers(state, step_id, kind)
    args: dict[str, Any] = args_of(template_context(state, step_id, kind))
    return args


def redacted_arguments(state: SagaState, step_id: str, kind: StepKind) -> dict[str, Any]:
    """Resolved arguments with secret inputs masked: safe for evidence, logs and operators."""
    args_of, _ = _resolvers(state, step_id, kind)
    resolved: dict[str, Any] = args_of(template_context(state, step_id, kind, redact=True))
    return resolved


def operation_action_hash(state: SagaState, step_id: str, kind: StepKind) -> str:
    """The hash an approval of this operation is bound to (saga, step, kind, resolved args)."""
    return action_hash(state.saga_id, step_id, kind, resolve_arguments(state, step_id, kind))


@dataclass(frozen=True)
class KeyReuse:
    """An attempt whose request differs from the one its operation key was first claimed
    with, and which of the references its templates resolve changed since then."""

    step_id: str
    kind: StepKind
    operation_key: str
    recorded_hash: str
    request_hash: str
    changed: tuple[str, ...]

    @property
    def reason(self) -> str:
        """One paragraph for the escalation: the key, the step, both hashes, what differs."""
        if self.changed:
            what = f"changed since the first attempt: {', '.join(self.changed)}"
        else:
            what = (
                "nothing it resolves from changed since the first attempt, so the "
                "resolution itself differs (was the first attempt recorded by another "
                "sagafleet version?)"
            )
        return (
            f"operation key {self.operation_key} of the {self.kind} operation of step "
            f"{self.step_id!r} was first claimed with request hash {self.recorded_hash}; "
            f"this attempt's request hashes to {self.request_hash} ({what}). One key must "
            "mean one request: the tool is not called under this key again"
        )

    def evidence(self) -> dict[str, Any]:
        """What the escalation's evidence adds to its details."""
        return {
            "recorded_request_hash": self.recorded_hash,
            "request_hash": self.request_hash,
            "changed_since_first_attempt": list(self.changed),
        }


def key_reuse(state: SagaState, resolved: ResolvedCommand) -> KeyReuse | None:
    """Whether sending ``resolved`` would reuse its operation key with another payload (None:
    nothing was claimed under the key yet, or the same request was)."""
    run = state.run(resolved.step_id, resolved.kind)
    recorded = run.request_hash
    if recorded is None or recorded == resolved.request_hash:
        return None
    return KeyReuse(
        step_id=run.step_id,
        kind=run.kind,
        operation_key=run.operation_key,
        recorded_hash=recorded,
        request_hash=resolved.request_hash,
        changed=_changed_references(state, resolved.step_id, resolved.kind),
    )


def pending_key_reuse(state: SagaState, step_id: str, kind: StepKind) -> KeyReuse | None:
    """:func:`key_reuse` for the operation's next attempt as it would resolve now (None
    also when it cannot resolve: that is a failure of its own, recorded elsewhere)."""
    if state.run(step_id, kind).request_hash is None:
        return None  # the common case, without resolving anything
    try:
        resolved = resolve_command(state, step_id, kind)
    except TemplateError:
        return None
    return key_reuse(state, resolved)


def _changed_references(state: SagaState, step_id: str, kind: StepKind) -> tuple[str, ...]:
    """The receipt references of the operation's templates whose value differs between the
    receipts its key was first claimed with and today's (input and identity never change)."""
    first = state.run(step_id, kind).forward_at_first_claim
    if first is None:
        return ()
    receipts = {sid: run.receipt for sid, run in first.items() if run.receipt is not None}
    then = _receipt_context(state, step_id, kind, receipts)
    now = template_context(state, step_id, kind)
    changed: list[str] = []
    for template in _templates(state, step_id, kind):
        for ref in references(template):
            if ref.receipt_field is None:
                continue
            text = "${" + ref.text + "}"
            if _value(then, ref) != _value(now, ref) and text not in changed:
                changed.append(text)
    return tuple(changed)


def _receipt_context(
    state: SagaState, step_id: str, kind: StepKind, receipts: Mapping[str, Receipt]
) -> TemplateContext:
    own = receipts.get(step_id) if kind is StepKind.COMPENSATION else None
    return TemplateContext(saga_id=state.saga_id, tenant=state.tenant, input=dict(state.input),
                           receipts=dict(receipts), own_receipt=own)


_MISSING = object()


def _value(context: TemplateContext, ref: Reference) -> Any:
    try:
        return context.lookup(ref)
    except TemplateError:
        return _MISSING
