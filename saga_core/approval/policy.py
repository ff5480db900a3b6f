"""The approval policy in force for one operation: the catalogue's gate plus the definition's.

A step's operation (forward or compensation) is gated by the
:class:`~saga_core.approval.risk_gates.RiskGate`
of the tool it calls, read from the definition's snapshotted ``ToolSpec`` (a saga decides by
the contract it started under), combined with the definition's own ``approval``: a
definition may add a condition or make the gate stricter (a lower limit, shorter validity),
never remove or weaken one. :func:`effective_policy` builds the combination,
:func:`weakening_problems` is the registration rule that refuses a definition declaring a
weaker approval than its tools' gates, and :func:`grant_problem` is the claim-time re-check:
a gated operation runs only under an unexpired grant of this very action whose scope covers
its arguments. :meth:`GatePolicy.judge` adds the saga's running total
(:mod:`saga_core.approval.totals`)
to what the arguments alone say.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from saga_core.access.roles import APPROVER_ROLE
from saga_core.approval.risk_gates import RiskClass, RiskGate, judged_amount
from saga_core.approval.totals import running_total, saga_total_doubt
from saga_core.contracts import StepKind
from saga_core.definitions.definition import ApprovalPolicy, SagaDefinition
from saga_core.engine.resolved_commands import resolve_arguments
from saga_core.engine.state import SagaState, StepRun
from saga_core.errors import Problem, TemplateError
from saga_core.keys import action_hash

RENEWAL_SCOPE = "renew_authorization"


@dataclass(frozen=True)
class GatePolicy:
    """The combined approval policy of one operation: when it needs a person, who may
    approve, and how long a request and a grant stay valid."""

    operation: str  # "<step>:<kind>", the default scope label
    gate: RiskGate | None = None
    approval: ApprovalPolicy | None = None
    # A renewal (the provider's authorization expired) asks a person whatever the arguments.
    renewal: bool = False

    def applies(self, args: dict[str, Any]) -> bool:
        """Whether these resolved arguments need a person, judged on their own."""
        return bool(self.reasons(args))

    def judge(self, state: SagaState, step_id: str, kind: StepKind,
              args: dict[str, Any]) -> list[str]:
        """Why this operation of ``state`` with these resolved arguments needs a person: its
        arguments, and the saga's running total with this call (empty: it does not)."""
        found = self.reasons(args)
        if self.gate is not None and (
                why := saga_total_doubt(self.gate, state, step_id, kind, args)) is not None:
            found.append(f"catalogue gate: {why}")
        return found

    def reasons(self, args: dict[str, Any]) -> list[str]:
        """Why these resolved arguments need a person on their own (empty: they do not)."""
        found = ["the provider's authorization expired"] if self.renewal else []
        if self.gate is not None:
            found += [f"catalogue gate: {why}" for why in self.gate.reasons(args)]
        if self.approval is not None and self.approval.applies(args):
            found.append("the definition's approval policy applies")
        return found

    @property
    def role(self) -> str:
        """The role an approver must hold (the gate's; else the definition's; else approver)."""
        if self.gate is not None:
            return self.gate.role
        if self.approval is not None and self.approval.role is not None:
            return self.approval.role
        return APPROVER_ROLE

    @property
    def four_eyes(self) -> bool:
        """Whether the saga's starter is excluded: yes unless every declared value says no."""
        declared = [v for v in (self.gate.four_eyes if self.gate else None,
                                self.approval.four_eyes if self.approval else None)
                    if v is not None]
        return any(declared) or not declared

    @property
    def risk_class(self) -> RiskClass | None:
        """The class of risk the catalogue gate guards (None: a definition-only approval)."""
        return self.gate.risk_class if self.gate is not None else None

    @property
    def scope(self) -> str:
        """The label of what a grant approves."""
        if self.renewal:
            return RENEWAL_SCOPE
        if self.approval is not None and self.approval.scope:
            return self.approval.scope
        return self.operation

    @property
    def amount_arg(self) -> str | None:
        """The argument whose amount a grant's scope bounds (``up_to``), if any."""
        if self.gate is not None and self.gate.above is not None:
            return self.gate.above.arg
        if self.approval is not None and self.approval.above is not None:
            return self.approval.above.arg
        return None

    def _ttl(self, name: str) -> float:
        values = [getattr(p, name) for p in (self.gate, self.approval) if p is not None]
        return min(values) if values else float(getattr(ApprovalPolicy(), name))

    @property
    def request_ttl_s(self) -> float:
        """How long a request stays open: the shortest declared."""
        return self._ttl("request_ttl_s")

    @property
    def grant_ttl_s(self) -> float:
        """How long a grant stays valid: the shortest declared."""
        return self._ttl("grant_ttl_s")

    def requested_amount(self, args: dict[str, Any]) -> float | None:
        """The amount a request for these arguments asks for (None: no numeric amount)."""
        amount = judged_amount(args.get(self.amount_arg)) if self.amount_arg else None
        return float(amount) if amount is not None else None

    def covered(self, args: dict[str, Any], up_to: float | None) -> str | None:
        """Why a grant up to ``up_to`` does not cover these arguments (None: it does; a
        grant with no recorded bound covers the action it was bound to by hash)."""
        if up_to is None or self.amount_arg is None:
            return None
        amount = self.requested_amount(args)
        if amount is None:
            return f"{self.amount_arg} is not a number a grant can bound"
        if amount > up_to:
            return f"a grant up to {up_to:g} does not cover {self.amount_arg} {amount:g}"
        return None

    def evidence(self, state: SagaState, step_id: str, kind: StepKind, args: dict[str, Any],
                 shown: dict[str, Any]) -> dict[str, Any]:
        """What the operator queue and the audit show about this gate for ``args``; the
        amount is read from ``shown`` (the arguments with secrets masked), and so is the
        saga's running total (none is shown when the amount argument is secret)."""
        found = {
            "role": self.role,
            "four_eyes": self.four_eyes,
            "risk_class": str(self.risk_class) if self.risk_class else None,
            "reasons": self.judge(state, step_id, kind, args),
            "amount_arg": self.amount_arg,
            "amount": self.requested_amount(shown),
        }
        gate = self.gate
        if gate is not None and gate.above is not None and gate.saga_total is not None:
            this_call = gate.above.amount(shown)
            if this_call is not None:
                total = running_total(state, step_id, kind, gate.above)
                found["saga_total"] = total.evidence(gate.saga_total.limit, this_call)
        if gate is not None and gate.tenant_window is not None:
            window = gate.tenant_window
            found["tenant_window"] = {"limit": window.limit,
                                      "period_s": window.period.total_seconds()}
        return found


def effective_policy(
    definition: SagaDefinition, step_id: str, kind: StepKind
) -> GatePolicy | None:
    """The policy in force for a step's forward or compensation operation (None: ungated)."""
    spec = definition.tool_spec(step_id, kind) if _has_tool(definition, step_id, kind) else None
    gate = spec.gate if spec is not None else None
    approval = definition.approval_policy(step_id, kind)
    if gate is None and approval is None:
        return None
    return GatePolicy(f"{step_id}:{kind}", gate, approval)


def _has_tool(definition: SagaDefinition, step_id: str, kind: StepKind) -> bool:
    return kind is StepKind.FORWARD or definition.step(step_id).compensation is not None


def renewal_policy(definition: SagaDefinition, step_id: str, kind: StepKind) -> GatePolicy:
    """The policy of a renewed authorization: always a person, else as the operation's."""
    policy = effective_policy(definition, step_id, kind) or GatePolicy(f"{step_id}:{kind}")
    return GatePolicy(policy.operation, policy.gate, policy.approval, renewal=True)


def weakening(gate: RiskGate, approval: ApprovalPolicy) -> list[str]:
    """How ``approval`` declares less than ``gate`` demands (empty: it adds or tightens)."""
    found = []
    if gate.always and not approval.required:
        found.append("the gate always needs a person, this approval is not required")
    above = approval.above
    if gate.above is not None and above is not None and above.arg == gate.above.arg:
        if above.limit > gate.above.limit:
            found.append(f"limit {above.limit:g} on {above.arg} is higher than the gate's "
                         f"{gate.above.limit:g}")
    if approval.role is not None and approval.role != gate.role:
        found.append(f"role {approval.role!r} instead of the gate's {gate.role!r}")
    if gate.four_eyes and approval.four_eyes is False:
        found.append("four_eyes false, but the gate excludes the saga's starter")
    return found


def weakening_problems(definition: SagaDefinition, gates: dict[tuple[str, int], RiskGate]
                       ) -> list[Problem]:
    """A ``weakens_gate`` problem for every operation whose approval declares less than the
    catalogue gate of its tool (``gates`` by tool name and version)."""
    problems = []
    for step in definition.steps:
        operations = [("", step.tool, step.version, step.approval)]
        if step.compensation is not None:
            c = step.compensation
            operations.append((" compensation", c.tool, c.version, c.approval))
        for part, tool, version, approval in operations:
            gate = gates.get((tool, version))
            if gate is None or approval is None:
                continue
            for why in weakening(gate, approval):
                problems.append(Problem(f"step {step.id}{part} approval", "weakens_gate",
                                        f"weakens the {gate.risk_class} gate of "
                                        f"{tool}@{version}: {why}"))
    return problems


def grant_problem(state: SagaState, run: StepRun, now: datetime, *,
                  args: dict[str, Any] | None = None) -> str | None:
    """Why the run's next attempt may not be claimed at ``now`` for want of a grant: it is
    gated for its resolved arguments and has no grant of this very action, or the grant
    expired, or its scope does not cover the arguments. None: it may run.

    ``args``: the run's resolved arguments, when the caller has just resolved them (a claim
    ahead resolves its command first), so they are not resolved again here."""
    policy = effective_policy(state.definition, run.step_id, run.kind)
    if policy is None:
        return None
    if args is None:
        try:
            args = resolve_arguments(state, run.step_id, run.kind)
        except TemplateError:
            return None  # not a question of approval: the claim records the failure
    if not policy.judge(state, run.step_id, run.kind, args):
        return None
    approval = run.approval
    if approval is None or approval.status != "granted":
        return "gated, and no grant is recorded for it"
    if approval.action_hash != action_hash(state.saga_id, run.step_id, run.kind, args):
        return "the grant approves another action"
    if approval.grant_expires_at is None or now >= approval.grant_expires_at:
        expiry = approval.grant_expires_at.isoformat() if approval.grant_expires_at else "?"
        return f"the grant expired at {expiry}"
    return policy.covered(args, approval.up_to)
