"""Every declared limit, at its edge: the largest input accepted, one just past it refused.

Each refusal is a LimitExceeded (ErrorKind.INVALID_INPUT) whose message names the limit and
the size seen; the pure entries are checked here, the wired ones (client, CLI, worker,
HTTP) in tests/integration/hostile/test_limit_entries.py.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest

from application.messages import MalformedMessage, StepCommand
from saga_core import validate_definition, validate_plan
from saga_core.agents.plans import AgentPlan, PlannedAction, check_plan_document
from saga_core.canonical_json import canonical_json
from saga_core.contracts import Semantics
from saga_core.definitions.catalogue import ToolCatalogue, ToolSpec
from saga_core.definitions.definition import (
    InputField,
    SagaDefinition,
    check_definition_document,
    parse_definition,
)
from saga_core.definitions.documents import MalformedDocument, load_document
from saga_core.definitions.inputs import validate_input
from saga_core.errors import ErrorKind
from saga_core.limits import (
    ALL_LIMITS,
    BATCH_EVENTS,
    COMMAND_MESSAGE_BYTES,
    DEFINITION_BYTES,
    DEFINITION_STEPS,
    DEPENDENCY_EDGES,
    JSON_DEPTH,
    PLAN_ACTIONS,
    PLAN_BYTES,
    POSITION_MAX,
    QUEUE_PAGE_ROWS,
    SAGA_INPUT_BYTES,
    STEP_MESSAGE_BYTES,
    TEMPLATE_REFERENCES,
    YAML_NODES,
    Limit,
    LimitExceeded,
    check_command_message,
    measure_json,
)
from sagafleet.example_sagas import trip_definition

LOOKUP = ToolCatalogue(tools=[ToolSpec(name="lookup", semantics=Semantics.READ_ONLY)])


def _refused(limit: Limit, seen: int | None = None) -> Any:
    """pytest.raises for LimitExceeded naming ``limit`` (and the exact size seen, if given)."""
    pattern = rf"\b{seen}\b.*" if seen is not None else ""
    return pytest.raises(LimitExceeded, match=pattern + rf"the limit {limit.name} of")


def _size(value: Any) -> int:
    return len(canonical_json(value).encode("utf-8"))


def _padded(document: dict[str, Any], field: str, size: int) -> dict[str, Any]:
    """``document`` with a string ``field`` grown so its canonical JSON is ``size`` bytes."""
    base = _size({**document, field: ""})
    return {**document, field: "x" * (size - base)}


def _steps(count: int, deps: int = 0) -> list[dict[str, Any]]:
    """``count`` read-only steps, each depending on up to ``deps`` earlier ones."""
    return [{"id": f"s{i}", "tool": "lookup", "semantics": "read_only",
             "depends_on": [f"s{j}" for j in range(max(0, i - deps), i)]}
            for i in range(count)]


# -- every limit is declared once, with its reason --------------------------------------


def test_every_limit_has_a_unique_name_a_positive_value_and_a_reason() -> None:
    names = [limit.name for limit in ALL_LIMITS]
    assert len(names) == len(set(names))
    for limit in ALL_LIMITS:
        assert limit.value > 0 and len(limit.why) > 20, limit


def test_a_violation_is_invalid_input_naming_the_limit_and_the_size_seen() -> None:
    error = LimitExceeded(DEFINITION_STEPS, "definition 'x' steps", 201)
    assert error.kind is ErrorKind.INVALID_INPUT
    assert str(error) == ("definition 'x' steps is 201 steps, which exceeds the limit "
                          "definition_steps of 200 steps")


# -- definition files: bytes, YAML aliases, nesting --------------------------------------


@pytest.mark.parametrize("syntax", ["yaml", "json"])
def test_a_definition_text_of_exactly_the_limit_parses_and_one_byte_more_is_refused(
    syntax: str,
) -> None:
    # given a definition text padded to exactly definition_bytes
    doc = trip_definition().model_dump(mode="json")
    text = json.dumps(doc)
    text += " " * (DEFINITION_BYTES.value - len(text.encode()))
    assert len(text.encode()) == DEFINITION_BYTES.value
    # then it parses (JSON is YAML), and a byte more is refused before any parsing
    assert load_document(text, "trip", DEFINITION_BYTES, syntax) == doc  # type: ignore[arg-type]
    with _refused(DEFINITION_BYTES, DEFINITION_BYTES.value + 1):
        load_document(text + " ", "trip", DEFINITION_BYTES, syntax)  # type: ignore[arg-type]


def test_a_definition_document_of_exactly_the_limit_validates_and_a_byte_more_is_refused():
    trip = trip_definition().model_dump(mode="json", exclude={"tools"})
    largest = _padded(trip, "description", DEFINITION_BYTES.value)
    check_definition_document(largest)
    assert validate_definition(parse_definition(largest),
                               _trip_catalogue()).description == largest["description"]
    with _refused(DEFINITION_BYTES, DEFINITION_BYTES.value + 1):
        check_definition_document(_padded(trip, "description", DEFINITION_BYTES.value + 1))


def _trip_catalogue() -> ToolCatalogue:
    from sagafleet.example_sagas import trip_tool_catalogue

    return trip_tool_catalogue()


def _alias_yaml(items: int, repeats: int) -> str:
    """A mapping ``a`` holding ``items`` scalars, and ``b`` repeating it ``repeats`` times.

    Nodes: root 1, key a 1, list 1 + items, key b 1, list 1 + repeats x (1 + items)."""
    return ("a: &a [" + ",".join(["x"] * items) + "]\n"
            "b: [" + ",".join(["*a"] * repeats) + "]\n")


def test_yaml_aliases_count_as_what_they_repeat_up_to_the_node_limit() -> None:
    # given 99 scalars under an anchor (100 nodes with their list), repeated by aliases
    nodes = lambda repeats: 5 + 99 + repeats * 100  # noqa: E731
    largest = (YAML_NODES.value - 5 - 99) // 100
    extra = YAML_NODES.value - nodes(largest)  # top up with plain scalars to land exactly
    text = _alias_yaml(99, largest) + "c: [" + ",".join(["y"] * (extra - 2)) + "]\n"
    # then exactly yaml_nodes expanded nodes load, shared as PyYAML shares them
    loaded = load_document(text, "aliases", DEFINITION_BYTES, "yaml")
    assert len(loaded["b"]) == largest and loaded["b"][0] is loaded["a"]
    # and one scalar more is refused while composing, naming the expanded count
    with _refused(YAML_NODES, YAML_NODES.value + 1):
        load_document(text.replace("c: [", "c: [y,"), "aliases", DEFINITION_BYTES, "yaml")


def test_the_alias_bomb_of_issue_20_is_refused_by_the_loader_in_a_few_kilobytes() -> None:
    # given nine lists, each repeating the previous one nine times (9**9 scalars)
    lines = ["name: bomb", "version: 1", "a0: &a0 [" + ",".join(["x"] * 9) + "]"]
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    lines.append("steps: [{id: s, tool: lookup, semantics: read_only, args: {v: *a8}}]")
    text = "\n".join(lines)
    assert len(text) < 4096
    # then the loader stops at the node limit, not after gigabytes
    with pytest.raises(LimitExceeded, match="aliases expanded.*yaml_nodes") as refused:
        SagaDefinition.from_yaml(text)
    assert refused.value.seen < 2 * YAML_NODES.value  # counted up to one alias past it


@pytest.mark.parametrize("syntax", ["yaml", "json"])
def test_documents_nest_to_the_depth_limit_and_no_deeper(syntax: str) -> None:
    deepest = "[" * JSON_DEPTH.value + "]" * JSON_DEPTH.value
    expected: Any = []
    for _ in range(JSON_DEPTH.value - 1):
        expected = [expected]
    assert load_document(deepest, "deep", DEFINITION_BYTES, syntax) == expected  # type: ignore[arg-type]
    with _refused(JSON_DEPTH, JSON_DEPTH.value + 1):
        load_document("[" + deepest + "]", "deep", DEFINITION_BYTES, syntax)  # type: ignore[arg-type]
    # a document a hundred thousand brackets deep is refused the same way, not by the stack
    with _refused(JSON_DEPTH):
        load_document("[" * 100_000, "deep", DEFINITION_BYTES, syntax)  # type: ignore[arg-type]


def test_brackets_inside_json_strings_are_not_nesting() -> None:
    text = json.dumps({"s": "[" * 1000 + '\\"{' * 100})
    assert load_document(text, "strings", DEFINITION_BYTES, "json")["s"].startswith("[[[")


def test_a_document_that_does_not_parse_is_malformed_not_a_yaml_error() -> None:
    with pytest.raises(MalformedDocument, match="broken is not YAML"):
        load_document("a: [1", "broken", DEFINITION_BYTES, "yaml")
    with pytest.raises(MalformedDocument, match="broken is not JSON"):
        load_document("1" * 5000, "broken", DEFINITION_BYTES, "json")  # too many digits


# -- definitions: steps, dependency edges, template references ---------------------------


def _definition(steps: list[dict[str, Any]], **extra: Any) -> SagaDefinition:
    return SagaDefinition.model_validate({"name": "wide", "version": 1, "steps": steps, **extra})


def test_a_definition_of_the_most_steps_validates_and_one_more_is_refused() -> None:
    validate_definition(_definition(_steps(DEFINITION_STEPS.value)), LOOKUP)
    with _refused(DEFINITION_STEPS, DEFINITION_STEPS.value + 1):
        validate_definition(_definition(_steps(DEFINITION_STEPS.value + 1)), LOOKUP)
    # and a document is refused on its step count before any model is built
    with _refused(DEFINITION_STEPS, DEFINITION_STEPS.value + 1):
        check_definition_document({"steps": [{}] * (DEFINITION_STEPS.value + 1)})


def test_a_definition_of_the_most_dependency_edges_validates_and_one_more_is_refused() -> None:
    # 200 steps each depending on up to 10 earlier ones: 1945 edges, topped up to 2000
    steps = _steps(DEFINITION_STEPS.value, deps=10)
    edges = sum(len(s["depends_on"]) for s in steps)
    last = steps[-1]
    last["depends_on"] = [f"s{j}" for j in range(DEFINITION_STEPS.value - 1)][
        : DEPENDENCY_EDGES.value - edges + len(last["depends_on"])]
    assert sum(len(s["depends_on"]) for s in steps) == DEPENDENCY_EDGES.value
    validate_definition(_definition(steps), LOOKUP)
    steps[-2]["depends_on"].append("s0")
    with _refused(DEPENDENCY_EDGES, DEPENDENCY_EDGES.value + 1):
        validate_definition(_definition(steps), LOOKUP)


def test_an_operation_with_the_most_template_references_validates_and_one_more_is_refused():
    refs = lambda n: {"q": "".join(["${input.q}"] * n)}  # noqa: E731
    inputs = {"q": {"type": "string"}}
    step = {"id": "s", "tool": "lookup", "semantics": "read_only"}
    validate_definition(_definition([{**step, "args": refs(TEMPLATE_REFERENCES.value)}],
                                    input=inputs), LOOKUP)
    with _refused(TEMPLATE_REFERENCES, TEMPLATE_REFERENCES.value + 1):
        validate_definition(_definition([{**step, "args": refs(TEMPLATE_REFERENCES.value + 1)}],
                                        input=inputs), LOOKUP)


# -- agent plans --------------------------------------------------------------------------


def test_a_plan_of_the_most_actions_validates_and_one_more_is_refused() -> None:
    actions = [PlannedAction(tool="lookup", args={"n": i}) for i in range(PLAN_ACTIONS.value)]
    assert len(validate_plan(AgentPlan(actions=actions), LOOKUP).steps) == PLAN_ACTIONS.value
    more = [*actions, PlannedAction(tool="lookup", args={"n": -1})]
    with _refused(PLAN_ACTIONS, PLAN_ACTIONS.value + 1):
        validate_plan(AgentPlan(actions=more), LOOKUP)
    with _refused(PLAN_ACTIONS, PLAN_ACTIONS.value + 1):
        check_plan_document({"actions": [{}] * (PLAN_ACTIONS.value + 1)})


def test_a_plan_document_of_exactly_the_byte_limit_passes_and_a_byte_more_is_refused() -> None:
    plan = {"actions": [{"tool": "lookup"}]}
    check_plan_document(_padded(plan, "goal", PLAN_BYTES.value))
    with _refused(PLAN_BYTES, PLAN_BYTES.value + 1):
        check_plan_document(_padded(plan, "goal", PLAN_BYTES.value + 1))


# -- saga input ---------------------------------------------------------------------------


def test_a_saga_input_of_exactly_the_limit_is_valid_and_a_byte_more_is_refused() -> None:
    trip = trip_definition()
    spec = trip.model_copy(update={"input": {**trip.input,
                                             "notes": InputField(type="string", required=False)}})
    from trip_inputs import TRIP_INPUT

    largest = _padded(dict(TRIP_INPUT), "notes", SAGA_INPUT_BYTES.value)
    assert validate_input(spec, largest)["notes"] == largest["notes"]
    with _refused(SAGA_INPUT_BYTES, SAGA_INPUT_BYTES.value + 1):
        validate_input(spec, _padded(dict(TRIP_INPUT), "notes", SAGA_INPUT_BYTES.value + 1))


def test_multibyte_text_is_measured_in_utf8_bytes() -> None:
    value = {"s": "é" * 100}  # 200 bytes of text in 100 characters
    assert measure_json("v", value, SAGA_INPUT_BYTES) == _size(value) == 208


# -- values built of shared references (in-process callers) -------------------------------


def test_a_value_repeating_itself_a_billion_times_is_refused_after_the_limit_not_walked():
    # given 9 levels of lists repeating the level below 9 times (387 million leaves)
    value: Any = ["x"] * 9
    for _ in range(8):
        value = [value] * 9
    # then measuring stops as soon as the lower bound passes the limit
    with pytest.raises(LimitExceeded, match="at least .* saga_input_bytes"):
        measure_json("saga input", {"v": value}, SAGA_INPUT_BYTES)
    # and a value that contains itself is refused by depth, not by the stack
    loop: list[Any] = []
    loop.append(loop)
    with _refused(JSON_DEPTH):
        measure_json("loop", loop, SAGA_INPUT_BYTES)


# -- broker messages ---------------------------------------------------------------------


def test_a_command_message_of_exactly_the_limit_passes_and_a_byte_more_is_refused() -> None:
    kwargs = {"definition": "trip", "input": {}, "reason": ""}
    base = _size([[], kwargs])
    largest = {**kwargs, "reason": "r" * (COMMAND_MESSAGE_BYTES.value - base)}
    assert check_command_message([], largest) == COMMAND_MESSAGE_BYTES.value
    with _refused(COMMAND_MESSAGE_BYTES, COMMAND_MESSAGE_BYTES.value + 1):
        check_command_message([], {**largest, "reason": largest["reason"] + "r"})


def test_a_step_message_of_exactly_the_limit_parses_and_a_byte_more_is_malformed() -> None:
    # the step id pattern allows dots: pad it to land the message on the limit exactly
    base = _size([["s", "", "forward", 1], None])
    step_id = "a" * (STEP_MESSAGE_BYTES.value - base)
    with pytest.raises(MalformedMessage, match="step_id"):  # within the byte limit: parsed,
        StepCommand.parse(["s", step_id, "forward", 1])  # then refused by the id's length
    with pytest.raises(MalformedMessage, match="step_message_bytes"):
        StepCommand.parse(["s", step_id + "a", "forward", 1])


# -- read commands: audit --at, queue --limit, --batch -----------------------------------


def test_audit_at_accepts_positions_up_to_bigint_and_refuses_past_it() -> None:
    from events import InvalidArgument
    from events.eventstore.model import Position
    from sagafleet.commands.reports import _audit_position

    top = POSITION_MAX.value
    assert _audit_position(str(top)) == top
    assert _audit_position(f"{top}:{top}") == Position(top, top)
    with _refused(POSITION_MAX, top + 1):
        _audit_position(str(top + 1))
    with pytest.raises(InvalidArgument, match="position_max"):
        _audit_position("9" * 5000)  # refused before int() reads 5000 digits
    with pytest.raises(InvalidArgument):
        _audit_position("-1")


def test_page_sizes_of_read_commands_are_bounded() -> None:
    from sagafleet.commands.operator import run_queue
    from sagafleet.commands.projector import _checked_batch
    from sagafleet.errors import UsageError
    from sagafleet.settings import Settings

    assert _checked_batch(BATCH_EVENTS.value) == BATCH_EVENTS.value
    with _refused(BATCH_EVENTS, BATCH_EVENTS.value + 1):
        _checked_batch(BATCH_EVENTS.value + 1)
    with pytest.raises(UsageError):
        _checked_batch(0)
    # the queue's page is checked before any database is opened
    with _refused(QUEUE_PAGE_ROWS, QUEUE_PAGE_ROWS.value + 1):
        run_queue(argparse.Namespace(limit=QUEUE_PAGE_ROWS.value + 1, tenant=None, json=True),
                  Settings())
