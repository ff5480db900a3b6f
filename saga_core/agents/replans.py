"""Replans keep their keys: an agent's revised plan becomes the next plan version of the
same saga (failure table row 4, "the model replans the same action as a new step").

Step ids of plan actions name the business action (tool, version, canonical arguments; see
:func:`saga_core.agents.plans.action_step_id`) and operation keys derive from the saga id and the
step id, so inside the same saga an action the revision keeps is *found*, not repeated:

* **kept**: in both plans; its run (and key) stays as recorded;
* **dropped**: gone from the revision after it ran; it stays in the saga's definition,
  retired, and is compensated in dependency order while the rest goes forward;
* **removed**: gone from the revision and never claimed; it simply goes;
* **added**: new in the revision; it runs like any step.

A revision is refused (:class:`~saga_core.errors.RevisionRefused`, every reason at once)
when the saga is not running forward (terminal, compensating, paused for a person), when it
would drop an action that cannot be compensated (the pivot or a step after it that ran, an
action without compensation that ran) or one whose outcome is not settled (in flight,
awaiting approval, in doubt), when it changes an action already claimed under the same id,
or brings back an action already compensated.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from saga_core.agents.plans import AgentPlan, validate_plan
from saga_core.contracts import Semantics
from saga_core.definitions.catalogue import ToolCatalogue
from saga_core.definitions.definition import SagaDefinition, StepDefinition
from saga_core.definitions.validation import validate_definition
from saga_core.engine.events import PlanRevised
from saga_core.engine.state import RunStatus, SagaState
from saga_core.errors import DefinitionError, Problem, RevisionRefused
from saga_core.keys import payload_hash

#: Forward runs a revision may drop: never claimed (removed) or done (retired, compensated).
_DROPPABLE_DONE = frozenset({RunStatus.SUCCEEDED, RunStatus.FORCED, RunStatus.SKIPPED})


@dataclass(frozen=True)
class RevisionMapping:
    """How a revised plan's actions map onto the saga's current ones (by step id).

    An action whose id stays but whose definition changed (its dependencies, or an
    explicit id on other arguments) before it was ever claimed is both removed and added:
    it gets fresh runs under the same key, so it waits for its new dependencies."""

    kept: tuple[str, ...]
    dropped: tuple[str, ...]
    removed: tuple[str, ...]
    added: tuple[str, ...]


def plan_hash(plan: AgentPlan) -> str:
    """The content hash of a plan (its canonical JSON): what a revision event records."""
    return payload_hash(plan.model_dump(mode="json"))


def map_revision(state: SagaState, revised: SagaDefinition) -> RevisionMapping:
    """Kept, dropped, removed and added step ids, in the order the definitions list them;
    :class:`RevisionRefused` with every reason if the revision cannot apply to ``state``."""
    problems = _saga_problems(state)
    current = state.definition
    new_ids = [step.id for step in revised.steps]
    kept, added, replaced = [], [], []
    for step in revised.steps:
        if not current.has_step(step.id):
            added.append(step.id)
            continue
        before = current.step(step.id)
        if before != step and _never_claimed(state, step.id):
            # Same id, another action, nothing claimed yet: a fresh run (new runs, same key).
            replaced.append(step.id)
            added.append(step.id)
            continue
        kept.append(step.id)
        problems += _kept_problems(state, before, step)
    dropped, removed = [], list(replaced)
    for step in current.steps:
        if step.id in new_ids:
            continue
        if _never_claimed(state, step.id):
            removed.append(step.id)
        elif step.id in state.retired:
            continue  # dropped by an earlier revision after it ran: still retired
        else:
            problems += _drop_problems(state, step)
            dropped.append(step.id)
    if problems:
        raise RevisionRefused(state.saga_id, problems)
    return RevisionMapping(tuple(kept), tuple(dropped), tuple(removed), tuple(added))


#: A forward run in one of these, never claimed, has no effect anywhere: a revision removes it
#: (a broker command still on its way finds no such step and is dropped).
_UNCLAIMED = frozenset({RunStatus.PENDING, RunStatus.SCHEDULED, RunStatus.AWAITING_APPROVAL,
                        RunStatus.RETRY_REQUESTED})


def _never_claimed(state: SagaState, step_id: str) -> bool:
    run = state.forward[step_id]
    return run.status in _UNCLAIMED and run.request_hash is None and run.attempt <= 1


def _saga_problems(state: SagaState) -> list[Problem]:
    where = f"saga {state.saga_id}"
    if not state.started:
        return [Problem(where, "not_started", "no saga to revise")]
    if state.finished is not None:
        return [Problem(where, "saga_terminal", f"the saga already ended {state.finished}")]
    if state.phase != "forward":
        return [Problem(where, "saga_compensating", "the saga is compensating: too late")]
    if state.escalation is not None:
        return [Problem(where, "saga_paused",
                        f"the saga waits for a person: {state.escalation.reason}")]
    return []


def _kept_problems(
    state: SagaState, before: StepDefinition, after: StepDefinition
) -> list[Problem]:
    run = state.forward[before.id]
    where = f"action {before.id}"
    if before.id in state.retired:
        comp = state.compensation.get(before.id)
        if comp is not None and comp.status is not RunStatus.PENDING:
            return [Problem(where, "already_compensated",
                            "a revision dropped it and its compensation has started")]
    same = (before.tool, before.version, before.args) == (after.tool, after.version, after.args)
    if not same and not _never_claimed(state, before.id):
        return [Problem(where, "changed_after_run",
                        f"it was claimed ({run.status}) with other arguments; give the "
                        "changed action another id")]
    return []


def _drop_problems(state: SagaState, step: StepDefinition) -> list[Problem]:
    run = state.forward[step.id]
    where = f"action {step.id}"
    pivot = state.definition.pivot
    if run.status not in _DROPPABLE_DONE:
        return [Problem(where, "outcome_unsettled",
                        f"it is {run.status}: wait until its outcome is known")]
    if run.status is RunStatus.SKIPPED:
        return []
    if pivot is not None and (
        step.id == pivot.id or step.id in state.definition.descendants(pivot.id)
    ):
        return [Problem(where, "past_pivot",
                        f"it ran at or after the pivot {pivot.id}: it cannot be compensated")]
    if step.semantics is Semantics.IRREVERSIBLE:
        return [Problem(where, "past_pivot",
                        f"it ran and {step.tool} is irreversible (a point of no return): only "
                        "its correction repairs it, a revision cannot undo it")]
    if step.compensation is None and step.leaves_effect:
        return [Problem(where, "not_compensable",
                        f"it ran and {step.tool} ({step.semantics}) has no compensation")]
    return []


def revised_definition(
    state: SagaState, revised: SagaDefinition, mapping: RevisionMapping
) -> SagaDefinition:
    """The definition the saga runs after the revision: the revised plan's steps, then every
    retired step (dropped now or before) so its compensation can still be resolved."""
    retired_ids = [
        s.id for s in state.definition.steps
        if (s.id in mapping.dropped or s.id in state.retired) and not revised.has_step(s.id)
    ]
    retired = [state.definition.step(step_id) for step_id in retired_ids]
    definition = revised.model_copy(update={"steps": [*revised.steps, *retired]})
    try:
        # Round-trip so validators and the cached content hash see the final steps.
        return SagaDefinition.model_validate(definition.model_dump(mode="json"))
    except ValueError as exc:  # pragma: no cover - both halves were valid definitions
        raise RevisionRefused(state.saga_id, [Problem("revision", "malformed", str(exc))]) from exc


def revise_plan(
    state: SagaState,
    plan: AgentPlan,
    catalogue: ToolCatalogue,
    now: datetime,
    *,
    actor: str = "",
    reason: str = "",
    allowlist: set[tuple[str, int]] | None = None,
) -> PlanRevised | None:
    """The event recording ``plan`` as the next version of the saga's plan (None when it
    is the plan the saga already runs: submitting a revision twice changes nothing).

    :class:`~saga_core.errors.PlanRejected` if the plan itself is invalid,
    :class:`RevisionRefused` if it cannot apply to the saga as it stands."""
    current = state.definition
    revised = validate_plan(
        plan, catalogue, name=current.name, version=current.version + 1,
        input_fields=dict(current.input), allowlist=allowlist,
    )
    mapping = map_revision(state, revised)
    active = [s for s in current.steps if s.id not in state.retired]
    if not (mapping.dropped or mapping.removed or mapping.added) and active == revised.steps:
        return None  # the plan the saga already runs (a redelivered revision): nothing new
    definition = revised_definition(state, revised, mapping)
    try:
        definition = validate_definition(definition, catalogue)
    except DefinitionError as exc:
        raise RevisionRefused(state.saga_id, exc.problems) from exc
    return PlanRevised(
        at=now,
        revision=state.plan_revision + 1,
        plan_hash=plan_hash(plan),
        definition=definition.model_dump(mode="json"),
        definition_hash=definition.content_hash(),
        kept=list(mapping.kept),
        dropped=list(mapping.dropped),
        removed=list(mapping.removed),
        added=list(mapping.added),
        actor=actor,
        reason=reason,
    )


__all__ = [
    "RevisionMapping",
    "RevisionRefused",
    "map_revision",
    "plan_hash",
    "revise_plan",
    "revised_definition",
]
