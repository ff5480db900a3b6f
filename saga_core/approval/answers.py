"""Accepting a person's answer to an approval request: who may give it, and what it binds.

:func:`check_approval` returns the ``ApprovalGranted`` event to append, ``None`` for a second
identical click (a no-op), or raises; :func:`check_denial` the same for ``ApprovalDenied``.
Nothing is recorded when they raise. Only the same person's second click is a no-op: an answer
to a request somebody else already answered is refused (:class:`ApprovalReplayed`) naming who
answered it and at which saga version. The authority rules come from the step's gate
(:mod:`saga_core.approval.policy`), as the request recorded them:

* a proven person of the saga's tenant only — an agent never answers, whatever its roles
  (:class:`ApproverRefused`, ``ErrorKind.FORBIDDEN``);
* approving needs the gate's role; with four eyes, not by the saga's starter;
* denying needs the gate's role or the operator role (four eyes does not apply: stopping
  one's own saga is always allowed);
* the grant is bound to the request's action hash, its expiry and a scope: ``up_to`` bounds
  the gate's amount argument (default: the amount requested), and a grant that does not
  cover the requested amount is refused (:class:`~saga_core.errors.ApprovalOutOfScope`).
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from saga_core.access.roles import OPERATOR_ROLE, NotPermitted, Principal, PrincipalKind
from saga_core.approval.policy import RENEWAL_SCOPE, GatePolicy, effective_policy, renewal_policy
from saga_core.contracts import StepKind
from saga_core.engine.events import ApprovalDenied, ApprovalGranted
from saga_core.engine.resolved_commands import resolve_arguments
from saga_core.engine.state import ApprovalState, RunStatus, SagaState, StepRun
from saga_core.errors import (
    ApprovalAltered,
    ApprovalExpired,
    ApprovalNotPending,
    ApprovalOutOfScope,
    ApprovalReplayed,
)


class ApproverRefused(NotPermitted):
    """The principal may not answer this approval request; ``rule`` names the rule
    (tenant, agent, unauthenticated, role, four_eyes)."""

    hint = "ask a person of the saga's tenant holding the gate's role"

    def __init__(self, rule: str, message: str) -> None:
        self.rule = rule
        super().__init__(message)


def answered(approval: ApprovalState) -> str:
    """Who answered a request and at which saga version ("already approved by carol at
    version 9"): what a person who answers it too is told happened meanwhile."""
    verb = "approved" if approval.status == "granted" else "denied"
    when = f" at version {approval.answered_version}" if approval.answered_version else ""
    return f"already {verb} by {approval.approver}{when}"


def _pending(state: SagaState, step_id: str, kind: StepKind) -> tuple[StepRun, ApprovalState]:
    runs = state.forward if kind is StepKind.FORWARD else state.compensation
    run = runs.get(step_id)
    if run is None or run.approval is None:
        raise ApprovalNotPending(step_id, str(kind), "no approval was requested")
    return run, run.approval


def _policy(state: SagaState, step_id: str, kind: StepKind, approval: ApprovalState
            ) -> GatePolicy:
    if approval.scope == RENEWAL_SCOPE:
        return renewal_policy(state.definition, step_id, kind)
    return effective_policy(state.definition, step_id, kind) or GatePolicy(f"{step_id}:{kind}")


def _person_of_tenant(state: SagaState, who: Principal, what: str) -> None:
    if who.tenant != state.tenant:
        raise ApproverRefused("tenant", f"{who.kind} {who.name!r} of tenant {who.tenant!r} "
                                        f"may not {what} in a saga of another tenant")
    if who.kind is not PrincipalKind.PERSON:
        raise ApproverRefused("agent", f"{who.kind} {who.name!r} may not {what}: only a "
                                       "person answers an approval request, whatever its roles")
    if not who.authenticated:
        raise ApproverRefused("unauthenticated", f"{who.name!r} may not {what}: an answer is "
                                                 "recorded only for a proven principal")


def _role(state: SagaState, step_id: str, kind: StepKind, approval: ApprovalState) -> str:
    """The role the request asked for (recorded on it; older requests: the policy's)."""
    return approval.role or _policy(state, step_id, kind, approval).role


def check_approval(  # noqa: PLR0917 -- the approval binding has six parts
    state: SagaState,
    step_id: str,
    kind: StepKind,
    action_hash: str,
    approver: Principal,
    now: datetime,
    *,
    up_to: float | None = None,
    reason: str = "",
) -> ApprovalGranted | None:
    """The grant to append, None if this exact grant is already recorded, or a typed error
    (``reason``: why the approver said yes, recorded on the grant)."""
    if approver.tenant != state.tenant:  # nothing about another tenant's saga is told
        _person_of_tenant(state, approver, "approve")
    run, approval = _pending(state, step_id, kind)
    _person_of_tenant(state, approver, "approve")
    policy = _policy(state, step_id, kind, approval)
    role = _role(state, step_id, kind, approval)
    if not approver.has_role(role):
        raise ApproverRefused("role", f"{approver.name!r} may not approve {step_id} ({kind}): "
                                      f"the gate needs role {role!r}, and they hold "
                                      f"{sorted(approver.roles)}")
    four_eyes = approval.four_eyes if approval.four_eyes is not None else policy.four_eyes
    if four_eyes and state.started_by and approver.name == state.started_by:
        raise ApproverRefused("four_eyes", f"{approver.name!r} started this saga and may not "
                                           f"approve its {step_id} ({kind}): four eyes")
    if action_hash != approval.action_hash:
        raise ApprovalAltered(
            step_id, str(kind), f"approves {action_hash}, but {approval.action_hash} was requested"
        )
    if approval.status == "granted" and approval.approver == approver.name:
        return None  # a second click on the same request changes nothing
    if approval.status != "requested":
        # Somebody answered first: nothing is recorded, and the person is told who and when.
        raise ApprovalReplayed(step_id, str(kind), answered(approval))
    if kind is StepKind.FORWARD and (state.phase == "compensating" or state.finished):
        raise ApprovalReplayed(step_id, str(kind), "forward work of this saga has stopped")
    if run.status is not RunStatus.AWAITING_APPROVAL:
        raise ApprovalReplayed(step_id, str(kind), f"request no longer open ({run.status})")
    if now >= approval.expires_at:
        raise ApprovalExpired(
            step_id, str(kind), f"request expired at {approval.expires_at.isoformat()}"
        )
    covers = _scope(state, step_id, kind, policy, up_to)
    return ApprovalGranted(
        at=now,
        step_id=step_id,
        kind=kind,
        action_hash=action_hash,
        approver=approver.name,
        expires_at=now + timedelta(seconds=policy.grant_ttl_s),
        roles=[role],
        up_to=covers,
        reason=reason,
    )


def _scope(state: SagaState, step_id: str, kind: StepKind, policy: GatePolicy,
           up_to: float | None) -> float | None:
    """The amount the grant covers: ``up_to`` if it covers the requested amount, else the
    requested amount itself (None when the gate bounds no amount)."""
    args = resolve_arguments(state, step_id, kind)
    requested = policy.requested_amount(args)
    if up_to is None:
        return requested
    if isinstance(up_to, bool) or not isinstance(up_to, int | float) or not math.isfinite(up_to):
        raise ApprovalOutOfScope(step_id, str(kind), f"up_to must be a finite number, not "
                                                     f"{up_to!r}")
    if policy.amount_arg is None:
        raise ApprovalOutOfScope(step_id, str(kind), "this gate bounds no amount; approve "
                                                     "without up_to")
    problem = policy.covered(args, float(up_to))
    if problem is not None:
        raise ApprovalOutOfScope(step_id, str(kind), problem)
    return float(up_to)


def check_denial(  # noqa: PLR0917 -- the denial binding has six parts
    state: SagaState,
    step_id: str,
    kind: StepKind,
    denier: Principal,
    now: datetime,
    reason: str,
) -> ApprovalDenied | None:
    """The denial to append, None if the request is already denied, or a typed error: a
    person of the saga's tenant with the gate's role or the operator role may deny."""
    if denier.tenant != state.tenant:
        _person_of_tenant(state, denier, "deny")
    run, approval = _pending(state, step_id, kind)
    _person_of_tenant(state, denier, "deny")
    role = _role(state, step_id, kind, approval)
    held = sorted(r for r in (role, OPERATOR_ROLE) if denier.has_role(r))
    if not held:
        raise ApproverRefused("role", f"{denier.name!r} may not deny {step_id} ({kind}): it "
                                      f"needs role {role!r} or {OPERATOR_ROLE!r}, and they hold "
                                      f"{sorted(denier.roles)}")
    if approval.status == "denied" and approval.approver == denier.name:
        return None  # a second click changes nothing
    if approval.status != "requested":
        raise ApprovalReplayed(step_id, str(kind), answered(approval))
    if run.status is not RunStatus.AWAITING_APPROVAL:
        raise ApprovalReplayed(step_id, str(kind), f"request no longer open ({run.status})")
    return ApprovalDenied(at=now, step_id=step_id, kind=kind, action_hash=approval.action_hash,
                          approver=denier.name, reason=reason, roles=held)
