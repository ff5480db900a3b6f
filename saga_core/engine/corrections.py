"""Corrections: the pivot's declared repair, offered to a person when a later step fails.

Past the pivot a saga only goes forward: nothing before the pivot can be compensated, and
the pivot itself (a sent email, a filed report) cannot be undone. When a step after it
fails and the saga pauses for a person, the pivot's declared compensation (its
*correction*, e.g. ``email.send_correction`` for ``send_itinerary``) is offered as the typed
operator action ``run_correction`` with its residual impact: what the correction does and
what it does not undo. Chosen, it runs as a tracked step (the pivot's compensation
operation, with its own operation key); when it succeeds the saga ends
``COMMITTED_WITH_REPAIR``; when it fails the saga pauses again with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from saga_core.contracts import Semantics, StepKind
from saga_core.engine.state import FORWARD_DONE, RunStatus, SagaState

RUN_CORRECTION = "run_correction"


@dataclass(frozen=True)
class CorrectionOffer:
    """The pivot's correction as a person is offered it: what runs, what it does and not."""

    step_id: str  # the pivot: the correction is its compensation operation
    tool: str
    version: int
    does: str
    does_not_undo: tuple[str, ...]

    def as_evidence(self) -> dict[str, Any]:
        """The offer as the escalation evidence's ``details["correction"]``."""
        return {
            "action": RUN_CORRECTION,
            "step": self.step_id,
            "tool": f"{self.tool}@{self.version}",
            "does": self.does,
            "does_not_undo": list(self.does_not_undo),
            "then": "the saga ends COMMITTED_WITH_REPAIR when the correction succeeds",
        }

    @property
    def residual_impact(self) -> str:
        """One sentence: what the correction does, and what stays as it is."""
        return f"{self.does}; it does not undo: {'; '.join(self.does_not_undo)}"


def correction_offer(state: SagaState) -> CorrectionOffer | None:
    """The correction a person may run now: the saga paused on a forward step after its
    pivot succeeded, and the pivot declares a correction not yet run; else None."""
    escalation = state.escalation
    if escalation is None:
        return None
    return correction_for(state, escalation.step_id, escalation.kind)


def correction_for(
    state: SagaState, step_id: str | None, kind: StepKind | None
) -> CorrectionOffer | None:
    """The correction to offer when the saga pauses on ``step_id``'s ``kind`` operation."""
    pivot = state.definition.pivot
    if pivot is None or pivot.compensation is None:
        return None
    if pivot.semantics is not Semantics.IRREVERSIBLE:
        return None  # a compensable pivot's compensation undoes it: not a correction
    if state.phase != "forward" or state.correcting is not None:
        return None
    if step_id is None or step_id == pivot.id or kind is not StepKind.FORWARD:
        return None
    if state.forward[pivot.id].status not in (RunStatus.SUCCEEDED, RunStatus.FORCED):
        return None
    correction = state.compensation.get(pivot.id)
    if correction is None or correction.status is not RunStatus.PENDING:
        return None
    return CorrectionOffer(
        step_id=pivot.id,
        tool=pivot.compensation.tool,
        version=pivot.compensation.version,
        does=(f"repairs {pivot.id} ({pivot.tool}, {pivot.semantics}) with "
              f"{pivot.compensation.tool}@{pivot.compensation.version}, a new effect under "
              "its own operation key"),
        does_not_undo=_residual(state, pivot.id),
    )


def _residual(state: SagaState, pivot_id: str) -> tuple[str, ...]:
    definition = state.definition
    pivot = definition.step(pivot_id)
    kept = [s.id for s in definition.steps
            if s.id != pivot_id and s.leaves_effect
            and state.forward[s.id].status in FORWARD_DONE
            and state.forward[s.id].status is not RunStatus.SKIPPED]
    undone = [s.id for s in definition.steps
              if s.id in definition.descendants(pivot_id)
              and state.forward[s.id].status not in FORWARD_DONE]
    residual = [f"{pivot_id}'s own effect ({pivot.semantics}: it stays, corrected)"]
    if kept:
        residual.append(f"the effects of {', '.join(kept)} (they stay in place)")
    if undone:
        residual.append(f"{', '.join(undone)} (left not done: it will not run)")
    return tuple(residual)


def correction_summary(state: SagaState) -> str:
    """How a saga that ran its correction ends (the Finish summary)."""
    pivot = state.correcting or ""
    run = state.compensation[pivot]
    how = {RunStatus.SUCCEEDED: "sent", RunStatus.FORCED: "declared done by an operator",
           RunStatus.SKIPPED: "skipped by an operator"}.get(run.status, str(run.status))
    undone = [sid for sid, r in state.forward.items() if r.status not in FORWARD_DONE]
    left = f"; left not done: {', '.join(undone)}" if undone else ""
    return f"committed with repair: correction of {pivot} {how}{left}"
