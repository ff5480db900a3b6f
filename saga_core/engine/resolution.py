"""The operator's resolve rule: which typed actions answer a paused saga, and what each does.

A saga in ``MANUAL_INTERVENTION`` waits for a person. :func:`resolution_options` lists the
actions that fit its escalation; :func:`resolve_escalation` turns one operator request into
the ``OperatorAction`` event to append, ``None`` for a second click on the same button (a
no-op), or a typed error: :class:`~saga_core.errors.NothingToResolve` when nothing waits
for a person, :class:`~saga_core.errors.OperatorActionRejected` when the action does not
fit the saga. Pure: the caller passes the folded state, its events and ``now``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any, Final, get_args

from saga_core.contracts import StepKind
from saga_core.engine.corrections import RUN_CORRECTION, correction_for, correction_offer
from saga_core.engine.events import OperatorAction, OperatorActionName, SagaEvent
from saga_core.engine.resolved_commands import pending_key_reuse
from saga_core.engine.state import Escalation, SagaState
from saga_core.errors import NothingToResolve, OperatorActionRejected

OPERATOR_ACTIONS: Final[tuple[OperatorActionName, ...]] = get_args(OperatorActionName)
"""The typed operator actions (``sagafleet resolve ACTION``)."""

ACTION_EFFECTS: Final[Mapping[OperatorActionName, str]] = MappingProxyType({
    "retry_step": "run the operation again, with the same operation key",
    "retry_as_new_operation": (
        "run the operation again under a new operation key (its next operation version), "
        "with the request as it resolves now (asking its approval again if it needs one); "
        "the provider cannot dedupe it against earlier attempts, so first check that they "
        "left no effect"
    ),
    "skip": "leave the operation undone and go on",
    "force_complete": "declare the operation done (checked out of band); go on",
    "mark_compensated": "declare the step's compensation done (checked out of band); go on",
    "resume": "end the pause with a fresh retry budget; the saga may escalate again",
    "run_correction": (
        "run the pivot's declared correction as a tracked step with its own operation key "
        "(the failed step after the pivot is left not done); the saga ends "
        "COMMITTED_WITH_REPAIR when it succeeds"
    ),
})
"""What each operator action does to the saga (the fold in ``saga_core.engine.state`` applies
it)."""


@dataclass(frozen=True)
class OperatorRequest:
    """What an operator asks for: an action, the operation it is about, who, why, evidence."""

    action: OperatorActionName
    actor: str
    reason: str = ""
    step_id: str | None = None
    kind: StepKind = StepKind.FORWARD
    evidence: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ResolutionOption:
    """One action that fits a saga's escalation, the operation it targets, and its effect."""

    action: OperatorActionName
    step_id: str | None
    kind: StepKind | None
    effect: str


def target_kind(action: str, kind: StepKind) -> StepKind:
    """Which operation of the step an action is about: ``mark_compensated`` and
    ``run_correction`` always mean the compensation; every other action the kind named."""
    return StepKind.COMPENSATION if action in ("mark_compensated", RUN_CORRECTION) else kind


def escalation_alternatives(
    state: SagaState, kind: StepKind | None, step_id: str | None = None
) -> list[str]:
    """What a person may do when the saga pauses on step ``step_id``'s operation of ``kind``.

    ``decide`` records these as the escalation evidence's alternatives; ``cancel`` is the
    cancel command (``CancelRequested``), every other one an operator action. When the
    operation's next attempt would reuse its key with another request, retrying under the
    same key cannot run; retrying as a new operation (a new key) replaces it.
    """
    retry = "retry_step"
    if step_id is not None and kind is not None and pending_key_reuse(state, step_id, kind):
        retry = "retry_as_new_operation"
    if kind is StepKind.COMPENSATION:
        return [retry, "mark_compensated", "skip"]
    alternatives = [retry, "skip", "force_complete", "resume"]
    if not state.pivot_passed and state.phase == "forward":
        alternatives.append("cancel")
    if correction_for(state, step_id, kind) is not None:
        alternatives.append(RUN_CORRECTION)  # past the pivot: its declared repair
    return alternatives


def resolution_options(state: SagaState) -> tuple[ResolutionOption, ...]:
    """The operator actions that fit the saga's current escalation (none when nothing waits).

    Each targets the escalated operation; ``resume`` is also offered for a pause that names
    no operation, the step actions are not (they need one).
    """
    escalation = state.escalation
    if escalation is None:
        return ()
    options = []
    for action in OPERATOR_ACTIONS:
        if action not in escalation_alternatives(state, escalation.kind, escalation.step_id):
            continue
        if escalation.step_id is None and action != "resume":
            continue
        if action == RUN_CORRECTION:
            # It targets the pivot's correction, not the escalated operation.
            offer = correction_offer(state)
            if offer is not None:
                options.append(ResolutionOption(
                    action, offer.step_id, StepKind.COMPENSATION,
                    f"{ACTION_EFFECTS[action]}. Residual impact: {offer.residual_impact}"))
            continue
        options.append(ResolutionOption(action, escalation.step_id, escalation.kind,
                                        ACTION_EFFECTS[action]))
    return tuple(options)


def is_repeated_action(
    state: SagaState, events: Sequence[SagaEvent], request: OperatorRequest
) -> bool:
    """Whether this action was already recorded and nothing since asks for a person again.

    A second click on the same button finds the saga no longer paused and the same action
    as the last operator action: it must record nothing. A new escalation after the first
    action makes the same action meaningful again.
    """
    if state.escalation is not None:
        return False
    last = next((e for e in reversed(events) if isinstance(e, OperatorAction)), None)
    if last is None:
        return False
    return (last.action, last.step_id, target_kind(last.action, last.kind)) == (
        request.action, request.step_id, target_kind(request.action, request.kind))


def resolve_escalation(
    state: SagaState, events: Sequence[SagaEvent], request: OperatorRequest, now: datetime
) -> OperatorAction | None:
    """The event that records ``request``, None for a repeated click, or a typed error."""
    if is_repeated_action(state, events, request):
        return None
    escalation = state.escalation
    if escalation is None:
        raise NothingToResolve(state.saga_id, str(state.status))
    target = target_kind(request.action, request.kind)
    for option in resolution_options(state):
        # resume may name no operation; every other action names the escalated one
        names_it = (request.step_id, target) == (option.step_id, option.kind or target)
        # resume and run_correction may name no operation (the correction is the pivot's)
        unnamed_ok = option.action in ("resume", RUN_CORRECTION) and request.step_id is None
        if option.action == request.action and (names_it or unnamed_ok):
            step_id = option.step_id if option.action == RUN_CORRECTION else request.step_id
            return OperatorAction(at=now, action=request.action, step_id=step_id,
                                  kind=target, actor=request.actor, reason=request.reason,
                                  evidence=dict(request.evidence))
    raise OperatorActionRejected(_misfit(state, escalation, request))


def _misfit(state: SagaState, escalation: Escalation, request: OperatorRequest) -> str:
    """Why the request does not fit: what the saga waits on and which actions would."""
    waits_on = (f"the {escalation.kind or StepKind.FORWARD} operation of step "
                f"{escalation.step_id!r}" if escalation.step_id is not None else "no operation")
    named = (f"{request.action} on the {target_kind(request.action, request.kind)} operation "
             f"of step {request.step_id!r}" if request.step_id is not None else request.action)
    fits = ", ".join(o.action for o in resolution_options(state)) or "none"
    return (f"saga {state.saga_id} waits on {waits_on}; {named} does not fit it "
            f"(the actions that fit: {fits})")
