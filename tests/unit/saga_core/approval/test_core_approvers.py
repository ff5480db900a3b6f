"""Who may answer an approval request, what a grant covers, and the grant re-checked when a
worker claims the gated step. Every refusal is typed and records nothing."""

from __future__ import annotations

from datetime import timedelta

import pytest
from core_harness import F, Saga, person, trip_input
from hypothesis import given, settings
from hypothesis import strategies as st

from saga_core import (
    ApprovalExpired,
    ApprovalOutOfScope,
    ApprovalRequested,
    ApproverRefused,
    CancelRequested,
    RequestApproval,
    SagaDefinition,
    check_approval,
    check_claim,
    check_denial,
    due_work,
    validate_definition,
)
from saga_core.access.roles import Principal, PrincipalKind
from saga_core.contracts import ErrorClass
from saga_core.errors import ApprovalAltered, ApprovalReplayed, ErrorKind
from sagafleet.example_sagas import trip_definition, trip_tool_catalogue

CAPTURE = "capture_payment"


def _waiting(amount: int = 250_000, definition: SagaDefinition | None = None) -> tuple[Saga, str]:
    """A trip whose capture of ``amount`` waits for a person; its request's action hash."""
    saga = Saga(definition or trip_definition(), trip_input(amount=amount))
    saga.settle()
    saga.run_ok("hold_flight")
    saga.run_ok("hold_hotel")
    (request,) = saga.record()
    assert isinstance(request, RequestApproval)
    return saga, request.action_hash


def _refused(saga: Saga, action_hash: str, who: Principal, rule: str) -> None:
    events = list(saga.events)
    with pytest.raises(ApproverRefused) as refused:
        check_approval(saga.state, CAPTURE, F, action_hash, who, saga.now)
    assert refused.value.rule == rule and refused.value.kind is ErrorKind.FORBIDDEN
    # nothing recorded: the saga still waits for a person, asked once
    assert saga.events == events and saga.decide() == []


# -- who may approve ---------------------------------------------------------------------------


def test_an_agent_never_approves_whatever_its_roles() -> None:
    saga, asked = _waiting()
    agent = Principal("t1", "planner", PrincipalKind.AGENT, frozenset({"approver", "admin"}))
    _refused(saga, asked, agent, "agent")


def test_the_in_process_agent_of_a_trusted_program_never_approves() -> None:
    saga, asked = _waiting()
    _refused(saga, asked, Principal.in_process_agent("t1", "alice"), "agent")


def test_a_person_of_another_tenant_is_refused() -> None:
    saga, asked = _waiting()
    _refused(saga, asked, person("alice", tenant="t2"), "tenant")


def test_a_person_without_the_gates_role_is_refused() -> None:
    saga, asked = _waiting()
    _refused(saga, asked, person("olga", "operator", "auditor", "admin"), "role")


def test_the_sagas_starter_may_not_approve_under_four_eyes() -> None:
    saga, asked = _waiting()
    assert saga.state.started_by == "test"
    _refused(saga, asked, person("test"), "four_eyes")


def test_without_four_eyes_the_starter_may_approve() -> None:
    # given a catalogue whose capture gate lets the starter approve
    tools = [t.model_copy(update={"gate": t.gate.model_copy(update={"four_eyes": False})})
             if t.name == "payments.capture" and t.gate else t
             for t in trip_tool_catalogue().tools]
    catalogue = trip_tool_catalogue().model_copy(update={"tools": tools})
    data = trip_definition().model_dump(mode="json") | {"tools": []}
    saga, asked = _waiting(definition=validate_definition(
        SagaDefinition.model_validate(data), catalogue))
    assert check_approval(saga.state, CAPTURE, F, asked, person("test"), saga.now) is not None


def test_the_grant_records_the_person_the_role_and_the_amount_covered() -> None:
    saga, asked = _waiting(250_000)
    grant = check_approval(saga.state, CAPTURE, F, asked, person("bob", "approver", "x"),
                           saga.now)
    assert grant is not None
    assert (grant.approver, grant.roles, grant.up_to) == ("bob", ["approver"], 250_000)
    assert grant.expires_at == saga.now + timedelta(seconds=900)


# -- scope -------------------------------------------------------------------------------------


def test_an_approval_up_to_less_than_the_amount_is_refused() -> None:
    saga, asked = _waiting(60_000 * 10)  # 6000.00
    events = list(saga.events)
    with pytest.raises(ApprovalOutOfScope, match="up to 500000 does not cover amount 600000"):
        check_approval(saga.state, CAPTURE, F, asked, person("bob"), saga.now, up_to=500_000)
    assert saga.events == events


@settings(max_examples=60, deadline=None)
@given(amount=st.integers(100_001, 10**9), up_to=st.floats(0, 2e9, allow_nan=False))
def test_a_grant_is_accepted_exactly_when_its_scope_covers_the_amount(amount: int,
                                                                     up_to: float) -> None:
    saga, asked = _waiting(amount)
    if up_to >= amount:
        grant = check_approval(saga.state, CAPTURE, F, asked, person("bob"), saga.now,
                               up_to=up_to)
        assert grant is not None and grant.up_to == up_to
    else:
        with pytest.raises(ApprovalOutOfScope):
            check_approval(saga.state, CAPTURE, F, asked, person("bob"), saga.now, up_to=up_to)


def test_a_scope_bound_on_a_gate_without_an_amount_is_refused() -> None:
    saga = Saga(trip_definition(), trip_input(customer_email="ada@elsewhere.org"))
    for step in ("hold_flight", "hold_hotel", "capture_payment"):
        saga.settle()
        saga.run_ok(step)
    (request,) = saga.record()
    assert isinstance(request, RequestApproval)
    with pytest.raises(ApprovalOutOfScope, match="bounds no amount"):
        check_approval(saga.state, "send_itinerary", F, request.action_hash, person("bob"),
                       saga.now, up_to=10)


def test_a_changed_action_is_refused_before_any_scope() -> None:
    saga, _ = _waiting()
    with pytest.raises(ApprovalAltered):
        check_approval(saga.state, CAPTURE, F, "0" * 64, person("bob"), saga.now)


# -- who may deny ------------------------------------------------------------------------------


def test_an_agent_may_not_deny() -> None:
    saga, _ = _waiting()
    with pytest.raises(ApproverRefused) as refused:
        check_denial(saga.state, CAPTURE, F, Principal.in_process_agent("t1", "x"), saga.now, "")
    assert refused.value.rule == "agent"


def test_a_person_of_another_tenant_may_not_deny() -> None:
    saga, _ = _waiting()
    with pytest.raises(ApproverRefused) as refused:
        check_denial(saga.state, CAPTURE, F, person("bob", tenant="t9"), saga.now, "")
    assert refused.value.rule == "tenant"


def test_a_person_with_neither_the_gates_role_nor_operator_may_not_deny() -> None:
    saga, _ = _waiting()
    with pytest.raises(ApproverRefused) as refused:
        check_denial(saga.state, CAPTURE, F, person("ann", "auditor"), saga.now, "")
    assert refused.value.rule == "role"


@pytest.mark.parametrize("who", [person("olga", "operator"), person("test")])
def test_an_operator_or_the_starter_with_the_role_may_deny(who: Principal) -> None:
    # four eyes guards approving, not stopping: the starter may deny
    saga, asked = _waiting()
    denial = check_denial(saga.state, CAPTURE, F, who, saga.now, "too expensive")
    assert denial is not None and denial.approver == who.name and denial.action_hash == asked
    saga.append(denial)
    assert check_denial(saga.state, CAPTURE, F, who, saga.now, "again") is None
    with pytest.raises(ApprovalReplayed):
        check_approval(saga.state, CAPTURE, F, asked, person("bob"), saga.now)


# -- the grant re-checked at claim time --------------------------------------------------------


def _approved_and_scheduled() -> Saga:
    saga, asked = _waiting()
    grant = check_approval(saga.state, CAPTURE, F, asked, person("bob"), saga.now)
    assert grant is not None
    saga.append(grant)
    saga.record()  # ScheduleStep: approved
    return saga


def test_a_grant_that_expired_before_the_claim_refuses_it_and_asks_again() -> None:
    # given an approved, scheduled capture whose grant expires before a worker claims it
    saga = _approved_and_scheduled()
    run = saga.state.run(CAPTURE, F)
    assert check_claim(saga.state, CAPTURE, F, run.attempt, saga.now)
    saga.tick(901)
    # when a worker tries to claim it, then it is refused, and decide asks a person again
    verdict = check_claim(saga.state, CAPTURE, F, run.attempt, saga.now)
    assert not verdict and verdict.ask_again and "grant expired" in verdict.reason
    assert [w.action for w in due_work(saga.state, saga.now, timedelta(0))] == ["decide"]
    (again,) = saga.record()
    assert isinstance(again, RequestApproval) and "grant expired" in again.evidence.reason
    # and the new request can be approved and run
    grant = check_approval(saga.state, CAPTURE, F, again.action_hash, person("bob"), saga.now)
    assert grant is not None
    saga.append(grant)
    (scheduled,) = saga.record()
    assert check_claim(saga.state, CAPTURE, F, saga.state.run(CAPTURE, F).attempt, saga.now)
    assert scheduled.reason == "approved"  # type: ignore[attr-defined]


def test_a_retry_after_the_grant_expired_asks_again_before_it_runs() -> None:
    # given an approved capture that failed transiently after its grant expired
    saga = _approved_and_scheduled()
    saga.claim(CAPTURE)
    saga.tick(1000)
    saga.fail(CAPTURE, ErrorClass.TRANSIENT)
    # then the retry is not claimable: a person is asked again first
    decided = saga.settle()
    assert isinstance(decided[-1], RequestApproval)
    run = saga.state.run(CAPTURE, F)
    assert not check_claim(saga.state, CAPTURE, F, run.attempt, saga.now)


def test_an_unproven_person_is_refused() -> None:
    saga, asked = _waiting()
    unproven = Principal("t1", "alice", PrincipalKind.PERSON, frozenset({"approver"}), False)
    _refused(saga, asked, unproven, "unauthenticated")


# -- what the mutation run found no test for (issue 36) ----------------------------------------


@pytest.mark.parametrize("answer", ["approve", "deny"])
def test_another_tenants_person_learns_nothing_about_the_saga(answer: str) -> None:
    # answers.py:104 and :179 survived every test: a step with no open request is told as
    # "not of this tenant", never "no approval was requested"
    saga, _ = _waiting()
    stranger = person("bob", tenant="t2")
    with pytest.raises(ApproverRefused) as refused:
        if answer == "approve":
            check_approval(saga.state, "hold_flight", F, "0" * 64, stranger, saga.now)
        else:
            check_denial(saga.state, "hold_flight", F, stranger, saga.now, "no")
    assert refused.value.rule == "tenant"


def _as_recorded_before_gates(saga: Saga) -> None:
    """The open request as a log from before gates named a role and four eyes holds it."""
    (index, requested), = [(i, e) for i, e in enumerate(saga.events)
                           if isinstance(e, ApprovalRequested)]
    saga.events[index] = requested.model_copy(update={"role": None, "four_eyes": None})
    saga.append(saga.events.pop())  # refold


def test_a_request_recorded_before_gates_named_a_role_is_answered_under_the_policys() -> None:
    # answers.py:88 and :114 survived every test
    saga, asked = _waiting()
    _as_recorded_before_gates(saga)
    assert saga.state.run(CAPTURE, F).approval.role is None  # type: ignore[union-attr]
    _refused(saga, asked, person("olga", "operator"), "role")
    _refused(saga, asked, person("test"), "four_eyes")  # the starter, under the gate's rule
    assert check_approval(saga.state, CAPTURE, F, asked, person("bob"), saga.now) is not None


def test_a_forward_request_is_closed_once_the_saga_compensates() -> None:
    # answers.py:127 survived every test
    saga, asked = _waiting()
    saga.append(CancelRequested(at=saga.now, actor="op", reason="changed plans"))
    saga.settle()
    assert saga.state.phase == "compensating"
    with pytest.raises(ApprovalReplayed, match="forward work of this saga has stopped"):
        check_approval(saga.state, CAPTURE, F, asked, person("bob"), saga.now)


def test_a_request_is_answered_until_just_before_it_expires_and_not_at_expiry() -> None:
    # answers.py:131 survived every test
    saga, asked = _waiting()
    expires = saga.state.run(CAPTURE, F).approval.expires_at  # type: ignore[union-attr]
    assert check_approval(saga.state, CAPTURE, F, asked, person("bob"),
                          expires - timedelta(microseconds=1)) is not None
    with pytest.raises(ApprovalExpired):
        check_approval(saga.state, CAPTURE, F, asked, person("bob"), expires)


@pytest.mark.parametrize("up_to", [float("inf"), float("nan"), True, "300000"])
def test_a_grants_bound_must_be_a_finite_number(up_to: object) -> None:
    # answers.py:157 survived every test (without the check an infinite bound covers any
    # amount)
    saga, asked = _waiting()
    with pytest.raises(ApprovalOutOfScope, match="up_to must be a finite number"):
        check_approval(saga.state, CAPTURE, F, asked, person("bob"), saga.now,
                       up_to=up_to)  # type: ignore[arg-type]
