"""Secrets are tainted values: where a secret input may flow in a definition, and where not.

A value given for an input field the definition marks ``secret`` never enters the log (the
start keeps it in the vault and records a placeholder); a worker reveals it only into the
arguments of a tool call. So where the definition *sends* it decides who sees it: a tool's
argument is a promise about what the provider does with it, and only an argument the tool
catalogue marks ``secret`` (``payments.capture``'s ``card_token``) promises to treat it as
one. Two rules, checked on every definition when it is registered, on every agent plan and
on every replan (they all pass :func:`saga_core.definitions.validation.definition_problems`), each
naming the step and the field, never a value:

* ``secret_flows_to_public`` — a reference to a secret input field anywhere but as the
  whole value of a secret argument: an ordinary argument (a flight id would carry the card
  token to the airline, which may echo it into its receipt and so into the log), a part of
  a text, a deeper path into the field, a precondition, an argument of a tool that declares
  no argument schema, a compensation's argument that is not secret there.
* ``secret_argument_not_secret`` / ``secret_literal`` — a secret argument given anything
  but a whole secret input field: an input field not marked secret (its value would be
  recorded in clear in ``SagaStarted``), a receipt or a text (already in the log), or a
  literal (stored in the definition itself, and in a plan crossing the broker).

An agent plan declares no input fields: :func:`saga_core.agents.plans.plan_input_fields` derives
them, and a field is secret when *any* of the plan's arguments that take it whole is
secret — not when the first one is — so the first rule then refuses the plan that also
sends it elsewhere.
"""

from __future__ import annotations

from typing import Any

from saga_core.definitions.catalogue import ToolCatalogue
from saga_core.definitions.definition import SagaDefinition, StepDefinition
from saga_core.definitions.templates import Reference, references, whole_reference
from saga_core.errors import Problem, TemplateError

HOW_TO_GIVE = ("write it ${input.<field>} with the field marked secret: true, and give its "
               "value when the saga starts (over the broker: a secret ref)")
"""How a secret argument must be given (the end of every ``secret_*`` problem)."""


def secret_fields(definition: SagaDefinition) -> frozenset[str]:
    """The input fields ``definition`` marks secret."""
    return frozenset(name for name, field in definition.input.items() if field.secret)


def secret_flow_problems(
    definition: SagaDefinition, catalogue: ToolCatalogue
) -> list[Problem]:
    """Every place a secret input flows where it must not, and every secret argument given
    something other than a secret input field (empty: the definition keeps its secrets)."""
    secret = secret_fields(definition)
    problems: list[Problem] = []
    for step in definition.steps:
        for part, tool, version, args, precondition in _operations(step):
            where = f"step {step.id}{part}"
            spec = catalogue.get(tool, version)
            secret_args = frozenset(
                name for name, arg in (spec.args.items() if spec is not None else ())
                if arg.secret)
            for name, template in args.items():
                problems += _argument_problems(where, tool, name, template,
                                               secret_arg=name in secret_args, secret=secret)
            problems += [
                Problem(where + " precondition", "secret_flows_to_public",
                        f"{_text(ref)} is secret: a precondition is shown to operators and "
                        "sent as a plain argument; only an argument the catalogue marks "
                        "secret may take it")
                for ref in _secret_references(precondition, secret)]
    return _unique(problems)


def _operations(step: StepDefinition) -> list[tuple[str, str, int, dict[str, Any], Any]]:
    """The forward operation of a step and its compensation: (part, tool, version, args,
    precondition)."""
    found: list[tuple[str, str, int, dict[str, Any], Any]] = [
        ("", step.tool, step.version, step.args, step.precondition)]
    comp = step.compensation
    if comp is not None:
        found.append((" compensation", comp.tool, comp.version, comp.args, comp.precondition))
    return found


def _argument_problems(where: str, tool: str, name: str, template: Any, *, secret_arg: bool,
                       secret: frozenset[str]) -> list[Problem]:
    """What is wrong with the argument ``name`` of ``tool`` given ``template``."""
    if not secret_arg:
        return [Problem(where, "secret_flows_to_public",
                        f"{_text(ref)} is secret: {tool} does not mark {name!r} secret, so the "
                        "value would reach its provider (and whatever it echoes) in clear; "
                        "only an argument the catalogue marks secret may take it")
                for ref in _secret_references(template, secret)]
    field = input_field_of(template)
    if field is not None and field in secret:
        return []
    try:
        given = references(template)
    except TemplateError:
        return []  # reported as template_syntax
    if not given:
        return [Problem(where, "secret_literal",
                        f"{name} of {tool} is secret: a literal would be stored in the "
                        f"definition (and cross the broker in a plan); {HOW_TO_GIVE}")]
    named = ", ".join(dict.fromkeys(_text(ref) for ref in given))
    return [Problem(where, "secret_argument_not_secret",
                    f"{name} of {tool} is secret but is given {named}, which is not a whole "
                    f"secret input field (its value would be in the log in clear); "
                    f"{HOW_TO_GIVE}")]


def input_field_of(template: Any) -> str | None:
    """The input field ``template`` is exactly a reference to (``${input.card_token}``:
    the whole field, no deeper path), or None (also for a malformed template)."""
    try:
        ref = whole_reference(template)
    except TemplateError:
        return None
    if ref is not None and ref.root == "input" and len(ref.path) == 1:
        return ref.path[0]
    return None


def _secret_references(template: Any, secret: frozenset[str]) -> list[Reference]:
    """The references of ``template`` into a secret input field (none for a malformed
    template: the template check reports it)."""
    if not secret:
        return []
    try:
        found = references(template)
    except TemplateError:
        return []
    return [ref for ref in found if ref.root == "input" and ref.path[0] in secret]


def _text(ref: Reference) -> str:
    return "${" + ref.text + "}"


def _unique(problems: list[Problem]) -> list[Problem]:
    """Each problem once (a field sent twice into one argument is one problem)."""
    return list(dict.fromkeys(problems))
