"""Claiming ahead: the steps a worker takes in the same append as its own commit.

A worker that continues a saga (its claim, or a result it records) may take every step the
commit leaves due and claimable now, saving a commit and a broker message per step. What
it asks for is a value, :class:`ClaimAhead` (who claims, for how long); what the orchestrator
takes for it is :func:`claims_ahead`, a pure function of the state after the commit's
decisions and ``now``. Each claim is judged with the claims before it folded in, so a saga's
running total counts its siblings claimed in the same append.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from application.messages import StepCommand
from saga_core import check_claim, key_reuse, resolve_command
from saga_core.approval.totals import window_call
from saga_core.engine.events import StepStarted
from saga_core.engine.resolved_commands import ResolvedCommand
from saga_core.engine.state import RunStatus, SagaState, evolve
from saga_core.errors import TemplateError

__all__ = ["ClaimAhead", "ClaimTaken", "claims_ahead", "started_event"]


@dataclass(frozen=True)
class ClaimAhead:
    """A committer's wish to claim, in its commit, every step due and claimable now."""

    worker_id: str
    """The worker that will run the steps claimed (recorded on each ``StepStarted``)."""
    lease: timedelta
    """How long each claim holds before the sweeper may call its outcome unknown."""


@dataclass(frozen=True)
class ClaimTaken:
    """One step claimed ahead: its command, the event that claims it, what it resolved to."""

    command: StepCommand
    started: StepStarted
    resolved: ResolvedCommand


def started_event(
    command: StepCommand,
    resolved: ResolvedCommand,
    now: datetime,
    state: SagaState,
    *,
    worker_id: str,
    lease: timedelta,
) -> StepStarted:
    """The ``StepStarted`` that claims ``command`` for ``worker_id`` until ``now + lease``."""
    # The step's declared timeout is a time in the log: decide and the sweeper read it.
    timeout_s = state.definition.step_timeout_s(command.step_id, command.kind)
    return StepStarted(
        at=now,
        step_id=command.step_id,
        kind=command.kind,
        attempt=command.attempt,
        operation_key=resolved.operation_key,
        request_hash=resolved.request_hash,
        worker_id=worker_id,
        lease_expires_at=now + lease,
        timeout_at=now + timedelta(seconds=timeout_s) if timeout_s is not None else None,
    )


def claims_ahead(state: SagaState, now: datetime, ahead: ClaimAhead) -> list[ClaimTaken]:
    """Every scheduled step of the saga claimable now, each with the event that claims it.

    Left out, for the plain path of their own wake-up: a step whose gate has a tenant window
    (its own claim reserves in it), a step whose arguments do not resolve (the plain path
    records the failure) and one whose key would be reused with another request (the plain
    path records the escalation).
    """
    taken: list[ClaimTaken] = []
    for run in [*state.forward.values(), *state.compensation.values()]:
        if run.status is not RunStatus.SCHEDULED:
            continue
        # Resolved once: the claim's grant check judges the same arguments.
        try:
            resolved = resolve_command(state, run.step_id, run.kind)
        except TemplateError:
            continue
        if not check_claim(state, run.step_id, run.kind, run.attempt, now, args=resolved.args):
            continue
        if window_call(state, run.step_id, run.kind, now) is not None:
            continue  # reserved by its own claim, which its wake-up brings
        if key_reuse(state, resolved) is not None:
            continue
        command = StepCommand(
            saga_id=state.saga_id, step_id=run.step_id, kind=run.kind, attempt=run.attempt
        )
        started = started_event(
            command, resolved, now, state, worker_id=ahead.worker_id, lease=ahead.lease
        )
        taken.append(ClaimTaken(command, started, resolved))
        state = evolve(state, started)
    return taken
