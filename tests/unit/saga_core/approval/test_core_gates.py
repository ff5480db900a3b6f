"""Risk gates on the tool catalogue: the model, registration refusing a weakened gate, and
gates reaching every saga that calls a gated tool (definitions, agent plans, compensations)."""

from __future__ import annotations

from typing import Any

import pytest
from core_harness import C, F, Saga, kinds, trip_input
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from saga_core import (
    AgentPlan,
    DefinitionError,
    PlannedAction,
    PlanRejected,
    RequestApproval,
    RiskClass,
    RiskGate,
    SagaDefinition,
    ScheduleStep,
    ToolCatalogue,
    ToolSpec,
    effective_policy,
    validate_definition,
    validate_plan,
)
from saga_core.approval.risk_gates import ExternalRecipient
from saga_core.contracts import ErrorClass
from sagafleet.example_sagas import gated_tool_catalogue, trip_definition, trip_tool_catalogue

# -- the model ---------------------------------------------------------------------------------


def test_a_gate_without_a_condition_is_refused() -> None:
    with pytest.raises(ValidationError, match="needs a condition"):
        RiskGate(risk_class=RiskClass.MONEY)


def test_a_gate_reading_an_argument_the_tool_does_not_take_is_refused() -> None:
    with pytest.raises(ValidationError, match="unknown arguments"):
        ToolSpec(name="pay", semantics="irreversible", args={"amount": {"type": "number"}},
                 gate={"risk_class": "money", "above": {"arg": "sum", "limit": 10}})


def test_a_tool_without_a_gate_dumps_as_before_gates_existed() -> None:
    # given a tool with no gate: its dump has no gate key, so stored definition hashes hold
    spec = ToolSpec(name="read", semantics="read_only")
    assert "gate" not in spec.model_dump(mode="json")


@given(local=st.from_regex(r"[a-z]{1,8}", fullmatch=True),
       sub=st.sampled_from(["", "mail.", "eu.mail."]))
def test_mail_to_an_internal_domain_or_its_subdomains_needs_no_person(local: str,
                                                                       sub: str) -> None:
    rule = ExternalRecipient(arg="to", internal_domains=["Corp.Example"])
    assert not rule.exceeded({"to": f"{local}@{sub}corp.example"})
    assert not rule.exceeded({"to": [f"{local}@corp.example", f"{local}@{sub}corp.example"]})


@pytest.mark.parametrize("to", ["eve@evil.example", "eve@corp.example.evil", "no-at-sign",
                                None, 42, [], ["a@corp.example", "b@elsewhere.org"]])
def test_any_recipient_not_proven_internal_needs_a_person(to: Any) -> None:
    rule = ExternalRecipient(arg="to", internal_domains=["corp.example"])
    assert rule.exceeded({"to": to})


# -- registration: a definition may add or tighten, never weaken -------------------------------


def _trip_with(approval: dict[str, Any], step: str = "capture_payment") -> SagaDefinition:
    data = trip_definition().model_dump(mode="json")
    data["tools"] = []
    for s in data["steps"]:
        if s["id"] == step:
            s["approval"] = approval
    return SagaDefinition.model_validate(data)


@pytest.mark.parametrize(("approval", "why"), [
    ({"above": {"arg": "amount", "limit": 500_000}}, "higher than the gate's 100000"),
    ({"above": {"arg": "amount", "limit": 100_000}, "role": "intern"}, "role 'intern'"),
    ({"above": {"arg": "amount", "limit": 100_000}, "four_eyes": False}, "four_eyes false"),
])
def test_registration_refuses_a_definition_that_weakens_the_capture_gate(
    approval: dict[str, Any], why: str
) -> None:
    # given the trip whose capture approval declares less than the catalogue's money gate
    # when it is registered, then it is refused naming the step, the gate and why
    with pytest.raises(DefinitionError) as refused:
        validate_definition(_trip_with(approval), trip_tool_catalogue())
    (problem,) = [p for p in refused.value.problems if p.rule == "weakens_gate"]
    assert problem.where == "step capture_payment approval"
    assert "money gate of payments.capture@1" in problem.message and why in problem.message


def test_registration_refuses_an_always_gate_declared_not_required() -> None:
    # given a catalogue whose deletion tool always needs a person
    catalogue = gated_tool_catalogue()
    definition = SagaDefinition.model_validate({
        "name": "purge", "version": 1,
        "steps": [{"id": "purge", "tool": "records.delete", "semantics": "irreversible",
                   "args": {"collection": "users", "record_id": "u1"},
                   "approval": {"above": {"arg": "record_id", "limit": 0}}}],
    })
    # when a definition declares its approval conditional, then registration refuses it
    with pytest.raises(DefinitionError, match=r"weakens_gate.*always needs a person"):
        validate_definition(definition, catalogue)


@pytest.mark.parametrize("approval", [
    {"above": {"arg": "amount", "limit": 50_000}},  # a lower limit
    {"required": True, "role": "approver", "four_eyes": True},  # always, same role
    {"above": {"arg": "amount", "limit": 100_000}, "grant_ttl_s": 60},  # shorter grants
    {"request_ttl_s": 30},  # only shorter requests
])
def test_a_definition_may_tighten_a_gate(approval: dict[str, Any]) -> None:
    assert validate_definition(_trip_with(approval), trip_tool_catalogue())


def test_a_definition_adds_a_gate_where_the_catalogue_has_none() -> None:
    # given an approval on the flight hold, which the catalogue does not gate
    trip = validate_definition(_trip_with({"required": True, "role": "travel_lead"},
                                          step="hold_flight"), trip_tool_catalogue())
    saga = Saga(trip, trip_input())
    # then the hold waits for a travel lead
    requests = [d for d in saga.record() if isinstance(d, RequestApproval)]
    assert [(r.step_id, r.role) for r in requests] == [("hold_flight", "travel_lead")]


# -- gates reach every saga calling the tool ---------------------------------------------------


def _without_definition_approval() -> SagaDefinition:
    data = trip_definition().model_dump(mode="json")
    for s in data["steps"]:
        s.pop("approval", None)
    return validate_definition(SagaDefinition.model_validate(data), trip_tool_catalogue())


def _at_capture(definition: SagaDefinition, amount: int) -> Saga:
    saga = Saga(definition, trip_input(amount=amount))
    saga.settle()
    saga.run_ok("hold_flight")
    saga.run_ok("hold_hotel")
    return saga


def test_the_catalogue_gate_applies_to_a_definition_that_declares_no_approval() -> None:
    saga = _at_capture(_without_definition_approval(), 250_000)
    (request,) = saga.record()
    # then the request names who may answer, the risk and four eyes, also in its evidence
    assert isinstance(request, RequestApproval)
    assert (request.role, request.risk_class, request.four_eyes) == ("approver", "money", True)
    gate = request.evidence.details["gate"]
    assert gate["amount"] == 250_000 and gate["amount_arg"] == "amount"
    assert gate["reasons"] == ["catalogue gate: amount is above 100000"]


def test_under_the_limit_the_capture_runs_without_a_person() -> None:
    saga = _at_capture(_without_definition_approval(), 99_999)
    assert kinds(saga.record()) == ["ScheduleStep"]


def test_the_itinerary_to_an_external_address_waits_for_a_person() -> None:
    saga = Saga(trip_definition(), trip_input(customer_email="ada@elsewhere.org"))
    saga.settle()
    for step in ("hold_flight", "hold_hotel", "capture_payment"):
        saga.settle()
        saga.run_ok(step)
    (request,) = saga.record()
    assert isinstance(request, RequestApproval) and request.step_id == "send_itinerary"
    assert request.risk_class == "external_communication"


def test_a_saga_decides_by_the_gates_it_was_registered_with() -> None:
    # given a trip registered against a catalogue without gates
    ungated = ToolCatalogue(tools=[t.model_copy(update={"gate": None})
                                   for t in trip_tool_catalogue().tools])
    data = _without_definition_approval().model_dump(mode="json")
    data["tools"] = []
    definition = validate_definition(SagaDefinition.model_validate(data), ungated)
    # then its snapshot has no gate, and a large capture runs as that contract says
    assert effective_policy(definition, "capture_payment", F) is None
    assert kinds(_at_capture(definition, 250_000).record()) == ["ScheduleStep"]


def _capture_plan(amount: int) -> AgentPlan:
    return AgentPlan(goal="pay", actions=[PlannedAction(
        tool="payments.capture",
        args={"amount": amount, "currency": "EUR", "card_token": "${input.card_token}"})])


def test_an_agent_plan_capturing_above_the_limit_pauses_for_approval() -> None:
    # given an agent's plan whose capture is above the catalogue's limit
    definition = validate_plan(_capture_plan(250_000), trip_tool_catalogue())
    # when the saga starts, then nothing is scheduled: a person with the role is asked
    (request,) = Saga(definition, {"card_token": "t"}).record()
    assert isinstance(request, RequestApproval)
    assert (request.role, request.risk_class) == ("approver", "money")


def test_an_agent_plan_capturing_under_the_limit_runs() -> None:
    definition = validate_plan(_capture_plan(10_000), trip_tool_catalogue())
    (scheduled,) = Saga(definition, {"card_token": "t"}).record()
    assert isinstance(scheduled, ScheduleStep)


def test_an_agent_plan_cannot_bring_its_own_weaker_approval() -> None:
    # plans carry no approval at all: the gate is the catalogue's, so there is none to weaken
    with pytest.raises(ValidationError):
        PlannedAction.model_validate({"tool": "payments.capture", "approval": {"required": False}})
    with pytest.raises(PlanRejected):
        validate_plan(AgentPlan(actions=[]), trip_tool_catalogue())


def test_a_compensation_whose_tool_is_gated_waits_for_a_person() -> None:
    # given servers created by one step and destroyed (a deletion, always gated) on undo
    catalogue = ToolCatalogue.model_validate({"tools": [
        {"name": "vm.create", "semantics": "compensable", "receipt_fields": [],
         "compensation": {"tool": "vm.destroy", "args": {"vm": "${receipt.resource_id}"}}},
        {"name": "vm.destroy", "semantics": "idempotent_by_key",
         "gate": {"risk_class": "deletion", "always": True, "role": "sre"}},
        {"name": "notify", "semantics": "idempotent"},
    ]})
    definition = validate_definition(SagaDefinition.model_validate({
        "name": "servers", "version": 1, "steps": [
            {"id": "create", "tool": "vm.create", "semantics": "compensable",
             "compensation": {"tool": "vm.destroy", "args": {"vm": "${receipt.resource_id}"}}},
            {"id": "notify", "tool": "notify", "semantics": "idempotent",
             "depends_on": ["create"], "retry": {"max_attempts": 1, "max_delay_s": 1}},
        ]}), catalogue)
    saga = Saga(definition, {})
    saga.settle()
    saga.run_ok("create")
    saga.settle()
    saga.claim("notify")
    saga.fail("notify", ErrorClass.BUSINESS_REJECTION)
    # when the saga compensates, then the destroy waits for an sre
    requests = [d for d in saga.settle() if isinstance(d, RequestApproval)]
    assert [(r.step_id, r.kind, r.role, r.risk_class) for r in requests] == [
        ("create", C, "sre", "deletion")]


# -- the example catalogue ---------------------------------------------------------------------


def test_the_example_catalogue_gates_every_class_of_risk_the_seed_names() -> None:
    gated = {t.gate.risk_class for t in gated_tool_catalogue().tools if t.gate is not None}
    assert {RiskClass.MONEY, RiskClass.DELETION, RiskClass.INFRASTRUCTURE,
            RiskClass.EXTERNAL_COMMUNICATION} <= gated


@pytest.mark.parametrize(("tool", "args", "role"), [
    ("payments.transfer", {"amount": 90_000, "currency": "EUR", "iban": "${input.iban}"},
     "finance_approver"),
    ("records.delete", {"collection": "users", "record_id": "u1"}, "data_steward"),
    ("infra.deploy", {"service": "api", "image": "api:2"}, "sre"),
    ("infra.scale", {"service": "api", "replicas": 50}, "sre"),
    ("email.send", {"to": "x@outside.org", "subject": "s", "body": "b"}, "approver"),
])
def test_an_agent_plan_calling_a_gated_example_tool_pauses_for_its_role(
    tool: str, args: dict[str, Any], role: str
) -> None:
    definition = validate_plan(AgentPlan(actions=[PlannedAction(tool=tool, args=args)]),
                               gated_tool_catalogue())
    (request,) = Saga(definition, dict.fromkeys(definition.input, "x")).record()
    assert isinstance(request, RequestApproval) and request.role == role
