"""Accepting a human's approval: bound to the pending request's action hash, scope and expiry.

:func:`check_approval` returns the ``ApprovalGranted`` event to append, ``None`` for a second
identical click (a no-op), or raises a typed :class:`~saga_core.errors.ApprovalError`.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from saga_core.contracts import StepKind
from saga_core.definition import ApprovalPolicy
from saga_core.errors import (
    ApprovalAltered,
    ApprovalExpired,
    ApprovalNotPending,
    ApprovalReplayed,
)
from saga_core.events import ApprovalGranted
from saga_core.state import RunStatus, SagaState


def check_approval(  # noqa: PLR0917 -- the approval binding has six parts
    state: SagaState,
    step_id: str,
    kind: StepKind,
    action_hash: str,
    approver: str,
    now: datetime,
) -> ApprovalGranted | None:
    """The grant to append, None if this exact grant is already recorded, or a typed error."""
    runs = state.forward if kind is StepKind.FORWARD else state.compensation
    run = runs.get(step_id)
    approval = run.approval if run is not None else None
    if run is None or approval is None:
        raise ApprovalNotPending(step_id, str(kind), "no approval was requested")
    if action_hash != approval.action_hash:
        raise ApprovalAltered(
            step_id, str(kind), f"approves {action_hash}, but {approval.action_hash} was requested"
        )
    if approval.status == "granted":
        return None  # a second click on the same request changes nothing
    if approval.status == "denied":
        raise ApprovalReplayed(step_id, str(kind), f"already denied by {approval.approver}")
    if kind is StepKind.FORWARD and (state.phase == "compensating" or state.finished):
        raise ApprovalReplayed(step_id, str(kind), "forward work of this saga has stopped")
    if run.status is not RunStatus.AWAITING_APPROVAL:
        raise ApprovalReplayed(step_id, str(kind), f"request no longer open ({run.status})")
    if now >= approval.expires_at:
        raise ApprovalExpired(
            step_id, str(kind), f"request expired at {approval.expires_at.isoformat()}"
        )
    policy = state.definition.approval_policy(step_id, kind) or ApprovalPolicy()
    return ApprovalGranted(
        at=now,
        step_id=step_id,
        kind=kind,
        action_hash=action_hash,
        approver=approver,
        expires_at=now + timedelta(seconds=policy.grant_ttl_s),
    )
