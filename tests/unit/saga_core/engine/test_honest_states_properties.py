"""Property tests over the fold: the state every screen shows agrees with the events.

Random valid definitions (some compensations gated too) are driven by random worker
outcomes, approvals, denials, expiries and operator actions (the driver of
``test_core_properties``). After every event:

* no terminal saga has an operation in a waiting state, in the fold, the read-model rows
  (console, ``list``) or the status view (CLI ``status``, MCP), and none shows a live phase;
* every operation's state is the one its own events and the saga's stops say
  (:func:`expected_status`: a slow, obvious reading of the log, event by event), and the
  rows and the view show the fold's state;
* only open requests are offered for an answer (queue, pending approvals), and an answer
  to a request somebody answered names who and at which version.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from core_harness import person
from hypothesis import HealthCheck, given, settings
from hypothesis import event as covered
from hypothesis import strategies as st
from test_core_properties import Driver, definitions, play

from application.views import view_of
from events.saga_log.port import LoadedSaga
from projections.record import replay
from projections.rows import ACTIVE_RUN_STATES, rows_of
from saga_core import (
    ApprovalPolicy,
    ApprovalReplayed,
    ErrorClass,
    SagaDefinition,
    StepKind,
    ToolCatalogue,
    check_approval,
    validate_definition,
)
from saga_core.engine.events import (
    ApprovalDenied,
    ApprovalGranted,
    ApprovalRequested,
    CompensationStarted,
    DeadlineMissed,
    OperatorAction,
    PostconditionObserved,
    ReconciliationResult,
    ReconciliationScheduled,
    SagaEvent,
    SagaFinished,
    SagaStarted,
    StepEvent,
    StepFailed,
    StepOutcomeUnknown,
    StepScheduled,
    StepStarted,
    StepSucceeded,
)
from saga_core.engine.state import WAITING, RunStatus, SagaState

F, C = StepKind.FORWARD, StepKind.COMPENSATION
#: What no operation of a finished saga may be in: somebody would be waiting on it.
NEVER_WHEN_FINISHED = WAITING | {RunStatus.STARTED, RunStatus.RECONCILING,
                                 RunStatus.VERIFYING}


@st.composite
def gated_definitions(draw: st.DrawFn) -> SagaDefinition:
    """A random valid definition, some of whose compensations need a person's approval."""
    definition = draw(definitions())
    gate = ApprovalPolicy(required=True, request_ttl_s=60)
    steps = [
        step.model_copy(update={"compensation": step.compensation.model_copy(
            update={"approval": gate})})
        if step.compensation is not None and draw(st.booleans()) else step
        for step in definition.steps
    ]
    gated = definition.model_copy(update={"steps": steps})
    return validate_definition(gated, ToolCatalogue(tools=definition.tools))


def expected_status(definition: SagaDefinition, events: Sequence[SagaEvent],
                    step_id: str, kind: StepKind) -> RunStatus:
    """The state of one operation as its events say, read one event at a time: the last
    event about it decides, and a stop of the saga withdraws what still waited."""
    status = RunStatus.PENDING
    for event in events:
        if isinstance(event, StepEvent) and (event.step_id, event.kind) == (step_id, kind):
            status = _after_own(definition, event, status)
        elif isinstance(event, OperatorAction) and event.step_id == step_id:
            target = C if event.action in ("mark_compensated", "run_correction") else event.kind
            if target is kind:
                status = {"retry_step": RunStatus.RETRY_REQUESTED,
                          "retry_as_new_operation": RunStatus.PENDING,
                          "skip": RunStatus.SKIPPED, "force_complete": RunStatus.FORCED,
                          "mark_compensated": RunStatus.FORCED}.get(event.action, status)
        elif isinstance(event, CompensationStarted) and kind is F and status in WAITING:
            status = RunStatus.WITHDRAWN
        elif isinstance(event, SagaFinished) and status in WAITING:
            status = RunStatus.WITHDRAWN
    return status


def _after_own(definition: SagaDefinition, event: StepEvent, status: RunStatus) -> RunStatus:
    """What one of the operation's own events makes of its state."""
    match event:
        case StepScheduled():
            return RunStatus.SCHEDULED
        case StepStarted():
            return RunStatus.STARTED
        case StepSucceeded():
            spec = definition.tool_spec(event.step_id, event.kind)
            waits = spec is not None and spec.postcondition is not None
            return RunStatus.VERIFYING if waits else RunStatus.SUCCEEDED
        case StepFailed(error_class=ErrorClass.AMBIGUOUS) | StepOutcomeUnknown():
            return RunStatus.UNKNOWN
        case StepFailed():
            return RunStatus.FAILED
        case ReconciliationScheduled():
            return RunStatus.RECONCILING
        case ReconciliationResult():
            return RunStatus(event.result) if event.result != "unknown" else RunStatus.UNKNOWN
        case PostconditionObserved():
            return RunStatus.SUCCEEDED
        case DeadlineMissed(deadline_kind="step_timeout") if status is RunStatus.STARTED:
            return RunStatus.UNKNOWN
        case ApprovalRequested():
            return RunStatus.AWAITING_APPROVAL
        case ApprovalDenied() if status is RunStatus.AWAITING_APPROVAL:
            return RunStatus.DENIED
    return status  # a grant, a missed deadline or postcondition: facts beside the state


class ScreenDriver(Driver):
    """The property driver, checking after every event what the screens would show."""

    def append(self, event: SagaEvent) -> None:
        super().append(event)
        if isinstance(event, ApprovalGranted | ApprovalDenied):
            self.check_second_answer(event)
        self.check_screens()

    def check_second_answer(self, event: ApprovalGranted | ApprovalDenied) -> None:
        """Another person's answer to the answered request names who answered and when."""
        run = self.state.run(event.step_id, event.kind)
        if run.approval is None or run.approval.action_hash != event.action_hash:
            return
        verb = "approved" if isinstance(event, ApprovalGranted) else "denied"
        with pytest.raises(ApprovalReplayed,
                           match=f"already {verb} by {event.approver} at version "
                                 f"{self.state.version}"):
            check_approval(self.state, event.step_id, event.kind, event.action_hash,
                           person("zed", tenant=""), self.now)

    def check_screens(self) -> None:
        state, events = self.state, self.events
        finished = state.finished is not None
        runs = [*state.forward.values(), *state.compensation.values()]
        for run in runs:
            expected = expected_status(self.definition, events, run.step_id, run.kind)
            assert run.status is expected, (run.step_id, run.kind, run.status, expected)
            if finished:
                assert run.status not in NEVER_WHEN_FINISHED, (run.step_id, run.status)
        # the read models (console graph, step table, list, queue) show the same
        record = replay(self.definition, [(e, n) for n, e in enumerate(events, start=1)])
        assert record is not None
        rows = rows_of(record)
        shown = {(r.step_id, r.kind): r.status for r in rows.steps}
        for (step_id, kind), status in shown.items():
            assert status == state.run(step_id, StepKind(kind)).status
        assert (rows.summary.phase == "finished") is finished
        if finished:
            assert rows.summary.current_steps == [] and rows.queue == ()
        for entry in rows.queue:
            if entry.entry == "approval":
                run = state.run(entry.step_id, StepKind(entry.kind))
                assert run.status is RunStatus.AWAITING_APPROVAL, (entry.step_id, run.status)
        assert not any(label.endswith(":denied") for label in rows.summary.current_steps)
        assert set(ACTIVE_RUN_STATES).isdisjoint({RunStatus.DENIED, RunStatus.WITHDRAWN})
        # and so does the status view (CLI status, the MCP gateway)
        view = view_of(_loaded(state, events))
        for step in view.steps:
            assert step.status is state.run(step.step_id, step.kind).status
        for pending in view.pending_approvals:
            run = state.run(pending["step_id"], StepKind(pending["kind"]))
            assert run.status is RunStatus.AWAITING_APPROVAL and not finished


def _loaded(state: SagaState, events: Sequence[SagaEvent]) -> LoadedSaga:
    started = events[0]
    assert isinstance(started, SagaStarted)
    return LoadedSaga(state.saga_id, state.definition, state, started, len(events))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(definition=gated_definitions(), data=st.data())
def test_every_state_shown_agrees_with_the_events_and_no_finished_saga_waits(
    definition: SagaDefinition, data: st.DataObject
) -> None:
    # given a random saga, when workers, people and operators act on it at random
    driver = play(ScreenDriver(definition, data))
    # then (checked after every event above) it ended or waits for a person, honestly
    status = driver.state.status
    seen = {(run.kind, run.status) for run in [*driver.state.forward.values(),
                                               *driver.state.compensation.values()]}
    covered(f"ended {status}")  # what the run covered (--hypothesis-show-statistics)
    if any(isinstance(e, ApprovalRequested) and e.kind is C for e in driver.events):
        covered("a compensation's approval was asked for")
    for kind, shown in sorted(seen & {(F, RunStatus.DENIED), (C, RunStatus.DENIED),
                                      (F, RunStatus.WITHDRAWN), (C, RunStatus.WITHDRAWN)}):
        covered(f"a {kind} run ended {shown}")
    if status.is_terminal:
        assert driver.state.live_phase is None
        assert not [r for r in [*driver.state.forward.values(),
                                *driver.state.compensation.values()]
                    if r.status in NEVER_WHEN_FINISHED]
