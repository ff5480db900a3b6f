"""Definitions as an agent reads them: what each step does, how it is undone, who must approve.

Everything here is derived from the registered definition (and, for an outlook, the
validated input); nothing is taken from the agent's own description of a plan.
"""

from __future__ import annotations

from typing import Any

from saga_core.contracts import Semantics
from saga_core.definitions.definition import ApprovalPolicy, SagaDefinition, StepDefinition
from saga_core.definitions.templates import references

_UNDO: dict[Semantics, str] = {
    Semantics.READ_ONLY: "nothing to undo (no effect)",
    Semantics.IDEMPOTENT: "nothing to undo (repeating it changes nothing)",
    Semantics.IDEMPOTENT_BY_KEY: "the provider deduplicates it by key",
    Semantics.COMPENSABLE: "undone by its compensation",
    Semantics.OFFSETTABLE: "offset by a new fact (e.g. a refund); the history remains",
    Semantics.IRREVERSIBLE: "cannot be undone; only a declared correction",
}


def approval_rule(policy: ApprovalPolicy | None) -> str | None:
    """The approval policy in words, or None when no person is asked."""
    if policy is None:
        return None
    if policy.required:
        return "always needs a person's approval"
    if policy.above is not None:
        return f"needs a person's approval when {policy.above.arg} > {policy.above.limit:g}"
    return None


def step_semantics(step: StepDefinition) -> dict[str, Any]:
    """One step's declared semantics, undo, pivot and approval rules."""
    described: dict[str, Any] = {
        "step": step.id,
        "tool": f"{step.tool}@{step.version}",
        "semantics": step.semantics.value,
        "undo": _UNDO[step.semantics],
        "compensable": step.compensation is not None,
        "pivot": step.pivot,
        "depends_on": list(step.depends_on),
    }
    if step.compensation is not None:
        described["compensation"] = f"{step.compensation.tool}@{step.compensation.version}"
    rule = approval_rule(step.approval)
    if rule is not None:
        described["approval"] = rule
    if step.compensation is not None:
        comp_rule = approval_rule(step.compensation.approval)
        if comp_rule is not None:
            described["compensation_approval"] = comp_rule
    if step.pivot:
        described["note"] = "point of no return: once it succeeds nothing before it is undone"
    if step.description:
        described["description"] = step.description
    return described


def describe_definition(definition: SagaDefinition) -> dict[str, Any]:
    """A definition for ``list_sagas``: description, step semantics and the input schema."""
    return {
        "name": definition.name,
        "version": definition.version,
        "hash": definition.content_hash(),
        "description": definition.description,
        "steps": [step_semantics(step) for step in definition.steps],
        "input_schema": definition.input_json_schema(),
    }


def _input_value(template: Any, data: dict[str, Any]) -> tuple[bool, Any]:
    """(known, value) of a template that is exactly one ``${input.<field>}`` reference."""
    if not isinstance(template, str):
        return True, template
    refs = references(template)
    whole = len(refs) == 1 and template == "${" + refs[0].text + "}"
    if whole and refs[0].root == "input" and len(refs[0].path) == 1 and refs[0].path[0] in data:
        return True, data[refs[0].path[0]]
    return (False, None) if refs else (True, template)


def _approval_outlook(step: StepDefinition, data: dict[str, Any]) -> str | None:
    policy = step.approval
    if policy is None or (not policy.required and policy.above is None):
        return None
    if policy.required:
        return f"{step.id}: will wait for a person's approval before it runs"
    assert policy.above is not None
    known, value = _input_value(step.args.get(policy.above.arg), data)
    if known and isinstance(value, int | float) and not isinstance(value, bool):
        if value > policy.above.limit:
            return (f"{step.id}: will wait for a person's approval "
                    f"({policy.above.arg} {value:g} > {policy.above.limit:g})")
        return None
    return (f"{step.id}: may wait for a person's approval "
            f"(if {policy.above.arg} > {policy.above.limit:g})")


def outlook(definition: SagaDefinition, data: dict[str, Any]) -> dict[str, Any]:
    """What starting ``definition`` with ``data`` will do, and what may need a human."""
    plan = []
    for step in definition.steps:
        after = f" after {', '.join(step.depends_on)}" if step.depends_on else " at the start"
        plan.append(f"{step.id}: {step.tool} ({step.semantics.value}){after}")
    human = [note for step in definition.steps if (note := _approval_outlook(step, data))]
    pivot = definition.pivot
    if pivot is not None:
        human.append(f"{pivot.id} is the point of no return: a failure after it is retried "
                     "forward or escalated to a person, never undone")
    human.append("a failure that cannot be settled automatically pauses the saga for an "
                 "operator (status MANUAL_INTERVENTION)")
    return {
        "steps": plan,
        "on_failure": "steps that already succeeded are compensated in reverse dependency "
        "order (before the pivot)",
        "may_need_a_human": human,
        "approvals": "given by people through the operator commands; agents cannot approve",
    }
