"""A dry run: what starting a saga would do, computed by the same pure code a real start runs.

:func:`start_event` builds the ``SagaStarted`` a start records (``SagaClient.start`` uses it
for the real one); :func:`plan_start` folds that event into a fresh state (:func:`evolve`)
and reads off, for every step: its place in the dependency graph, its forward command as
:func:`~saga_core.engine.resolved_commands.resolve_command` resolves it for a worker (secret inputs
stay the
placeholders the log records, the values never enter), its operation key, whether its risk
gate will ask a person (:func:`~saga_core.approval.policy.effective_policy` evaluated against
those resolved arguments, as ``decide`` does), and the compensation it would get. Nothing
is written and nothing is called: the answer is a value.

Arguments that reference an earlier step's receipt cannot be known before that step runs;
such an operation is reported with its templates and the steps it waits for, and a gate on
it as "decided when it runs". Operation keys depend on the saga id: a start with an
idempotency key has its saga id already decided (``saga_id_final``), so a dry run with the
key shows exactly the keys the real start will use.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from pydantic import BaseModel, ConfigDict

from saga_core.agents.lineage import Lineage
from saga_core.approval.policy import GatePolicy, effective_policy
from saga_core.contracts import StepKind
from saga_core.definitions.definition import SagaDefinition
from saga_core.definitions.templates import references, resolve_template
from saga_core.engine.events import SagaStarted
from saga_core.engine.resolved_commands import resolve_command, template_context
from saga_core.engine.state import SagaState, evolve
from saga_core.errors import TemplateError
from saga_core.keys import payload_hash


def start_event(
    spec: SagaDefinition, *, saga_id: str, tenant: str, public_input: dict[str, Any],
    key: str | None, actor: str, reason: str, now: datetime, lineage: Lineage | None = None,
) -> SagaStarted:
    """The ``SagaStarted`` a start of ``spec`` records (``public_input``: secret fields
    already replaced by their placeholders; ``lineage``: who and what asked)."""
    return SagaStarted(
        at=now, saga_id=saga_id, tenant=tenant, definition_name=spec.name,
        definition_version=spec.version, definition_hash=spec.content_hash(),
        input=public_input, input_hash=payload_hash(public_input), idempotency_key=key,
        actor=actor, reason=reason, retry_budget=spec.retry_budget, lineage=lineage,
    )


class PlannedGate(BaseModel):
    """A risk gate on one operation: whether it will ask a person, why, and who may answer."""

    model_config = ConfigDict(frozen=True)

    will_ask: bool | None  # None: its arguments are known only when the step runs
    reasons: list[str]
    condition: str
    role: str
    four_eyes: bool
    scope: str
    risk_class: str | None


class PlannedOperation(BaseModel):
    """A step's forward or compensation operation as a worker would send it."""

    model_config = ConfigDict(frozen=True)

    kind: StepKind
    tool: str
    version: int
    operation_key: str
    args: dict[str, Any]  # the arguments known now (all of them when ``waits_for`` is empty)
    request_hash: str | None  # the request's hash a worker will record; None: not known yet
    templates: dict[str, Any]
    waits_for: list[str]
    gate: PlannedGate | None


class PlannedStep(BaseModel):
    """One step of the graph: dependencies, wave, semantics, its operations."""

    model_config = ConfigDict(frozen=True)

    step_id: str
    wave: int  # 0: runs at the start; n: after every step of a lower wave it depends on
    depends_on: list[str]
    semantics: str
    pivot: bool
    forward: PlannedOperation
    compensation: PlannedOperation | None
    undo: str


class BudgetEstimate(BaseModel):
    """The definition's stop conditions and what one attempt of every step would cost."""

    model_config = ConfigDict(frozen=True)

    time_limit_s: float | None
    max_cost: float | None
    on_exceeded: str
    forward_cost: str  # exact decimals as text: every forward step once
    compensation_cost: str  # every compensation once (never refused by a budget)
    within_budget: bool | None  # None: no cost budget declared


class DryRun(BaseModel):
    """What a start would do, written nowhere: the answer of ``--dry-run``."""

    model_config = ConfigDict(frozen=True)

    definition: str
    version: int
    definition_hash: str
    tenant: str
    saga_id: str
    saga_id_final: bool  # True: an idempotency key fixes the saga id, so the keys are final
    input: dict[str, Any]  # as the log would record it (secret fields as placeholders)
    input_hash: str
    order: list[list[str]]  # the waves: steps of one wave may run in parallel
    steps: list[PlannedStep]
    gates: list[str]  # one line per operation that will or may ask a person
    budget: BudgetEstimate | None


def plan_start(spec: SagaDefinition, started: SagaStarted, *, saga_id_final: bool) -> DryRun:
    """What starting ``spec`` with the ``started`` event would do (pure: no I/O, no call)."""
    state = evolve(SagaState.initial(spec), started)
    waves = _waves(spec)
    steps: list[PlannedStep] = []
    for step in spec.steps:
        forward = _operation(state, step.id, StepKind.FORWARD, step.args)
        compensation = None
        if step.compensation is not None:
            compensation = _operation(state, step.id, StepKind.COMPENSATION,
                                      step.compensation.args)
        steps.append(PlannedStep(
            step_id=step.id, wave=waves[step.id], depends_on=list(step.depends_on),
            semantics=step.semantics.value, pivot=step.pivot, forward=forward,
            compensation=compensation, undo=_undo(step.semantics.value, compensation)))
    order = [[s for s in spec.step_ids if waves[s] == n] for n in range(max(waves.values()) + 1)]
    return DryRun(
        definition=spec.name, version=spec.version, definition_hash=spec.content_hash(),
        tenant=started.tenant, saga_id=started.saga_id, saga_id_final=saga_id_final,
        input=dict(started.input), input_hash=started.input_hash, order=order, steps=steps,
        gates=[line for s in steps for line in _gate_lines(s)], budget=_budget(spec))


def _operation(state: SagaState, step_id: str, kind: StepKind, templates: Any) -> PlannedOperation:
    """The operation as resolve_command makes it now; when some arguments wait for an
    earlier receipt, each argument that can be resolved now is (by the same templates and
    context), the rest are kept as templates and named in ``waits_for``."""
    tool, version = state.definition.tool_for(step_id, kind)
    key = state.run(step_id, kind).operation_key
    policy = effective_policy(state.definition, step_id, kind)
    try:
        resolved = resolve_command(state, step_id, kind)
    except TemplateError:
        pass
    else:
        return PlannedOperation(kind=kind, tool=tool, version=version, operation_key=key,
                                args=resolved.args, request_hash=resolved.request_hash,
                                templates=dict(templates), waits_for=[],
                                gate=_gate(policy, resolved.args, resolved.args))
    context = template_context(state, step_id, kind)
    known: dict[str, Any] = {}
    for name, template in dict(templates).items():
        try:
            known[name] = resolve_template(template, context)
        except TemplateError:
            continue
    waits = sorted({ref.step_id or step_id for ref in references(templates)
                    if ref.root in ("steps", "receipt")})
    return PlannedOperation(kind=kind, tool=tool, version=version, operation_key=key,
                            args=known, request_hash=None, templates=dict(templates),
                            waits_for=waits, gate=_gate(policy, known, None))


def _gate(policy: GatePolicy | None, known: dict[str, Any],
          complete: dict[str, Any] | None) -> PlannedGate | None:
    """The gate evaluated as decide evaluates it, on the resolved arguments; when some wait
    for a receipt, only if every argument its conditions read is already known (a gate
    that asks for every call asks whatever they turn out to be)."""
    if policy is None:
        return None
    will_ask: bool | None
    if complete is not None or all(name in known for name in _reads(policy)):
        reasons = policy.reasons(complete if complete is not None else known)
        # A cumulative limit depends on what else runs first: decided when the call runs.
        will_ask = True if reasons else (None if _cumulative(policy) else False)
    elif _always(policy):
        reasons, will_ask = ["every call needs a person"], True
    else:
        reasons, will_ask = [], None
    return PlannedGate(
        will_ask=will_ask, reasons=reasons, condition=_condition(policy), role=policy.role,
        four_eyes=policy.four_eyes, scope=policy.scope,
        risk_class=str(policy.risk_class) if policy.risk_class is not None else None)


def _always(policy: GatePolicy) -> bool:
    """Whether the policy asks a person for every call, whatever its arguments."""
    return ((policy.gate is not None and policy.gate.always)
            or (policy.approval is not None and policy.approval.required))


def _cumulative(policy: GatePolicy) -> bool:
    """Whether the catalogue gate limits a saga's total or a tenant window as well."""
    gate = policy.gate
    return gate is not None and (gate.saga_total is not None or gate.tenant_window is not None)


def _reads(policy: GatePolicy) -> list[str]:
    """The argument names the policy's conditions read."""
    names = policy.gate.arguments() if policy.gate is not None else []
    if policy.approval is not None and policy.approval.above is not None:
        names.append(policy.approval.above.arg)
    return names


def _condition(policy: GatePolicy) -> str:
    """The gate's condition in words (the catalogue's, then the definition's)."""
    parts: list[str] = []
    gate, approval = policy.gate, policy.approval
    if gate is not None:
        if gate.always:
            parts.append("always (catalogue gate)")
        if gate.above is not None:
            parts.append(f"{gate.above.arg} > {gate.above.limit:g} (catalogue gate)")
        if gate.external_recipient is not None:
            parts.append(f"{gate.external_recipient.arg} outside the internal domains "
                         "(catalogue gate)")
        if gate.above is not None and gate.saga_total is not None:
            parts.append(f"the saga's total of {gate.above.arg} > "
                         f"{gate.saga_total.limit:g} (catalogue gate)")
        if gate.above is not None and gate.tenant_window is not None:
            window = gate.tenant_window
            parts.append(f"the tenant's total of {gate.above.arg} over "
                         f"{window.period.total_seconds():g} s > {window.limit:g} "
                         "(catalogue gate)")
    if approval is not None:
        if approval.required:
            parts.append("always (definition)")
        if approval.above is not None:
            parts.append(f"{approval.above.arg} > {approval.above.limit:g} (definition)")
    return "; ".join(dict.fromkeys(parts)) or "per the gate's conditions"


def _gate_lines(step: PlannedStep) -> list[str]:
    lines = []
    for op in (step.forward, step.compensation):
        if op is None or op.gate is None:
            continue
        gate, what = op.gate, f"{step.step_id} ({op.kind})"
        who = f"role {gate.role}" + (", four eyes" if gate.four_eyes else "")
        if gate.will_ask is None:
            lines.append(f"{what}: may ask a person when it runs, if {gate.condition} ({who})")
        elif gate.will_ask:
            lines.append(f"{what}: will ask a person: {'; '.join(gate.reasons)} ({who})")
    return lines


def _undo(semantics: str, compensation: PlannedOperation | None) -> str:
    if compensation is not None:
        return f"compensated by {compensation.tool}@{compensation.version}"
    return {"read_only": "nothing to undo", "idempotent": "nothing to undo",
            "irreversible": "cannot be undone"}.get(semantics, "no compensation declared")


def _waves(spec: SagaDefinition) -> dict[str, int]:
    """Each step's depth in the graph (definitions are validated acyclic)."""
    wave: dict[str, int] = {}
    for step_id in spec.step_ids:
        _depth(spec, step_id, wave)
    return wave


def _depth(spec: SagaDefinition, step_id: str, wave: dict[str, int]) -> int:
    if step_id not in wave:
        deps = spec.step(step_id).depends_on
        wave[step_id] = 1 + max((_depth(spec, d, wave) for d in deps), default=-1)
    return wave[step_id]


def _budget(spec: SagaDefinition) -> BudgetEstimate | None:
    budget = spec.budget
    if budget is None:
        return None
    forward = sum((spec.call_cost(s, StepKind.FORWARD) for s in spec.step_ids), Decimal(0))
    compensation = sum((spec.call_cost(s.id, StepKind.COMPENSATION) for s in spec.steps
                        if s.compensation is not None), Decimal(0))
    within = None if budget.max_cost is None else forward <= Decimal(str(budget.max_cost))
    return BudgetEstimate(
        time_limit_s=budget.time_limit_s, max_cost=budget.max_cost,
        on_exceeded=str(budget.on_exceeded), forward_cost=str(forward),
        compensation_cost=str(compensation), within_budget=within)
