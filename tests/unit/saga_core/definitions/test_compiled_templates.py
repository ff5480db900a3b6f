"""A compiled template resolves as ``resolve_template`` does: the same value (its types
too), the containers it builds fresh on every call, and the same TemplateError, first error
first.

``resolve_template`` is the reference; the engine resolves through ``compile_template``
(``saga_core.engine.resolved_commands``). Random templates mix whole and embedded
references to every root, literal text with escapes, malformed references, numbers, nulls
and nested dicts and lists; random contexts hold or lack what they reference.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from saga_core.contracts import Receipt
from saga_core.definitions.templates import (
    TemplateContext,
    compile_template,
    resolve_template,
)
from saga_core.errors import TemplateError

NAMES = ("a", "b", "amount", "seat")
STEPS = ("s1", "s2")
FIELDS = ("resource_id", "version", "status", "seat", "amount")

leaves = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=False),
    st.text(max_size=4), st.sampled_from(["", "x", "é", "\x00"]))
json_values = st.recursive(
    leaves,
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.sampled_from(NAMES), inner, max_size=3)),
    max_leaves=6)

references = st.one_of(
    st.builds(lambda path: "input." + ".".join(path),
              st.lists(st.sampled_from(NAMES), min_size=1, max_size=3)),
    st.builds(lambda step, name: f"steps.{step}.receipt.{name}",
              st.sampled_from(STEPS), st.sampled_from(FIELDS)),
    st.builds(lambda name: f"receipt.{name}", st.sampled_from(FIELDS)),
    st.sampled_from(["saga.id", "saga.tenant"]),
    # Malformed: an unknown root or shape, unterminated, empty.
    st.sampled_from(["steps.s1.seat", "saga.name", "nope.x", "receipt", "input"]),
)


@st.composite
def template_strings(draw: st.DrawFn) -> str:
    """Literal text, escapes and references, whole or embedded."""
    parts = draw(st.lists(st.one_of(
        st.builds(lambda ref: "${" + ref + "}", references),
        st.sampled_from(["hold ", "$${literal}", "$", "{", "}", "${unterminated", "${}",
                         "${a..b}", ": "]),
    ), min_size=1, max_size=4))
    return "".join(parts)


templates = st.recursive(
    st.one_of(template_strings(), leaves),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.sampled_from(NAMES), inner, max_size=3)),
    max_leaves=8)

receipts = st.builds(
    Receipt,
    resource_id=st.sampled_from(["r-1", "hold 2"]),
    version=st.one_of(st.none(), st.integers(0, 5)),
    status=st.sampled_from(["ok", "held"]),
    fields=st.dictionaries(st.sampled_from(FIELDS[3:] + ("resource_id",)), json_values,
                           max_size=2),
)

contexts = st.builds(
    TemplateContext,
    saga_id=st.sampled_from(["p1", "9c0e"]),
    tenant=st.sampled_from(["", "acme"]),
    input=st.dictionaries(st.sampled_from(NAMES), json_values, max_size=4),
    receipts=st.dictionaries(st.sampled_from(STEPS), receipts, max_size=2),
    own_receipt=st.one_of(st.none(), receipts),
)


def _outcome(resolve: Any) -> tuple[str, Any]:
    try:
        return "value", resolve()
    except TemplateError as exc:
        return "error", str(exc)


def _typed(value: Any) -> Any:
    """A value with its types spelled out (1 == 1.0 == True, but a resolution keeps types)."""
    if isinstance(value, dict):
        return ("dict", [(key, _typed(item)) for key, item in value.items()])
    if isinstance(value, list):
        return ("list", [_typed(item) for item in value])
    return (type(value).__name__, value)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(template=templates, context=contexts)
def test_a_compiled_template_resolves_as_the_reference_walk(
    template: Any, context: TemplateContext
) -> None:
    compiled = compile_template(template)
    expected = _outcome(lambda: resolve_template(template, context))
    got = _outcome(lambda: compiled(context))
    assert (got[0], _typed(got[1])) == (expected[0], _typed(expected[1]))
    if got[0] == "value":
        # Containers the template builds are new on every call (a caller may change its
        # copy); a whole reference's value is the context's own, as the walk returns it.
        again = compiled(context)
        walked = resolve_template(template, context)
        assert (again is got[1]) == (walked is resolve_template(template, context))


def test_the_first_error_in_document_order_is_raised() -> None:
    template = {"first": "${input.missing}", "second": "${nope.x}", "third": "${saga.id}"}
    context = TemplateContext(saga_id="p1")
    expected = _outcome(lambda: resolve_template(template, context))
    assert expected[0] == "error" and "missing" in expected[1]
    assert _outcome(lambda: compile_template(template)(context)) == expected
    # A malformed reference met first is the error, at resolution time, not when compiled.
    malformed = {"first": "${nope.x}", "second": "${input.missing}"}
    resolver = compile_template(malformed)
    assert _outcome(lambda: resolver(context)) == _outcome(
        lambda: resolve_template(malformed, context))
    assert "expected input" in _outcome(lambda: resolver(context))[1]


def test_whole_references_keep_their_types_and_embedded_ones_interpolate() -> None:
    receipt = Receipt(resource_id="h-1", version=3, fields={"seat": {"row": 4}})
    context = TemplateContext(saga_id="p1", tenant="acme", input={"amount": 12.5},
                              receipts={"s1": receipt}, own_receipt=receipt)
    template = {"amount": "${input.amount}", "seat": "${steps.s1.receipt.seat}",
                "version": "${receipt.version}", "text": "trip ${saga.id}: ${receipt.seat}",
                "literal": "$${input.amount}", "n": [1, None, "${saga.tenant}"]}
    assert compile_template(template)(context) == resolve_template(template, context) == {
        "amount": 12.5, "seat": {"row": 4}, "version": 3, "text": 'trip p1: {"row":4}',
        "literal": "${input.amount}", "n": [1, None, "acme"]}
