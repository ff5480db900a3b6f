"""Registration-time validation of saga definitions: every problem at once, each naming its step.

``validate_definition`` is the gate every definition passes before a saga may start; it returns
the definition bound to the tool contracts it was checked against (``tools`` snapshot).
"""

from __future__ import annotations

import math
from collections import Counter
from decimal import Decimal
from typing import Any

from saga_core.approval.policy import weakening_problems
from saga_core.contracts import RETRYABLE_SEMANTICS, Semantics
from saga_core.definitions.budgets import money
from saga_core.definitions.catalogue import ToolCatalogue, ToolSpec
from saga_core.definitions.definition import RetryPolicy, SagaDefinition, StepDefinition
from saga_core.definitions.input_schema import schema_problems
from saga_core.definitions.secret_flow import secret_flow_problems
from saga_core.definitions.templates import references
from saga_core.errors import DefinitionError, Problem, TemplateError
from saga_core.limits import (
    DEFINITION_STEPS,
    DEPENDENCY_EDGES,
    INVARIANT_CHARS,
    TEMPLATE_REFERENCES,
)


def validate_definition(definition: SagaDefinition, catalogue: ToolCatalogue) -> SagaDefinition:
    """Check every rule; return the definition bound to its tools, or raise all problems."""
    problems = definition_problems(definition, catalogue)
    if problems:
        raise DefinitionError(definition.name, problems)
    used = {(s.tool, s.version) for s in definition.steps} | {
        (s.compensation.tool, s.compensation.version)
        for s in definition.steps
        if s.compensation is not None
    }
    tools = sorted((catalogue.require(n, v) for n, v in used), key=lambda t: (t.name, t.version))
    data = definition.model_dump(mode="json")
    data["tools"] = [t.model_dump(mode="json") for t in tools]
    # Rebuilt (not model_copy) so no cached graph from another instance is carried over.
    return SagaDefinition.model_validate(data)


def definition_problems(definition: SagaDefinition, catalogue: ToolCatalogue) -> list[Problem]:
    """Every rule the definition breaks, in a stable order (empty list: valid).

    A definition over a size limit raises :class:`~saga_core.limits.LimitExceeded` first:
    the graph and template checks below cost steps x edges and must not run on it."""
    check_definition_size(definition)
    problems: list[Problem] = []
    # Each input field must be a JSON Schema the validator can check as declared.
    for name, field in definition.input.items():
        problems += schema_problems(f"input.{name}", field)
    problems += _graph_problems(definition)
    problems += _retry_problems(definition)
    for step in definition.steps:
        problems += _tool_problems(step, catalogue)
        problems += _template_problems(definition, step, catalogue)
    problems += _semantics_problems(definition, catalogue)
    # A definition may add approvals or tighten a tool's gate, never declare a weaker one.
    gates = {(t.name, t.version): t.gate for t in catalogue.tools if t.gate is not None}
    problems += weakening_problems(definition, gates)
    problems += budget_problems(definition, catalogue)
    problems += _condition_problems(definition, catalogue)
    # A secret input goes whole into secret arguments only; they take nothing else.
    problems += secret_flow_problems(definition, catalogue)
    return problems


def check_definition_size(definition: SagaDefinition) -> None:
    """Refuse a definition over ``definition_steps``, ``dependency_edges`` or, for one
    operation, ``template_references`` (a :class:`~saga_core.limits.LimitExceeded`)."""
    DEFINITION_STEPS.check(f"definition {definition.name!r} steps", len(definition.steps))
    edges = sum(len(step.depends_on) for step in definition.steps)
    DEPENDENCY_EDGES.check(f"definition {definition.name!r} depends_on", edges)
    INVARIANT_CHARS.check(f"definition {definition.name!r} invariant", len(definition.invariant))
    for step in definition.steps:
        operations: list[tuple[str, list[Any]]] = [("", [step.args, step.precondition])]
        if step.compensation is not None:
            operations.append(
                (" compensation", [step.compensation.args, step.compensation.precondition]))
        for part, templates in operations:
            TEMPLATE_REFERENCES.check(
                f"step {step.id}{part} templates", sum(_reference_count(t) for t in templates))


def _reference_count(template: Any) -> int:
    """How many ``${`` a template's strings hold (escapes included: an upper bound that
    needs no parse), walked without recursion."""
    count, pending = 0, [template]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            count += item.count("${")
        elif isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return count


def _where(step: StepDefinition, part: str = "") -> str:
    return f"step {step.id}{part}"


def _graph_problems(definition: SagaDefinition) -> list[Problem]:
    problems: list[Problem] = []
    counts = Counter(step.id for step in definition.steps)
    for step_id, count in counts.items():
        if count > 1:
            problems.append(Problem(f"step {step_id}", "duplicate_step", f"declared {count} times"))
    for step in definition.steps:
        for dep in step.depends_on:
            if dep == step.id:
                problems.append(Problem(_where(step), "cycle", "depends on itself"))
            elif dep not in counts:
                problems.append(
                    Problem(_where(step), "unknown_dependency", f"depends on unknown {dep!r}")
                )
    for cycle in _cycles(definition):
        first = cycle[0]
        problems.append(
            Problem(f"step {first}", "cycle", "dependency cycle " + " -> ".join(cycle + [first]))
        )
    return problems


def _cycles(definition: SagaDefinition) -> list[list[str]]:
    """One representative path per cycle found by a colouring DFS (self-loops reported apart)."""
    edges = {s.id: [d for d in s.depends_on if d != s.id] for s in definition.steps}
    colour: dict[str, int] = {}
    found: list[list[str]] = []

    def _visit(node: str, path: list[str]) -> None:
        colour[node] = 1
        path.append(node)
        for dep in edges.get(node, []):
            if dep not in edges:
                continue
            if colour.get(dep) == 1:
                found.append(path[path.index(dep) :])
            elif dep not in colour:
                _visit(dep, path)
        path.pop()
        colour[node] = 2

    for step_id in edges:
        if step_id not in colour:
            _visit(step_id, [])
    return found


def _bound_problems(where: str, policy: RetryPolicy | None) -> list[Problem]:
    if policy is None:
        return []
    problems = []
    if policy.max_attempts is None:
        problems.append(Problem(where, "unbounded_retry", "retry policy needs max_attempts"))
    if policy.max_delay_s is None or not math.isfinite(policy.max_delay_s):
        problems.append(
            Problem(where, "unbounded_retry", "retry policy needs a finite max_delay_s")
        )
    return problems


def _retry_problems(definition: SagaDefinition) -> list[Problem]:
    problems = _bound_problems("definition default_retry", definition.default_retry)
    for step in definition.steps:
        problems += _bound_problems(_where(step, " retry"), step.retry)
        if step.compensation is not None:
            problems += _bound_problems(
                _where(step, " compensation retry"), step.compensation.retry
            )
    return problems


def _args_problems(where: str, args: dict[str, Any], spec: ToolSpec) -> list[Problem]:
    if not spec.args:
        return []  # the tool declares no argument schema: nothing to check against
    problems = []
    for name in args:
        if name not in spec.args:
            problems.append(Problem(where, "unknown_argument", f"{spec.name} takes no {name!r}"))
    for name, arg in spec.args.items():
        if arg.required and name not in args:
            problems.append(Problem(where, "missing_argument", f"{spec.name} needs {name!r}"))
    return problems


def _tool_problems(step: StepDefinition, catalogue: ToolCatalogue) -> list[Problem]:
    problems: list[Problem] = []
    commands = [("", step.tool, step.version, step.args)]
    if step.compensation is not None:
        c = step.compensation
        commands.append((" compensation", c.tool, c.version, c.args))
    for part, name, version, args in commands:
        spec = catalogue.get(name, version)
        if spec is None:
            known = catalogue.versions(name)
            hint = f" (known versions: {known})" if known else ""
            problems.append(
                Problem(
                    _where(step, part), "unknown_tool", f"{name}@{version} not allowlisted{hint}"
                )
            )
            continue
        problems += _args_problems(_where(step, part), args, spec)
        if not part and spec.semantics is not step.semantics:
            problems.append(
                Problem(
                    _where(step),
                    "semantics_mismatch",
                    f"declared {step.semantics} but {name}@{version} is {spec.semantics}",
                )
            )
    if step.approval is not None and step.approval.above is not None:
        if step.approval.above.arg not in step.args:
            problems.append(
                Problem(
                    _where(step, " approval"),
                    "approval_arg",
                    f"no argument {step.approval.above.arg!r}",
                )
            )
    return problems


def _template_problems(
    definition: SagaDefinition, step: StepDefinition, catalogue: ToolCatalogue
) -> list[Problem]:
    problems: list[Problem] = []
    templates: list[tuple[str, Any, bool]] = [
        ("", step.args, False), (" precondition", step.precondition, False)]
    if step.compensation is not None:
        templates.append((" compensation", step.compensation.args, True))
        templates.append((" compensation precondition", step.compensation.precondition, True))
    ancestors = definition.ancestors(step.id) if definition.has_step(step.id) else frozenset()
    for part, template, own_receipt_allowed in templates:
        where = _where(step, part)
        try:
            refs = references(template)
        except TemplateError as exc:
            problems.append(Problem(where, "template_syntax", str(exc)))
            continue
        for ref in refs:
            text = "${" + ref.text + "}"
            if ref.root == "input" and ref.path[0] not in definition.input:
                problems.append(
                    Problem(where, "unknown_input", f"{text}: no input field {ref.path[0]!r}")
                )
            elif ref.root == "receipt":
                if not own_receipt_allowed:
                    problems.append(
                        Problem(
                            where,
                            "own_receipt_in_forward",
                            f"{text}: only compensations may use receipt.*",
                        )
                    )
                else:
                    problems += _field_problem(
                        where, text, catalogue, step.tool, step.version, field=ref.receipt_field
                    )
            elif ref.root == "steps":
                target = ref.step_id or ""
                if not definition.has_step(target):
                    problems.append(
                        Problem(where, "unknown_step_ref", f"{text}: no step {target!r}")
                    )
                elif target not in ancestors:
                    problems.append(
                        Problem(
                            where,
                            "receipt_not_dependency",
                            f"{text}: {target} is not a dependency of {step.id}",
                        )
                    )
                else:
                    other = definition.step(target)
                    problems += _field_problem(
                        where, text, catalogue, other.tool, other.version, field=ref.receipt_field
                    )
    return problems


def _field_problem(
    where: str, text: str, catalogue: ToolCatalogue, tool: str, version: int, *, field: str | None
) -> list[Problem]:
    spec = catalogue.get(tool, version)
    if spec is None or field is None or spec.returns(field):
        return []  # an unknown tool is reported once, by _tool_problems
    return [
        Problem(
            where, "unknown_receipt_field", f"{text}: {tool}@{version} does not return {field!r}"
        )
    ]


def _semantics_problems(definition: SagaDefinition, catalogue: ToolCatalogue) -> list[Problem]:
    problems: list[Problem] = []
    steps = [s for s in definition.steps if definition.has_step(s.id)]
    pivots = [s for s in steps if s.pivot]
    if len(pivots) > 1:
        names = ", ".join(p.id for p in pivots)
        problems.append(
            Problem(f"step {pivots[1].id}", "multiple_pivots", f"only one pivot allowed: {names}")
        )
    for step in steps:
        needs_undo = step.semantics in (Semantics.COMPENSABLE, Semantics.OFFSETTABLE)
        if needs_undo and step.compensation is None:
            problems.append(
                Problem(
                    _where(step),
                    "missing_compensation",
                    f"{step.semantics} step needs a compensation",
                )
            )
        if (
            step.semantics is Semantics.IRREVERSIBLE
            and not step.pivot
            and definition.descendants(step.id)
        ):
            problems.append(
                Problem(
                    _where(step),
                    "irreversible_not_last",
                    "irreversible step must be the pivot or last",
                )
            )
    if len(pivots) == 1:
        pivot = pivots[0]
        before, after = definition.ancestors(pivot.id), definition.descendants(pivot.id)
        for step in steps:
            if step.id != pivot.id and step.id not in before and step.id not in after:
                # A step parallel to the pivot could fail after the point of no return.
                problems.append(
                    Problem(
                        _where(step),
                        "pivot_not_ordered",
                        f"must run before or after pivot {pivot.id}",
                    )
                )
            if step.id in after and not _retryable(step, catalogue):
                problems.append(
                    Problem(
                        _where(step), "after_pivot_not_retryable", f"runs after pivot {pivot.id}"
                    )
                )
    return problems


def _condition_problems(definition: SagaDefinition, catalogue: ToolCatalogue) -> list[Problem]:
    """Deadline and precondition policies that cannot apply: a policy for a time nothing
    declares, and ``compensate`` where the pivot makes undoing impossible."""
    problems: list[Problem] = []
    if definition.invariant and not definition.invariant.strip():
        problems.append(Problem("definition invariant", "blank_invariant",
                                "state the business invariant in words, or leave it out"))
    pivot = definition.pivot
    from_pivot = ({pivot.id} | definition.descendants(pivot.id)
                  if pivot is not None and definition.has_step(pivot.id) else set())
    for step in definition.steps:
        spec = catalogue.get(step.tool, step.version)
        timeout = step.timeout_s if step.timeout_s is not None else (
            spec.timeout_s if spec is not None else None)
        if step.on_timeout is not None and timeout is None:
            problems.append(Problem(_where(step), "policy_without_deadline",
                                    "on_timeout needs timeout_s (on the step or its tool)"))
        for name, policy in (("on_timeout", step.on_timeout),
                             ("on_precondition_failed", step.on_precondition_failed)):
            if policy == "compensate" and step.id in from_pivot:
                problems.append(Problem(_where(step), "compensate_after_pivot",
                                        f"{name}: compensate cannot apply at or after pivot "
                                        f"{pivot.id if pivot else ''}: only retry or escalate"))
        comp = step.compensation
        if comp is not None and comp.on_deadline is not None:
            comp_spec = catalogue.get(comp.tool, comp.version)
            deadline = comp.deadline_s if comp.deadline_s is not None else (
                comp_spec.deadline_s if comp_spec is not None else None)
            if deadline is None:
                problems.append(Problem(_where(step, " compensation"), "policy_without_deadline",
                                        "on_deadline needs deadline_s (here or on its tool)"))
    return problems


def _retryable(step: StepDefinition, catalogue: ToolCatalogue) -> bool:
    spec = catalogue.get(step.tool, step.version)
    return step.semantics in RETRYABLE_SEMANTICS or (spec is not None and spec.dedupes_by_key)


def budget_problems(definition: SagaDefinition, catalogue: ToolCatalogue) -> list[Problem]:
    """What is wrong with a definition's budget: one that limits nothing, or a cost budget
    below one call of every forward step (a saga that could never finish within it)."""
    budget = definition.budget
    if budget is None:
        return []
    if budget.time_limit_s is None and budget.max_cost is None:
        return [Problem("budget", "empty_budget",
                        "a budget needs time_limit_s, max_cost or both")]
    if budget.max_cost is None:
        return []
    least = Decimal(0)
    for step in definition.steps:
        spec = catalogue.get(step.tool, step.version)
        least += money(spec.cost) if spec is not None else Decimal(0)
    if least > money(budget.max_cost):
        return [Problem(
            "budget.max_cost", "budget_below_cost",
            f"max_cost {budget.max_cost:g} is below {least}, the cost of one call of every "
            "forward step: the saga could never finish within it",
        )]
    return []
