"""Property tests: random valid definitions driven by random outcomes keep the saga invariants."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from core_harness import T0, person
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from saga_core import (
    ApprovalDenied,
    ApprovalExpired,
    ApprovalPolicy,
    CancelRequested,
    CompensationCommand,
    CompensationStarted,
    Decision,
    ErrorClass,
    OperatorAction,
    Receipt,
    ReconciliationResult,
    RetryPolicy,
    SagaDefinition,
    SagaEvent,
    SagaFinished,
    SagaStarted,
    SagaState,
    SagaStatus,
    Semantics,
    StepDefinition,
    StepFailed,
    StepKind,
    StepOutcomeUnknown,
    StepScheduled,
    StepStarted,
    StepSucceeded,
    ToolCatalogue,
    ToolSpec,
    check_approval,
    check_claim,
    decide,
    evolve,
    fold,
    payload_hash,
    resolve_command,
    validate_definition,
)
from saga_core.engine.due import next_due

F, C = StepKind.FORWARD, StepKind.COMPENSATION
S = Semantics
RETRYABLE = [S.READ_ONLY, S.IDEMPOTENT, S.IDEMPOTENT_BY_KEY]
ANY = [S.READ_ONLY, S.IDEMPOTENT, S.IDEMPOTENT_BY_KEY, S.COMPENSABLE, S.OFFSETTABLE, S.IRREVERSIBLE]


@st.composite
def definitions(draw: st.DrawFn) -> SagaDefinition:
    """A random valid definition: a DAG before an optional pivot, a retryable tail after it."""
    n_before = draw(st.integers(1, 6))
    has_pivot = draw(st.booleans())
    n_after = draw(st.integers(0, 2)) if has_pivot else 0
    tools: list[ToolSpec] = []
    steps: list[StepDefinition] = []

    def tool(name: str, semantics: Semantics) -> None:
        tools.append(
            ToolSpec(
                name=name,
                semantics=semantics,
                dedupes_by_key=draw(st.booleans()),
                commit_horizon_s=draw(st.sampled_from([None, 5.0, 60.0])),
            )
        )

    def step(i: int, semantics: Semantics, deps: list[str], pivot: bool = False) -> None:
        sid = f"s{i}"
        tool(f"t{i}", semantics)
        compensation = None
        undo = semantics in (S.COMPENSABLE, S.OFFSETTABLE)
        if undo or (semantics in (S.IRREVERSIBLE, S.IDEMPOTENT_BY_KEY) and draw(st.booleans())):
            tool(f"c{i}", S.IDEMPOTENT_BY_KEY)
            compensation = CompensationCommand(
                tool=f"c{i}",
                args={"id": "${receipt.resource_id}"},
                retry=RetryPolicy(
                    max_attempts=draw(st.integers(1, 3)),
                    max_delay_s=5,
                    max_reconciliations=draw(st.integers(1, 3)),
                ),
            )
        approval = (
            ApprovalPolicy(required=True, request_ttl_s=60)
            if draw(st.booleans()) and draw(st.booleans())
            else None
        )
        steps.append(
            StepDefinition(
                id=sid,
                tool=f"t{i}",
                semantics=semantics,
                depends_on=deps,
                pivot=pivot,
                compensation=compensation,
                approval=approval,
                retry=RetryPolicy(
                    max_attempts=draw(st.integers(1, 3)),
                    max_delay_s=5,
                    max_reconciliations=draw(st.integers(1, 3)),
                ),
            )
        )

    before: list[str] = []
    has_dependents: set[str] = set()
    deps_of: dict[str, list[str]] = {}
    for i in range(n_before):
        deps = sorted(draw(st.sets(st.sampled_from(before), max_size=2))) if before else []
        if before and draw(st.booleans()):  # deepen: chains make compensation order matter
            deps = sorted({*deps, before[-1]})
        deps_of[f"s{i}"] = deps
        has_dependents.update(deps)
        before.append(f"s{i}")
    sinks = [s for s in before if s not in has_dependents]
    for i, sid in enumerate(before):
        semantics = draw(st.sampled_from(ANY))
        last = sid in sinks and not has_pivot
        if semantics is S.IRREVERSIBLE and not last:
            semantics = S.COMPENSABLE  # irreversible must be last or the pivot
        step(i, semantics, deps_of[sid])
    if has_pivot:
        step(n_before, draw(st.sampled_from(ANY)), sinks, pivot=True)
        prev = f"s{n_before}"
        for j in range(n_after):
            i = n_before + 1 + j
            step(i, draw(st.sampled_from(RETRYABLE)), [prev])
            prev = f"s{i}"
    definition = SagaDefinition(
        name="random", version=1, steps=steps, retry_budget=draw(st.integers(0, 4))
    )
    return validate_definition(definition, ToolCatalogue(tools=tools))


@dataclass
class Driver:
    """Plays workers and humans: records decisions, feeds random outcomes, checks invariants."""

    definition: SagaDefinition
    data: st.DataObject
    events: list[SagaEvent] = field(default_factory=list)
    now: Any = T0
    decisions: int = 0
    ever_compensated: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.state = SagaState.initial(self.definition)
        self.append(
            SagaStarted(
                at=self.now,
                saga_id="p1",
                definition_name="random",
                definition_version=1,
                definition_hash=self.definition.content_hash(),
                input={},
                input_hash=payload_hash({}),
                retry_budget=self.definition.retry_budget,
            )
        )

    def append(self, event: SagaEvent) -> None:
        self.check_before(event)
        self.events.append(event)
        self.state = evolve(self.state, event)

    # -- invariants checked on every event, against the state it is applied to ----------------
    def check_before(self, event: SagaEvent) -> None:
        state, d = self.state, self.definition
        if isinstance(event, StepStarted) and event.kind is F:
            for dep in d.step(event.step_id).depends_on:
                done = ("succeeded", "forced", "skipped")  # the last two only by an operator
                assert state.forward[dep].status in done, f"{event.step_id} before {dep}"
        if isinstance(event, StepScheduled) and event.kind is C:
            sid = event.step_id
            effect = ("succeeded", "forced")
            assert state.forward[sid].status in effect, f"compensating never-succeeded {sid}"
            # Past the pivot only its declared correction, chosen by an operator, may run.
            correction = state.correcting is not None and sid == state.correcting
            assert not state.pivot_passed or correction, "compensation past a succeeded pivot"
            for dependent in [] if correction else d.descendants(sid):
                fwd = state.forward[dependent].status
                # "absent" is settled once past the commit horizon, so it is not listed here
                in_doubt = ("started", "unknown", "reconciling", "found")
                assert fwd not in in_doubt, f"{sid} compensated while {dependent} is in doubt"
                comp = state.compensation.get(dependent)
                if fwd in effect and comp is not None:
                    assert comp.status in ("succeeded", "forced", "skipped"), (
                        f"{sid} compensated before its dependent {dependent}"
                    )
            if not correction:  # the pivot's correction an operator chose is no compensation
                self.ever_compensated.add(sid)
        if isinstance(event, CompensationStarted):
            assert not state.pivot_passed
        if isinstance(event, SagaFinished) and event.state is SagaStatus.COMPENSATED:
            for s in d.steps:
                if state.forward[s.id].status in ("succeeded", "forced") and s.leaves_effect:
                    comp = state.compensation.get(s.id)
                    assert s.semantics is not S.IRREVERSIBLE, f"{s.id} irreversible remains"
                    undone = ("succeeded", "forced")
                    assert comp is not None and comp.status in undone, f"{s.id} not undone"
        if isinstance(event, SagaFinished) and event.state is SagaStatus.COMPLETED:
            assert all(r.status == "succeeded" for r in state.forward.values())

    # -- orchestrator ----------------------------------------------------------------------
    def orchestrate(self) -> None:
        for _ in range(10):
            batch = decide(self.state, self.now)
            assert batch == decide(fold(self.definition, self.events), self.now), "nondeterministic"
            if not batch:
                return
            self.decisions += len(batch)
            for decision in batch:
                self.append(decision.to_event(at=self.now))
            again = decide(self.state, self.now)
            assert not any(_sig(a) == _sig(b) for a in again for b in batch), (batch, again)
        raise AssertionError("decide did not settle within 10 batches")

    # -- operator ----------------------------------------------------------------------------
    def operate(self) -> None:
        """Resolve the pending escalation with one of the actions its evidence offers."""
        escalation = self.state.escalation
        assert escalation is not None
        evidence = self.events[-1].evidence  # type: ignore[attr-defined]
        choice = self.data.draw(st.sampled_from(evidence.alternatives))
        self.now += timedelta(seconds=1)
        if choice == "cancel":
            self.append(CancelRequested(at=self.now, actor="op"))
        elif choice == "run_correction":
            # The pivot's declared correction: it targets the pivot's compensation.
            pivot = self.state.definition.pivot
            assert pivot is not None
            self.append(OperatorAction(at=self.now, action=choice, actor="op",
                                       step_id=pivot.id, kind=C))
        elif choice == "resume" or escalation.step_id is None:
            self.append(
                OperatorAction(
                    at=self.now,
                    action="resume",
                    actor="op",
                    step_id=escalation.step_id,
                    kind=escalation.kind or F,
                )
            )
        else:
            self.append(
                OperatorAction(
                    at=self.now,
                    action=choice,
                    actor="op",
                    step_id=escalation.step_id,
                    kind=escalation.kind or F,
                    receipt=Receipt(resource_id="op"),
                )
            )

    # -- environment -----------------------------------------------------------------------
    def act(self) -> bool:
        """Make one random thing happen in the world, or let time pass to when something
        is due; False when nothing can ever happen without a new event."""
        options = []
        for run in [*self.state.forward.values(), *self.state.compensation.values()]:
            if run.status == "scheduled":
                due = max(self.now, run.not_before or self.now)
                if check_claim(self.state, run.step_id, run.kind, run.attempt, due):
                    options.append(("claim", run))
            elif run.status in ("started", "reconciling"):
                options.append((str(run.status), run))
            elif run.status == "awaiting_approval":
                open_forward = run.kind is F and self.state.phase == "forward"
                if open_forward or run.kind is C:  # a stopped forward step needs no answer
                    options.append((str(run.status), run))
        if not options:
            # Time passes meanwhile, and the sweeper comes back when work is next due: a
            # retry scheduled past the time limit waits for the limit, not for a claim.
            later = next_due(self.state, timedelta(0), after=self.now)
            if later is None or later <= self.now:
                return False
            self.now = later
            return True
        what, run = self.data.draw(st.sampled_from(options))
        key = dict(
            step_id=run.step_id, kind=run.kind, attempt=run.attempt, operation_key=run.operation_key
        )
        if what == "claim":
            self.now = max(self.now, run.not_before or self.now)
            cmd = resolve_command(self.state, run.step_id, run.kind)
            # As a worker claims: the call's declared timeout counts from the claim.
            timeout_s = self.definition.step_timeout_s(run.step_id, run.kind)
            timeout_at = None if timeout_s is None else self.now + timedelta(seconds=timeout_s)
            self.append(
                StepStarted(
                    at=self.now,
                    worker_id="w",
                    request_hash=cmd.request_hash,
                    lease_expires_at=self.now + timedelta(seconds=30),
                    timeout_at=timeout_at,
                    **key,
                )
            )
        elif what == "started":
            outcome = self.data.draw(
                st.sampled_from(
                    [
                        "ok",
                        "ok",
                        "ok",
                        "transient",
                        "reject",
                        "unknown",
                        "unknown",
                        "lease",
                        "permanent",
                        "auth",
                    ]
                )
            )
            self.now += timedelta(seconds=1)
            if outcome == "ok":
                self.append(StepSucceeded(at=self.now, receipt=Receipt(resource_id="r"), **key))
            elif outcome == "unknown":
                self.append(StepOutcomeUnknown(at=self.now, reason="timeout", **key))
            elif outcome == "lease":
                self.now = max(self.now, run.lease_expires_at or self.now)
            else:
                error = {
                    "transient": ErrorClass.TRANSIENT,
                    "reject": ErrorClass.BUSINESS_REJECTION,
                    "permanent": ErrorClass.PERMANENT,
                    "auth": ErrorClass.AUTH_EXPIRED,
                }[outcome]
                self.append(StepFailed(at=self.now, error_class=error, **key))
        elif what == "reconciling":
            self.now = max(self.now, run.not_before or self.now)
            result = self.data.draw(st.sampled_from(["found", "absent", "unknown"]))
            receipt = Receipt(resource_id="r") if result == "found" else None
            self.append(ReconciliationResult(at=self.now, result=result, receipt=receipt, **key))
        else:
            approval = run.approval
            assert approval is not None
            answer = self.data.draw(st.sampled_from(["grant", "deny", "expire"]))
            if answer == "expire" or approval.status != "requested":
                self.now = max(self.now, approval.expires_at, approval.grant_expires_at or self.now)
            elif answer == "grant" and self.now >= approval.expires_at:
                with pytest.raises(ApprovalExpired):  # too late: decide will ask again
                    check_approval(
                        self.state, run.step_id, run.kind, approval.action_hash,
                        person("alice", tenant=""), self.now
                    )
            elif answer == "grant":
                grant = check_approval(
                    self.state, run.step_id, run.kind, approval.action_hash,
                    person("alice", tenant=""), self.now
                )
                assert grant is not None
                self.append(grant)
            else:
                self.append(
                    ApprovalDenied(
                        at=self.now,
                        step_id=run.step_id,
                        kind=run.kind,
                        action_hash=approval.action_hash,
                        approver="bob",
                    )
                )
        return True


def _sig(decision: Decision) -> tuple[Any, ...]:
    return (
        type(decision).__name__,
        getattr(decision, "step_id", None),
        getattr(decision, "kind", None),
        getattr(decision, "attempt", None),
    )


def play(driver: Driver) -> Driver:
    """Run a random saga until it ends or waits for a person more often than allowed."""
    operator_budget = driver.data.draw(st.integers(0, 3))  # humans step in a bounded number
    for _ in range(300):
        driver.orchestrate()
        if driver.state.finished is not None:
            break
        if driver.state.escalation is not None:
            if operator_budget == 0:
                break
            operator_budget -= 1
            driver.operate()
            continue
        assert driver.act(), f"stuck in {driver.state.status}: nothing can happen"
    return driver


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(definition=definitions(), data=st.data())
def test_random_sagas_keep_every_invariant_and_end_or_escalate(
    definition: SagaDefinition, data: st.DataObject
) -> None:
    driver = play(Driver(definition, data))
    status = driver.state.status
    assert status.is_terminal or status is SagaStatus.MANUAL_INTERVENTION, status
    assert driver.decisions < 300
    # never compensated a step after the pivot had passed
    if driver.state.pivot_passed:
        pivot = definition.pivot
        assert pivot is not None
        assert not (driver.ever_compensated & (definition.ancestors(pivot.id) | {pivot.id}))


@settings(max_examples=60, deadline=None)
@given(definition=definitions())
def test_happy_path_completes_every_random_definition(definition: SagaDefinition) -> None:
    state = fold(definition, [])
    events: list[SagaEvent] = [
        SagaStarted(
            at=T0,
            saga_id="h",
            definition_name="random",
            definition_version=1,
            definition_hash=definition.content_hash(),
            input={},
            input_hash=payload_hash({}),
            retry_budget=0,
        )
    ]
    state = fold(definition, events)
    for _ in range(100):
        for decision in decide(state, T0):
            state = evolve(state, decision.to_event(at=T0))
        pending = [
            r for r in state.forward.values() if r.status in ("scheduled", "awaiting_approval")
        ]
        if not pending:
            break
        for run in pending:
            key = dict(
                step_id=run.step_id,
                kind=F,
                attempt=max(run.attempt, 1),
                operation_key=run.operation_key,
            )
            if run.status == "awaiting_approval":
                assert run.approval is not None
                grant = check_approval(
                    state, run.step_id, F, run.approval.action_hash, person("a", tenant=""), T0
                )
                assert grant is not None
                state = evolve(state, grant)
                continue
            state = evolve(
                state,
                StepStarted(
                    at=T0,
                    worker_id="w",
                    request_hash="h",
                    lease_expires_at=T0 + timedelta(seconds=9),
                    **key,
                ),
            )
            state = evolve(state, StepSucceeded(at=T0, receipt=Receipt(resource_id="r"), **key))
    assert state.status is SagaStatus.COMPLETED
