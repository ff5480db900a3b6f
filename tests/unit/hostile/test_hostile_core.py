"""Hostile input at the pure entries: definitions, agent plans, saga inputs, broker messages.

Whatever is thrown at them, each entry either accepts the input (and what it accepted is
sound: it re-validates and round-trips) or refuses it with a typed error, never with a
stray KeyError, TypeError, RecursionError or the like.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from application.messages import MalformedMessage, StepCommand
from saga_core import AgentPlan, SagaDefinition, validate_definition, validate_plan
from saga_core.definitions.inputs import validate_input
from saga_core.definitions.templates import parse_reference
from saga_core.errors import DefinitionError, PlanRejected, SagaError
from sagafleet.example_sagas import trip_definition, trip_tool_catalogue

CATALOGUE = trip_tool_catalogue()
TRIP = trip_definition()
TRIP_DOC = TRIP.model_dump(mode="json")
HOSTILE_TEXT = st.one_of(
    st.text(max_size=40),
    st.sampled_from([
        "'; DROP TABLE events; --", "${input.nope}", "${steps.hold_flight.receipt.nope}",
        "${", "}", "${input.amount", "$${input.amount}", "\x00", "a" * 5000, "../../etc/passwd",
        "${saga.id}${saga.id}", "{{7*7}}", "__import__('os').system('id')", "\u202e\u0000",
        "${steps.send_itinerary.receipt.to}", "hold_flight", "payments.capture",
    ]),
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | HOSTILE_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(HOSTILE_TEXT, inner, max_size=3),
    max_leaves=8,
)
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            found += _paths(value, (*prefix, index))
    return found


def _mutated(draw: st.DrawFn, doc: dict[str, Any]) -> Any:
    """The document with a few hostile edits: replaced values, deleted or unknown keys."""
    doc = copy.deepcopy(doc)
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        if not path:
            return draw(JSON_VALUES)  # the whole document replaced
        parent = doc
        for part in path[:-1]:
            parent = parent[part]
        edit = draw(st.sampled_from(["replace", "delete", "add"]))
        last = path[-1]
        if edit == "replace":
            parent[last] = draw(JSON_VALUES)
        elif edit == "delete":
            del parent[last]
        elif isinstance(parent[last], dict):
            parent[last][draw(HOSTILE_TEXT)] = draw(JSON_VALUES)
    return doc


@st.composite
def hostile_definitions(draw: st.DrawFn) -> Any:
    return _mutated(draw, TRIP_DOC)


@FAST
@given(hostile_definitions())
def test_hostile_definitions_are_accepted_soundly_or_refused_typed(doc):
    try:
        definition = SagaDefinition.model_validate(doc)
    except ValidationError:
        return  # refused by shape; the client turns this into a DefinitionError (integration)
    try:
        validated = validate_definition(definition, CATALOGUE)
    except DefinitionError as exc:
        assert exc.problems and all(p.where and p.rule for p in exc.problems)
        return
    # accepted: it survives a round trip with the same hash, and validates again
    again = SagaDefinition.from_json(validated.to_json())
    assert again.content_hash() == validated.content_hash()
    validate_definition(again, CATALOGUE)


TOOL_NAMES = sorted({f"{t.name}" for t in CATALOGUE.tools}) + ["shell.exec", "", "flights.hold "]


@st.composite
def hostile_plans(draw: st.DrawFn) -> Any:
    ids = st.one_of(st.none(), HOSTILE_TEXT, st.sampled_from(["a", "b", "c"]))
    action = st.fixed_dictionaries(
        {"tool": st.sampled_from(TOOL_NAMES) | HOSTILE_TEXT},
        optional={
            "version": st.integers(-2, 3) | JSON_VALUES,
            "args": st.dictionaries(HOSTILE_TEXT, JSON_VALUES, max_size=4) | JSON_VALUES,
            "id": ids,
            "depends_on": st.none() | st.lists(st.sampled_from(["a", "b", "c"]) | HOSTILE_TEXT,
                                               max_size=3),
        },
    )
    plan = {"goal": draw(HOSTILE_TEXT), "actions": draw(st.lists(action, max_size=4))}
    return plan if draw(st.booleans()) else _mutated(draw, plan)


@FAST
@given(hostile_plans())
def test_hostile_agent_plans_are_accepted_soundly_or_refused_typed(doc):
    try:
        plan = AgentPlan.model_validate(doc)
    except ValidationError:
        return  # refused by shape (the client says PlanRejected; integration tests)
    try:
        definition = validate_plan(plan, CATALOGUE)
    except PlanRejected as exc:
        assert exc.problems
        return
    # an accepted plan is a definition that stands on its own
    assert validate_definition(definition, CATALOGUE).content_hash() == definition.content_hash()
    assert all(CATALOGUE.get(s.tool, s.version) is not None for s in definition.steps)


@FAST
@given(st.one_of(st.dictionaries(HOSTILE_TEXT, JSON_VALUES, max_size=8), JSON_VALUES,
                 st.builds(lambda edits: edits, hostile_definitions())))
def test_hostile_saga_inputs_are_normalized_or_refused_typed(data):
    try:
        normalized = validate_input(TRIP, data)
    except SagaError:
        return
    assert set(normalized) <= set(TRIP.input)
    assert validate_input(TRIP, normalized) == normalized


@FAST
@given(HOSTILE_TEXT)
def test_hostile_template_references_parse_or_refuse_typed(text):
    try:
        parse_reference(text)
    except SagaError:
        pass


@FAST
@given(st.one_of(st.lists(JSON_VALUES, max_size=6), JSON_VALUES),
       st.one_of(st.none(), st.dictionaries(HOSTILE_TEXT, JSON_VALUES, max_size=2)))
def test_hostile_broker_arguments_parse_or_are_malformed(args, kwargs):
    try:
        command = StepCommand.parse(args, kwargs)
    except MalformedMessage:
        return
    assert StepCommand.parse(command.as_args()) == command


def test_a_huge_message_is_malformed_not_parsed():
    try:
        StepCommand.parse(["s" * 50_000, "hold_flight", "forward", 1])
    except MalformedMessage as exc:
        assert "exceeds" in str(exc)
    else:
        raise AssertionError("a 50 kB message was accepted")


def test_a_plan_with_a_malformed_template_is_rejected_with_the_template_problem() -> None:
    """Found by the property above: a bare ``${`` in a plan argument raised TemplateError
    from deriving the plan's input fields instead of a PlanRejected naming it."""
    tool = CATALOGUE.tools[0]
    plan = AgentPlan.model_validate({"goal": "g", "actions": [
        {"tool": tool.name, "args": {"x": "${"}}]})
    with pytest.raises(PlanRejected) as refused:
        validate_plan(plan, CATALOGUE)
    assert "template_syntax" in {problem.rule for problem in refused.value.problems}
