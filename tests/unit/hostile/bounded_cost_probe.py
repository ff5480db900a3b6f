"""Run in a subprocess under a memory cap by test_bounded_cost.py: hostile documents against
register, validate_plan and start, each answered by success or a typed error.

Generated YAML and JSON with alias chains (each list repeating the previous one), deep
nesting, wide fan-out (many steps, edges, actions, items) and values built of shared
references. Any other outcome (MemoryError under the cap, RecursionError, a stray
TypeError) fails the property; hypothesis then prints the smallest document that did it.
The first argument is the number of examples.
"""

from __future__ import annotations

import json
import resource
import sys
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from saga_core import validate_definition, validate_plan
from saga_core.agents.plans import parse_plan
from saga_core.contracts import Semantics
from saga_core.definitions.catalogue import ToolCatalogue, ToolSpec
from saga_core.definitions.definition import InputField, parse_definition
from saga_core.definitions.documents import Syntax, load_document
from saga_core.definitions.inputs import validate_input
from saga_core.errors import SagaError
from saga_core.limits import DEFINITION_BYTES, INPUT_TEXT_BYTES, PLAN_BYTES
from sagafleet.example_sagas import trip_definition, trip_tool_catalogue

CATALOGUE = ToolCatalogue(tools=[*trip_tool_catalogue().tools,
                                 ToolSpec(name="lookup", semantics=Semantics.READ_ONLY)])
TRIP = trip_definition()
SPEC = TRIP.model_copy(update={"input": {**TRIP.input,
                                         "q": InputField(type="object", required=False)}})
TRIP_INPUT = {"customer_email": "ada@example.com", "flight_id": "F1", "hotel_id": "H1",
              "nights": 2, "amount": 100, "currency": "EUR", "card_token": "tok"}


@st.composite
def payloads(draw: st.DrawFn, syntax: Syntax) -> tuple[str, str]:
    """(anchors to define first, the value that uses them) as flow-style text."""
    shape = draw(st.sampled_from(["aliases", "deep", "wide", "long"] if syntax == "yaml"
                                 else ["deep", "wide", "long"]))
    if shape == "aliases":
        levels, width = draw(st.integers(1, 12)), draw(st.integers(1, 12))
        parts = ["&a0 [" + ",".join(["x"] * width) + "]"]
        parts += [f"&a{i} [" + ",".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
        return "{" + ",".join(f"k{i}: {p}" for i, p in enumerate(parts)) + "}", f"*a{levels - 1}"
    if shape == "deep":
        depth = draw(st.integers(1, 20_000))
        opener, closer = draw(st.sampled_from([("[", "]"), ('{"a":', "}")]))
        return "", opener * depth + "1" + closer * depth
    if shape == "wide":
        return "", "[" + ",".join(["1"] * draw(st.integers(0, 150_000))) + "]"
    return "", json.dumps("x" * draw(st.integers(0, 400_000)))


@st.composite
def definitions(draw: st.DrawFn) -> tuple[Syntax, str]:
    syntax: Syntax = draw(st.sampled_from(["yaml", "json"]))
    anchors, value = draw(payloads(syntax))
    steps = [f'{{"id": "s0", "tool": "lookup", "semantics": "read_only", '
             f'"description": "", "args": {{"v": {value}}}}}']
    fan_out, deps = draw(st.integers(0, 500)), draw(st.integers(0, 60))
    steps += [f'{{"id": "s{i}", "tool": "lookup", "semantics": "read_only", "depends_on": '
              f"{json.dumps([f's{j}' for j in range(max(0, i - deps), i)])}}}"
              for i in range(1, fan_out)]
    extra = f'"x-anchors": {anchors}, ' if anchors else ""
    text = f'{{{extra}"name": "gen", "version": 1, "steps": [{", ".join(steps)}]}}'
    return syntax, text


@st.composite
def plans(draw: st.DrawFn) -> tuple[Syntax, str]:
    syntax: Syntax = draw(st.sampled_from(["yaml", "json"]))
    anchors, value = draw(payloads(syntax))
    actions = [f'{{"tool": "lookup", "args": {{"v": {value}}}}}']
    actions += [f'{{"tool": "lookup", "args": {{"n": {i}}}}}'
                for i in range(draw(st.integers(0, 300)))]
    goal = f"{anchors}" if anchors else '""'
    return syntax, f'{{"goal": {goal}, "actions": [{", ".join(actions)}]}}'


@st.composite
def shared_values(draw: st.DrawFn) -> tuple[int, ...]:
    """How wide each level of an in-process value of shared references is (the value is
    built by :func:`shared_value` inside the property: hypothesis must never print it)."""
    return tuple(draw(st.lists(st.integers(1, 12), min_size=1, max_size=12)))


def shared_value(widths: tuple[int, ...]) -> Any:
    """A list of ``widths[0]`` scalars, repeated ``widths[1]`` times, and so on."""
    value: Any = ["x"] * widths[0]
    for width in widths[1:]:
        value = [value] * width
    return value


def register(syntax: Syntax, text: str) -> None:
    """The pure path of ``sagafleet register``: load, parse, validate against the catalogue."""
    definition = parse_definition(load_document(text, "definition", DEFINITION_BYTES, syntax))
    validate_definition(definition, CATALOGUE)


def propose(syntax: Syntax, text: str) -> None:
    """An agent's plan: load, parse, validate_plan."""
    validate_plan(parse_plan(load_document(text, "plan", PLAN_BYTES, syntax)), CATALOGUE)


def start(text: str) -> None:
    """A saga input as JSON text, as every transport sends it."""
    validate_input(SPEC, load_document(text, "--input", INPUT_TEXT_BYTES, "json"))


def start_in_process(widths: tuple[int, ...]) -> None:
    """A saga input handed over in-process, its ``q`` built of shared references."""
    validate_input(SPEC, {**TRIP_INPUT, "q": {"v": shared_value(widths)}})


ENTRIES = st.one_of(
    st.tuples(st.just(register), definitions()),
    st.tuples(st.just(propose), plans()),
    st.builds(lambda payload: (start, (json.dumps(TRIP_INPUT)[:-1] + f', "q": {{"v": '
                                       f"{payload[1]}}}}}",)), payloads("json")),
    st.builds(lambda widths: (start_in_process, (widths,)), shared_values()),
)


def alias_bomb(levels: int, width: int = 9) -> str:
    """The definition of issue 20: each list repeats the previous one ``width`` times, and
    the last is a step argument (9 levels: 3.4 GB and a MemoryError before the loader)."""
    lines = ["name: bomb", "version: 1", "a0: &a0 [" + ",".join(["x"] * width) + "]"]
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * width) + "]"
              for i in range(1, levels)]
    lines.append(f"steps: [{{id: s, tool: lookup, semantics: read_only, "
                 f"args: {{v: *a{levels - 1}}}}}]")
    return "\n".join(lines) + "\n"


def unbounded_register(levels: int) -> None:
    """The register path before issue 20 (PyYAML's plain safe loader), for the control."""
    import yaml

    from saga_core.definitions.definition import SagaDefinition

    document = yaml.safe_load(alias_bomb(levels))
    document.pop("a0", None)
    validate_definition(SagaDefinition.model_validate(document), CATALOGUE)


def run(examples: int) -> None:
    """Check the property on ``examples`` generated entries, and the known hostile ones."""

    @example((register, ("yaml", alias_bomb(9))))
    @example((register, ("yaml", alias_bomb(8))))
    @example((register, ("yaml", "[" * 100_000)))
    @example((register, ("json", "[" * 100_000)))
    @example((propose, ("json", json.dumps({"actions": [{"tool": "lookup", "args": {"n": i}}
                                                        for i in range(5_000)]}))))
    @example((start_in_process, ((9,) * 9,)))
    @settings(max_examples=examples, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck))
    @given(ENTRIES)
    def typed_error_or_success(entry: tuple[Any, Any]) -> None:
        action, argument = entry
        try:
            action(*argument)
        except SagaError:
            pass  # a typed refusal: the property holds

    typed_error_or_success()


def cap_memory(headroom_bytes: int) -> None:
    """Cap this process's address space at what it uses now plus ``headroom_bytes``."""
    with open("/proc/self/status", encoding="ascii") as status:
        kib = next(int(line.split()[1]) for line in status if line.startswith("VmSize:"))
    cap = kib * 1024 + headroom_bytes
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


if __name__ == "__main__":
    cap_memory(int(sys.argv[2]))
    if sys.argv[1] == "unbounded":  # the control: the old path under the same cap
        unbounded_register(int(sys.argv[3]))
        print("the unbounded path survived")
    else:
        run(int(sys.argv[1]))
        print("property held")
