"""Agent plans: a model proposes allowlisted tool calls; deterministic code decides if they run.

``validate_plan`` turns a plan into an ad-hoc :class:`SagaDefinition` whose semantics and
compensations come from the tool catalogue, never from the plan, or rejects it with every
reason at once. Step ids name the business action (tool + canonical arguments), not the
model's tool-call id or the action's position, so a replan of the same action keeps its
operation key.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from saga_core.contracts import Semantics
from saga_core.definitions.catalogue import ArgSpec, ToolCatalogue
from saga_core.definitions.definition import (
    CompensationCommand,
    InputField,
    InputType,
    SagaDefinition,
    StepDefinition,
)
from saga_core.definitions.secret_flow import input_field_of
from saga_core.definitions.templates import Reference, references
from saga_core.definitions.validation import definition_problems, validate_definition
from saga_core.errors import DefinitionError, PlanRejected, Problem, TemplateError
from saga_core.field_errors import field_errors
from saga_core.keys import JsonArgs, payload_hash
from saga_core.limits import PLAN_ACTIONS, PLAN_BYTES, measure_json


class PlannedAction(BaseModel):
    """One proposed tool call: an allowlisted tool, its arguments, optional id and dependencies."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool: str = Field(min_length=1)
    version: int = Field(default=1, ge=1)
    args: JsonArgs = Field(default_factory=dict)
    id: str | None = None
    # None: depend on the previous action (plans are sequential unless they say otherwise).
    depends_on: list[str] | None = None


class AgentPlan(BaseModel):
    """An ordered list of proposed actions and the goal they serve."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    goal: str = ""
    actions: list[PlannedAction]


def parse_plan(document: Any) -> AgentPlan:
    """A plan from an untrusted document: its size checked first
    (:class:`~saga_core.limits.LimitExceeded`), then every malformed field listed at once
    (:class:`~saga_core.errors.PlanRejected`). Not yet validated against a catalogue."""
    check_plan_document(document)
    try:
        return AgentPlan.model_validate(document)
    except ValidationError as exc:
        raise PlanRejected([
            Problem(f"plan.{err.path}", "malformed", err.message) for err in field_errors(exc)
        ]) from None


def check_plan_document(document: Any, what: str = "agent plan") -> None:
    """Refuse a plan document over ``plan_bytes`` or ``plan_actions`` before any model is
    built from it (:class:`~saga_core.limits.LimitExceeded`)."""
    measure_json(what, document, PLAN_BYTES)
    actions = document.get("actions") if isinstance(document, dict) else None
    if isinstance(actions, list):
        PLAN_ACTIONS.check(f"{what} actions", len(actions))


def action_step_id(action: PlannedAction) -> str:
    """The stable step id of an action: explicit id, else tool name + canonical-args hash."""
    if action.id is not None:
        return action.id
    slug = re.sub(r"[^a-z0-9_]", "_", action.tool.lower()).strip("_") or "action"
    if not slug[0].isalpha():
        slug = f"t_{slug}"
    digest = payload_hash({"tool": action.tool, "version": action.version, "args": action.args})
    return f"{slug}_{digest[:12]}"


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
}


def _arg_type_problems(
    where: str, args: dict[str, Any], specs: dict[str, ArgSpec]
) -> list[Problem]:
    problems = []
    for name, value in args.items():
        spec = specs.get(name)
        if spec is None or spec.type == "any":
            continue
        if isinstance(value, str) and references(value):
            continue  # a template: checked by definition validation, typed at resolution
        wrong_bool = isinstance(value, bool) and spec.type != "boolean"
        if wrong_bool or not isinstance(value, _JSON_TYPES[spec.type]):
            problems.append(Problem(where, "wrong_argument_type", f"{name} must be {spec.type}"))
        elif spec.minimum is not None and isinstance(value, int | float) and value < spec.minimum:
            problems.append(Problem(where, "out_of_range", f"{name} must be >= {spec.minimum}"))
    return problems


def _plan_problems(
    plan: AgentPlan, catalogue: ToolCatalogue, allowlist: set[tuple[str, int]] | None
) -> list[Problem]:
    problems: list[Problem] = []
    if not plan.actions:
        problems.append(Problem("plan", "empty_plan", "a plan needs at least one action"))
    identities = Counter(payload_hash([a.tool, a.version, a.args]) for a in plan.actions)
    for index, action in enumerate(plan.actions):
        where = f"action {index} ({action.tool}@{action.version})"
        if allowlist is not None and (action.tool, action.version) not in allowlist:
            problems.append(Problem(where, "not_allowlisted", "tool is not allowed for this plan"))
        if identities[payload_hash([action.tool, action.version, action.args])] > 1:
            problems.append(
                Problem(where, "duplicate_action", "the same business action appears twice")
            )
        spec = catalogue.get(action.tool, action.version)
        if spec is None:
            continue  # reported by definition validation as unknown_tool
        problems += _arg_type_problems(where, action.args, spec.args)
        needs_undo = spec.semantics in (Semantics.COMPENSABLE, Semantics.OFFSETTABLE)
        if needs_undo and spec.compensation is None:
            problems.append(
                Problem(where, "no_default_compensation", "catalogue declares no compensation")
            )
    return problems


_INPUT_TYPES: dict[str, InputType] = {
    "string": "string", "integer": "integer", "number": "number", "boolean": "boolean",
    "object": "object", "array": "array",
}


def plan_input_fields(plan: AgentPlan, catalogue: ToolCatalogue) -> dict[str, InputField]:
    """The input fields a plan's arguments refer to (``${input.NAME}``), typed as the first
    argument that takes the field whole is (else an object when a reference reads a field
    of it, ``${input.NAME.PART}``, else a string), and secret when *any* argument
    that takes it whole is secret in the catalogue: a plan takes its secrets from the
    start's input (a value, or a secret ref over the broker), never as literals. Secrecy
    taints the field, wherever else the plan refers to it: validation then refuses every
    other place the plan sends it (``secret_flows_to_public``,
    :mod:`saga_core.definitions.secret_flow`)."""
    kinds: dict[str, InputType] = {}
    typed: set[str] = set()  # fields an argument took whole: the first such argument types them
    secret: set[str] = set()
    for action in plan.actions:
        spec = catalogue.get(action.tool, action.version)
        for arg, value in action.args.items():
            arg_spec = spec.args.get(arg) if spec is not None else None
            exact = input_field_of(value)
            if arg_spec is not None and exact is not None and arg_spec.secret:
                secret.add(exact)
            if arg_spec is not None and exact is not None and exact not in typed:
                typed.add(exact)
                kinds[exact] = _INPUT_TYPES.get(arg_spec.type, "string")
            for ref in _input_references(value):
                if ref.root != "input" or not ref.path or ref.path[0] in typed:
                    continue
                if len(ref.path) > 1:  # ${input.stay.nights}: the field holds fields
                    kinds[ref.path[0]] = "object"
                else:
                    kinds.setdefault(ref.path[0], "string")
    return {name: InputField(type=kind, secret=name in secret) for name, kind in kinds.items()}


def _input_references(value: object) -> list[Reference]:
    """The references of one plan argument; none for a malformed template, which the
    definition's own template check reports as a problem (the plan is then rejected)."""
    if not isinstance(value, str):
        return []
    try:
        return references(value)
    except TemplateError:
        return []


def _plan_definition(
    plan: AgentPlan,
    catalogue: ToolCatalogue,
    name: str,
    version: int,
    input_fields: dict[str, InputField],
) -> SagaDefinition:
    steps = []
    previous: str | None = None
    for action in plan.actions:
        step_id = action_step_id(action)
        spec = catalogue.get(action.tool, action.version)
        compensation = None
        if spec is not None and spec.compensation is not None:
            default = spec.compensation
            compensation = CompensationCommand(
                tool=default.tool,
                version=default.version,
                args=default.args,
                precondition=default.precondition,
            )
        deps = (
            action.depends_on if action.depends_on is not None else [previous] if previous else []
        )
        steps.append(
            StepDefinition(
                id=step_id,
                tool=action.tool,
                version=action.version,
                # Unknown tools get a placeholder; validation reports them as unknown_tool.
                semantics=spec.semantics if spec is not None else Semantics.READ_ONLY,
                args=action.args,
                depends_on=deps,
                compensation=compensation,
            )
        )
        previous = step_id
    # The catalogue's plan budget, never the plan's own: an agent cannot widen its limits.
    return SagaDefinition(
        name=name, version=version, input=input_fields, steps=steps,
        budget=catalogue.plan_budget,
    )


def validate_plan(
    plan: AgentPlan,
    catalogue: ToolCatalogue,
    *,
    name: str = "agent_plan",
    version: int = 1,
    input_fields: dict[str, InputField] | None = None,
    allowlist: set[tuple[str, int]] | None = None,
) -> SagaDefinition:
    """An ad-hoc, validated definition for ``plan``, or :class:`PlanRejected` with every reason
    (:class:`~saga_core.limits.LimitExceeded` for more than ``plan_actions`` actions)."""
    PLAN_ACTIONS.check("agent plan actions", len(plan.actions))
    problems = _plan_problems(plan, catalogue, allowlist)
    try:
        fields = {**plan_input_fields(plan, catalogue), **(input_fields or {})}
        definition = _plan_definition(plan, catalogue, name, version, fields)
    except ValidationError as exc:
        problems += [Problem(f"plan {err.path}", "malformed", err.message)
                     for err in field_errors(exc)]
        raise PlanRejected(problems) from exc
    problems += definition_problems(definition, catalogue)
    if problems:
        raise PlanRejected(problems)
    try:
        return validate_definition(definition, catalogue)
    except DefinitionError as exc:  # pragma: no cover - definition_problems already ran
        raise PlanRejected(exc.problems) from exc
