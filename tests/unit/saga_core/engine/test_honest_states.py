"""Honest states in the fold: a denied run reads ``denied`` (never awaiting approval), a
denied compensation pauses for a person instead of stalling, a finished saga runs no phase,
and an answer to a request somebody else answered says who and at which version."""

from __future__ import annotations

import pytest
from core_harness import C, F, Saga, kinds, person

from saga_core import (
    ApprovalPolicy,
    ApprovalReplayed,
    CompensationCommand,
    ErrorClass,
    OperatorRequest,
    RequestApproval,
    SagaDefinition,
    SagaStatus,
    Semantics,
    StepDefinition,
    ToolCatalogue,
    ToolSpec,
    check_approval,
    check_denial,
    resolution_options,
    resolve_escalation,
    validate_definition,
)
from saga_core.engine.state import RunStatus, error_recovered

GATE = ApprovalPolicy(required=True, request_ttl_s=600)


def _order(*, gated_release: bool = False) -> SagaDefinition:
    """hold (released on undo, behind a gate when asked) -> pay (always gated)."""
    catalogue = ToolCatalogue(tools=[
        ToolSpec(name="hold", semantics=Semantics.COMPENSABLE, dedupes_by_key=True),
        ToolSpec(name="release", semantics=Semantics.IDEMPOTENT_BY_KEY, dedupes_by_key=True),
        ToolSpec(name="pay", semantics=Semantics.COMPENSABLE, dedupes_by_key=True),
        ToolSpec(name="book", semantics=Semantics.COMPENSABLE, dedupes_by_key=True),
    ])
    release = CompensationCommand(tool="release", approval=GATE if gated_release else None)
    steps = [
        StepDefinition(id="hold", tool="hold", semantics=Semantics.COMPENSABLE,
                       compensation=release),
        StepDefinition(id="book", tool="book", semantics=Semantics.COMPENSABLE,
                       depends_on=["hold"], compensation=CompensationCommand(tool="release")),
        StepDefinition(id="pay", tool="pay", semantics=Semantics.COMPENSABLE,
                       depends_on=["book"], approval=GATE,
                       compensation=CompensationCommand(tool="release")),
    ]
    return validate_definition(SagaDefinition(name="order", version=1, steps=steps), catalogue)


def _waiting_for_payment(definition: SagaDefinition) -> tuple[Saga, RequestApproval]:
    saga = Saga(definition)
    saga.record()
    saga.run_ok("hold")
    saga.record()
    saga.run_ok("book")
    (request,) = saga.record()
    assert isinstance(request, RequestApproval)
    return saga, request


def _deny(saga: Saga, step_id: str, kind=F, who: str = "bob") -> None:
    denial = check_denial(saga.state, step_id, kind, person(who), saga.now, "too expensive")
    assert denial is not None
    saga.append(denial)


def test_a_denied_step_reads_denied_through_compensation_to_the_end() -> None:
    # given a payment waiting for a person
    saga, _ = _waiting_for_payment(_order())
    # when bob denies it
    _deny(saga, "pay")
    # then the step is denied at once, no longer waiting for anybody
    assert saga.state.run("pay", F).status is RunStatus.DENIED
    assert kinds(saga.record()) == ["BeginCompensation"]
    # and it stays denied while the holds are undone and after the saga finished
    saga.record()
    saga.run_ok("book", C)
    saga.record()
    saga.run_ok("hold", C)
    assert kinds(saga.record()) == ["Finish"]
    state = saga.state
    assert state.status is SagaStatus.COMPENSATED
    assert state.run("pay", F).status is RunStatus.DENIED
    assert not any(run.status is RunStatus.AWAITING_APPROVAL
                   for run in [*state.forward.values(), *state.compensation.values()])
    # and a finished saga runs no phase (the way it went is still recorded)
    assert state.live_phase is None and state.phase == "compensating"


def test_a_denied_compensation_pauses_for_a_person_naming_the_denier() -> None:
    # given an order whose hold's release needs an approval, compensating after a rejection
    saga, _ = _waiting_for_payment(_order(gated_release=True))
    _deny(saga, "pay")
    saga.record()  # BeginCompensation
    saga.record()
    saga.run_ok("book", C)
    (release_request,) = saga.record()
    assert isinstance(release_request, RequestApproval) and release_request.kind is C
    # when the release is denied too
    _deny(saga, "hold", C, who="carol")
    # then the saga does not stall: it asks a person, and says who denied what
    (pause,) = saga.record()
    assert kinds([pause]) == ["Escalate"]
    state = saga.state
    assert state.status is SagaStatus.MANUAL_INTERVENTION
    assert state.escalation is not None and "denied by carol" in state.escalation.reason
    assert state.run("hold", C).status is RunStatus.DENIED
    options = {(o.action, o.step_id, o.kind) for o in resolution_options(state)}
    assert {("mark_compensated", "hold", C), ("skip", "hold", C),
            ("retry_step", "hold", C)} <= options


def test_a_person_resolving_a_denied_compensation_ends_the_saga_honestly() -> None:
    # given a saga paused on a denied release
    saga, _ = _waiting_for_payment(_order(gated_release=True))
    _deny(saga, "pay")
    saga.settle()
    saga.run_ok("book", C)
    saga.record()
    _deny(saga, "hold", C, who="carol")
    saga.record()
    # when an operator records the release done out of band
    action = resolve_escalation(saga.state, saga.events, OperatorRequest(
        "mark_compensated", actor="op", reason="released by phone", step_id="hold",
        kind=C), saga.now)
    assert action is not None
    saga.append(action)
    # then the saga finishes and no step is left in a waiting state
    assert kinds(saga.record()) == ["Finish"]
    state = saga.state
    assert state.status.is_terminal
    assert state.run("hold", C).status is RunStatus.FORCED
    assert state.run("pay", F).status is RunStatus.DENIED


def test_retrying_a_denied_compensation_asks_a_person_again() -> None:
    # given a saga paused on a denied release
    saga, _ = _waiting_for_payment(_order(gated_release=True))
    _deny(saga, "pay")
    saga.settle()
    saga.run_ok("book", C)
    saga.record()
    _deny(saga, "hold", C, who="carol")
    saga.record()
    # when the operator retries it
    action = resolve_escalation(saga.state, saga.events, OperatorRequest(
        "retry_step", actor="op", reason="ask again", step_id="hold", kind=C), saga.now)
    assert action is not None
    saga.append(action)
    decided = saga.settle()
    # then the release is not run without a grant: its approval is asked for again
    assert any(isinstance(d, RequestApproval) and d.kind is C for d in decided)
    assert saga.state.run("hold", C).status is RunStatus.AWAITING_APPROVAL


def test_a_denied_step_after_the_pivot_pauses_and_reads_denied() -> None:
    # given a trip past its pivot whose itinerary needs an approval (a two-step toy)
    catalogue = ToolCatalogue(tools=[
        ToolSpec(name="charge", semantics=Semantics.IRREVERSIBLE),
        ToolSpec(name="mail", semantics=Semantics.IDEMPOTENT_BY_KEY, dedupes_by_key=True),
    ])
    steps = [StepDefinition(id="charge", tool="charge", semantics=Semantics.IRREVERSIBLE,
                            pivot=True),
             StepDefinition(id="mail", tool="mail", semantics=Semantics.IDEMPOTENT_BY_KEY,
                            depends_on=["charge"], approval=GATE)]
    saga = Saga(validate_definition(SagaDefinition(name="p", version=1, steps=steps), catalogue))
    saga.record()
    saga.run_ok("charge")
    saga.record()
    # when the mail is denied
    _deny(saga, "mail")
    # then the saga pauses (nothing can be undone past the pivot) and the step reads denied
    assert kinds(saga.record()) == ["Escalate"]
    assert saga.state.run("mail", F).status is RunStatus.DENIED
    assert saga.state.status is SagaStatus.MANUAL_INTERVENTION


def test_a_second_approver_is_told_who_approved_and_at_which_version() -> None:
    # given a payment carol approved
    saga, request = _waiting_for_payment(_order())
    grant = check_approval(saga.state, "pay", F, request.action_hash, person("carol"), saga.now)
    assert grant is not None
    saga.append(grant)
    version = saga.state.version
    saga.record()  # the step is scheduled: the saga moves on
    # when dave approves the same request from a stale page
    with pytest.raises(ApprovalReplayed) as refused:
        check_approval(saga.state, "pay", F, request.action_hash, person("dave"), saga.now)
    # then nothing is granted, and he is told who approved it and when
    assert f"already approved by carol at version {version}" in str(refused.value)
    # and carol's own second click is still a no-op
    assert check_approval(saga.state, "pay", F, request.action_hash, person("carol"),
                          saga.now) is None


def test_a_denial_after_a_grant_names_the_approver_and_a_second_denial_the_denier() -> None:
    # given a payment carol approved
    saga, request = _waiting_for_payment(_order())
    grant = check_approval(saga.state, "pay", F, request.action_hash, person("carol"), saga.now)
    assert grant is not None
    saga.append(grant)
    version = saga.state.version
    # when bob denies it afterwards
    with pytest.raises(ApprovalReplayed, match=f"approved by carol at version {version}"):
        check_denial(saga.state, "pay", F, person("bob"), saga.now, "no")
    # given another payment bob denied
    other, _ = _waiting_for_payment(_order())
    _deny(other, "pay")
    denied_at = other.state.version
    # then eve's denial names bob, and bob's second click records nothing
    with pytest.raises(ApprovalReplayed, match=f"denied by bob at version {denied_at}"):
        check_denial(other.state, "pay", F, person("eve"), other.now, "no")
    assert check_denial(other.state, "pay", F, person("bob"), other.now, "no") is None


def test_an_error_is_recovered_only_when_its_run_succeeded_by_itself() -> None:
    # given a hold that failed transiently and then succeeded on its retry
    saga = Saga(_order())
    saga.record()
    saga.claim("hold")
    saga.fail("hold", ErrorClass.TRANSIENT, msg="503")
    run = saga.state.run("hold", F)
    assert not error_recovered(run.status)
    saga.tick(60)
    saga.record()
    saga.run_ok("hold")
    # then its error is history: the run succeeded since
    run = saga.state.run("hold", F)
    assert run.error_message == "503" and error_recovered(run.status)
    # and a run an operator forced or skipped did not recover by itself
    assert not error_recovered(RunStatus.FORCED) and not error_recovered(RunStatus.SKIPPED)
