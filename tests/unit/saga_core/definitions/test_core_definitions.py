"""Definitions as data: round trips, hashes, input schema and validation, templates, plans."""

from __future__ import annotations

import json

import pytest
from core_harness import trip_input
from pydantic import ValidationError

from saga_core import (
    AgentPlan,
    CompensationCommand,
    DefinitionError,
    InputValidationError,
    PlannedAction,
    PlanRejected,
    Receipt,
    RetryPolicy,
    SagaDefinition,
    Semantics,
    StepDefinition,
    StepKind,
    TemplateContext,
    TemplateError,
    canonical_json,
    resolve_template,
    validate_definition,
    validate_input,
    validate_plan,
)
from saga_core.definitions.definition import InputField
from saga_core.limits import LimitExceeded
from sagafleet.example_sagas import trip_definition, trip_tool_catalogue


def test_trip_round_trips_through_json_and_yaml_with_a_stable_hash() -> None:
    trip = trip_definition()
    assert SagaDefinition.from_json(trip.to_json()) == trip
    assert SagaDefinition.from_yaml(trip.to_yaml()).content_hash() == trip.content_hash()
    changed = SagaDefinition.model_validate({**trip.model_dump(), "version": trip.version + 1})
    assert changed.content_hash() != trip.content_hash()
    assert [t.name for t in trip.tools][:2] == ["email.send_correction", "email.send_itinerary"]


def test_a_copy_with_other_fields_answers_from_its_own_fields() -> None:
    """What a definition derives once (its hash, step and tool tables, its pivot) is kept in
    the instance; a model_copy with an update must not keep the original's answers."""
    trip = trip_definition()
    hotel = trip.step("hold_hotel")
    # Derive everything once on the original, as folding and decide do.
    trip.content_hash(), trip.tool_spec("hold_hotel", StepKind.FORWARD), trip.pivot
    trip.call_cost("hold_hotel", StepKind.FORWARD), trip.ancestors("capture_payment")
    slower = hotel.model_copy(update={"retry": RetryPolicy(max_attempts=2)})
    steps = [slower if step.id == "hold_hotel" else step for step in trip.steps
             if step.id != "send_itinerary"]
    copied = trip.model_copy(update={"version": trip.version + 1, "steps": steps})
    fresh = SagaDefinition.model_validate({**trip.model_dump(), "version": trip.version + 1,
                                           "steps": [s.model_dump() for s in steps]})
    assert copied.content_hash() == fresh.content_hash() != trip.content_hash()
    assert copied.step("hold_hotel").retry.max_attempts == 2
    assert copied.pivot is None and trip.pivot is not None
    assert not copied.has_step("send_itinerary")
    assert trip.model_copy().content_hash() == trip.content_hash()


def test_canonical_json_is_sorted_compact_and_unicode() -> None:
    assert canonical_json({"b": 1, "a": "é"}) == '{"a":"é","b":1}'


def test_input_schema_marks_the_card_token_secret_and_requires_every_field() -> None:
    schema = trip_definition().input_json_schema()
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) == set(trip_input())
    assert schema["properties"]["card_token"]["writeOnly"] is True
    assert schema["properties"]["nights"] == {
        "type": "integer",
        "description": "Nights at the hotel.",
        "minimum": 1,
    }
    json.dumps(schema)  # serializable for an agent's tool-calling


def test_validate_input_lists_every_bad_field() -> None:
    assert validate_input(trip_definition(), trip_input()) == trip_input()
    bad = trip_input(nights=0, amount="12", extra=True)
    del bad["hotel_id"]
    with pytest.raises(InputValidationError) as err:
        validate_input(trip_definition(), bad)
    rules = {(p.where, p.rule) for p in err.value.problems}
    assert rules == {
        ("input.nights", "out_of_range"),
        ("input.amount", "wrong_type"),
        ("input.extra", "unknown_field"),
        ("input.hotel_id", "missing"),
    }
    with pytest.raises(InputValidationError):
        validate_input(trip_definition(), trip_input(nights=True))  # a bool is not an integer


def _broken_definition() -> SagaDefinition:
    s = Semantics
    steps = [
        StepDefinition(
            id="a",
            tool="flights.hold",
            semantics=s.COMPENSABLE,
            depends_on=["c"],
            args={"flight_id": "${input.nope}", "passenger_email": "x"},
        ),
        StepDefinition(
            id="b",
            tool="hotels.hold",
            version=9,
            semantics=s.COMPENSABLE,
            depends_on=["a", "ghost"],
            compensation=CompensationCommand(
                tool="hotels.release", args={"hold_id": "${receipt.resource_id}"}
            ),
        ),
        StepDefinition(
            id="c",
            tool="email.send_itinerary",
            semantics=s.IRREVERSIBLE,
            depends_on=["b"],
            retry=RetryPolicy(max_attempts=3),
            args={
                "to": "${steps.d.receipt.seat}",
                "flight_hold": "x",
                "seat": 1,
                "hotel_hold": "${steps.a.receipt.wingspan}",
                "nights": 1,
                "payment": "p",
            },
        ),
        StepDefinition(
            id="d",
            tool="flights.hold",
            semantics=s.COMPENSABLE,
            args={"flight_id": "f", "passenger_email": "${broken"},
        ),
        StepDefinition(id="d", tool="flights.hold", semantics=s.READ_ONLY),
    ]
    return SagaDefinition(name="broken", version=1, steps=steps)


def test_validation_reports_every_problem_at_once_naming_step_and_rule() -> None:
    with pytest.raises(DefinitionError) as err:
        validate_definition(_broken_definition(), trip_tool_catalogue())
    found = {(p.where, p.rule) for p in err.value.problems}
    expected = {
        ("step d", "duplicate_step"),
        ("step b", "unknown_dependency"),
        ("step a", "cycle"),
        ("step a", "missing_compensation"),
        ("step a", "unknown_input"),
        ("step b", "unknown_tool"),
        ("step c retry", "unbounded_retry"),
        ("step c", "irreversible_not_last"),
        ("step c", "receipt_not_dependency"),
        ("step c", "unknown_receipt_field"),
        ("step d", "template_syntax"),
        ("step d", "semantics_mismatch"),
    }
    assert expected <= found, expected - found
    assert "dependency cycle a -> c -> b -> a" in str(err.value)


def test_pivot_rules_parallel_step_and_non_retryable_step_after_pivot() -> None:
    trip = trip_definition()
    data = trip.model_dump()
    data["tools"] = []
    # a flight hold that runs after the pivot is neither retryable-by-semantics nor... it dedupes,
    # so make it a non-deduping irreversible email instead, and add a parallel step.
    data["steps"].append(
        {
            "id": "late_mail",
            "tool": "email.send_correction",
            "semantics": "irreversible",
            "depends_on": ["send_itinerary"],
            "args": {"to": "x", "original_message": "y"},
            "compensation": None,
        }
    )
    data["steps"].append(
        {
            "id": "side",
            "tool": "flights.hold",
            "semantics": "compensable",
            "args": {"flight_id": "f", "passenger_email": "e"},
            "compensation": {"tool": "flights.release", "args": {"hold_id": "h"}},
        }
    )
    with pytest.raises(DefinitionError) as err:
        validate_definition(SagaDefinition.model_validate(data), trip_tool_catalogue())
    found = {(p.where, p.rule) for p in err.value.problems}
    assert ("step late_mail", "after_pivot_not_retryable") in found
    assert ("step side", "pivot_not_ordered") in found
    assert ("step send_itinerary", "irreversible_not_last") not in found  # it is the pivot


def test_templates_keep_types_when_whole_and_interpolate_when_embedded() -> None:
    ctx = TemplateContext(
        saga_id="s1",
        input={"n": 2, "o": {"k": [1]}},
        receipts={"a": Receipt(resource_id="R1", version=7, fields={"seat": "1A"})},
        own_receipt=Receipt(resource_id="OWN"),
    )
    template = {
        "n": "${input.n}",
        "deep": "${input.o.k}",
        "v": "${steps.a.receipt.version}",
        "text": "n=${input.n} o=${input.o} id=${saga.id}",
        "lit": "$${input.n}",
        "list": ["${receipt.resource_id}", 3, None],
        "seat": "${steps.a.receipt.seat}",
    }
    assert resolve_template(template, ctx) == {
        "n": 2,
        "deep": [1],
        "v": 7,
        "text": 'n=2 o={"k":[1]} id=s1',
        "lit": "${input.n}",
        "list": ["OWN", 3, None],
        "seat": "1A",
    }
    for bad in ("${input.missing}", "${steps.b.receipt.x}", "${unknown.x}", "${input.n"):
        with pytest.raises(TemplateError):
            resolve_template(bad, ctx)


def test_plan_takes_semantics_and_compensation_from_the_catalogue() -> None:
    plan = AgentPlan(
        actions=[
            PlannedAction(
                tool="flights.hold", id="fl", args={"flight_id": "LH1", "passenger_email": "a@b"}
            ),
            PlannedAction(
                tool="payments.capture",
                id="pay",
                args={
                    "amount": 100,
                    "currency": "EUR",
                    "card_token": "${input.card_token}",
                    "reference": "${steps.fl.receipt.resource_id}",
                },
            ),
        ]
    )
    definition = validate_plan(plan, trip_tool_catalogue())
    fl, pay = definition.steps
    assert pay.depends_on == ["fl"]
    assert fl.semantics is Semantics.COMPENSABLE and fl.compensation is not None
    assert fl.compensation.tool == "flights.release"
    assert pay.compensation is not None and pay.compensation.tool == "payments.refund"
    assert definition.tools  # bound to the tool contracts
    # and the secret argument comes from the start's input, a secret field of it
    assert definition.input["card_token"].secret


def test_a_plan_giving_a_secret_argument_as_a_literal_is_rejected() -> None:
    # a literal would be stored in the plan's definition (and cross the broker)
    plan = AgentPlan(actions=[PlannedAction(
        tool="payments.capture",
        args={"amount": 100, "currency": "EUR", "card_token": "tok_visa_4242"})])
    with pytest.raises(PlanRejected, match="secret_literal") as rejected:
        validate_plan(plan, trip_tool_catalogue())
    assert "tok_visa_4242" not in str(rejected.value)


def test_plan_rejections_list_every_reason() -> None:
    mail = PlannedAction(
        tool="email.send_itinerary",
        args={
            "to": "a",
            "flight_hold": "f",
            "seat": 1,
            "hotel_hold": "h",
            "nights": "two",
            "payment": "p",
        },
    )
    dup = PlannedAction(tool="flights.hold", args={"flight_id": "LH1", "passenger_email": "a"})
    plan = AgentPlan(
        actions=[
            mail,
            PlannedAction(tool="rm.rf", args={}),
            PlannedAction(
                tool="hotels.hold",
                args={"hotel_id": "h", "nights": 1, "guest_email": "${steps.zz.receipt.x}"},
            ),
            dup,
            dup,
        ]
    )
    with pytest.raises(PlanRejected) as err:
        validate_plan(
            plan,
            trip_tool_catalogue(),
            allowlist={("flights.hold", 1), ("email.send_itinerary", 1), ("hotels.hold", 1)},
        )
    rules = {p.rule for p in err.value.problems}
    assert {
        "wrong_argument_type",
        "duplicate_action",
        "not_allowlisted",
        "unknown_tool",
        "irreversible_not_last",
        "unknown_step_ref",
    } <= rules
    with pytest.raises(PlanRejected, match="empty_plan"):
        validate_plan(AgentPlan(actions=[]), trip_tool_catalogue())


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
def test_non_finite_numbers_in_plans_and_definitions_are_refused_by_name(bad: float) -> None:
    # Found by the hostile-plan property test: inf once crashed the plan's hash with a bare
    # ValueError. JSON has no such numbers, so the models refuse them, naming the field.
    with pytest.raises(ValidationError, match="not a JSON number"):
        AgentPlan.model_validate(
            {"actions": [{"tool": "email.send_correction", "args": {"x": [bad]}}]}
        )
    step = {"id": "s", "tool": "flights.hold", "semantics": "read_only", "args": {"a": {"b": bad}}}
    with pytest.raises(ValidationError, match=r"steps\.0\.args"):
        SagaDefinition.model_validate({"name": "n", "version": 1, "steps": [step]})
    with pytest.raises(ValidationError, match="precondition"):
        CompensationCommand(tool="t", precondition={"expect_version": bad})


def _nested(levels: int) -> object:
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


def test_arguments_and_inputs_nested_too_deep_for_the_log_are_refused_by_name() -> None:
    # A plan nested a few thousand levels deep once crashed validate_plan with a
    # RecursionError from hashing: the models refuse it first, naming the field.
    with pytest.raises(ValidationError, match=r"actions\.0\.args[\s\S]*more than 100 levels"):
        AgentPlan.model_validate(
            {"actions": [{"tool": "email.send_correction", "args": {"x": _nested(3000)}}]}
        )
    AgentPlan.model_validate(  # 100 levels (the args object and 99 arrays) are fine
        {"actions": [{"tool": "email.send_correction", "args": {"x": _nested(99)}}]}
    )
    # and a saga input of type object or array is held to the same rule: too deep is
    # refused before any other check (saga_core.limits, by the limit's name), and what is
    # not JSON (a NaN) is listed like every other bad field instead of crashing the start
    trip = trip_definition()
    spec = trip.model_copy(update={"input": {
        **trip.input, "notes": InputField(type="object", required=False),
        "ratio": InputField(type="number", required=False)}})
    with pytest.raises(LimitExceeded, match="saga input nesting .* json_depth"):
        validate_input(spec, {**trip_input(), "notes": {"x": _nested(500)}})
    with pytest.raises(InputValidationError) as err:
        validate_input(spec, {**trip_input(), "notes": {"x": [float("inf")]},
                              "ratio": float("nan")})
    found = {(p.where, p.rule) for p in err.value.problems}
    assert {("input.notes", "not_json"), ("input.ratio", "not_json")} <= found


def test_text_the_log_cannot_hold_is_refused_by_name_in_inputs_and_arguments() -> None:
    # A lone surrogate once crashed a start with a bare UnicodeEncodeError, and a NUL
    # reached the event layer before being refused: both are field problems now, in
    # values, in nested values and in keys.
    trip = trip_definition()
    spec = trip.model_copy(update={"input": {
        **trip.input, "notes": InputField(type="object", required=False)}})
    with pytest.raises(InputValidationError) as err:
        validate_input(spec, {**trip_input(), "customer_email": "a\ud800@example.com",
                              "notes": {"k\x00": "v"}})
    found = {(p.where, p.rule): p.message for p in err.value.problems}
    assert "surrogate" in found[("input.customer_email", "not_json")]
    assert "NUL" in found[("input.notes", "not_json")]
    with pytest.raises(ValidationError, match=r"actions\.0\.args[\s\S]*surrogate"):
        AgentPlan.model_validate(
            {"actions": [{"tool": "email.send_correction", "args": {"x": ["\udfff"]}}]}
        )
    # ordinary text in any script is fine
    validate_input(spec, {**trip_input(), "notes": {"città": "東京 ✈"}})


def test_a_template_string_is_parsed_once_but_resolved_against_each_context() -> None:
    from saga_core.definitions.templates import TemplateContext, resolve_template
    from saga_core.errors import TemplateError

    template = {"to": "${input.email}", "note": "saga ${saga.id}: $${literal} ${input.n}"}
    first = TemplateContext(saga_id="s1", input={"email": "a@x.io", "n": [1, 2]})
    second = TemplateContext(saga_id="s2", input={"email": "b@x.io", "n": 3})
    # the same strings (parsed once, cached) give each context its own values, types kept
    assert resolve_template(template, first) == {
        "to": "a@x.io", "note": "saga s1: ${literal} [1,2]"}
    assert resolve_template(template, second) == {
        "to": "b@x.io", "note": "saga s2: ${literal} 3"}
    # and a malformed or unresolvable template fails every time, not only the first
    for _ in range(2):
        with pytest.raises(TemplateError, match="unterminated"):
            resolve_template("${input.email", first)
        with pytest.raises(TemplateError, match="no 'missing'"):
            resolve_template("x ${input.missing}", first)
