"""The run's verdicts, from what the log, the ledgers and the broker say at the end.

Sagas: every saga in the log is terminal, or paused in MANUAL_INTERVENTION with an
evidence reason; its business invariant holds in the providers' ledgers (COMPLETED = one
trip and one net charge; COMPENSATED = no holds and no net charge); no ledger holds a
duplicate effect or the footprint of a saga the log does not know.

Commands: every accepted command (its publish returned) is exactly one of

* ``acted``: its effect is in the log (start: a saga with its key for its tenant;
  cancel: CancelRequested in the saga; plan: a definition with its name);
* ``moot``: a cancel for a saga that had finished before the cancel was accepted;
* ``dead_lettered``: refused with a reason in ``fleet.dead_letters``;
* ``acted_after_resend``: its message was in Redis when the run emptied Redis (no
  persistence), or its publish returned while Redis was being emptied, and the agent,
  having seen the restart, resent it (the README's protocol: check with ``find``, send
  again) and the resend acted. A command resent although its first message had not been
  in Redis at the restart, accepted before it, means the fleet had lost that message
  before the restart: ``lost``, whatever its resend did. One accepted after the restart
  (its first message in the new Redis) whose resend was a harmless repeat is ``acted``;
* ``lost_with_broker_state``: its message went with the emptied Redis and no resend acted
  (the agent resends by default; with ``--no-resend`` this is what a broker without
  persistence loses, counted apart from losses the fleet caused);
* ``pending_in_broker``: still queued or unacknowledged in Redis at the end (a worker
  SIGKILLed while holding it: Redis hands it out again after the visibility timeout);
* ``lost``: none of the above. The fleet lost it; always a violation.

Commands whose publish never returned are ``unpublished``: the agent knows, so not lost.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from chaos_run.agent import AGENT_TENANT, Command
from chaos_run.observe import DeadLetter, SagaFacts
from saga_core.contracts import SagaStatus
from sagafleet.sandbox import TripLedger

OUTCOMES = ("acted", "acted_after_resend", "moot", "dead_lettered", "lost_with_broker_state",
            "pending_in_broker", "lost")


@dataclass
class SagaVerdicts:
    """Settlement and invariants over every saga in the log."""

    started: int = 0
    by_status: Counter[str] = field(default_factory=Counter)
    unsettled: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    manual_reasons: list[dict[str, Any]] = field(default_factory=list)  # see manual_reasons()


def reason_class(reason: str) -> str:
    """An escalation reason without its instance details: the text before its first ': '
    (what follows names the resource or quotes the provider, e.g. "target changed since
    the forward step (precondition): PreconditionFailed: hotels.release: hold_id 'hh_1'
    is at version 2, expected 1")."""
    return reason.split(": ", 1)[0].strip() or reason


def manual_reasons(facts: dict[str, SagaFacts], examples: int = 3) -> list[dict[str, Any]]:
    """The sagas in MANUAL_INTERVENTION grouped by why (the reason class of their last
    escalation and its step), most first: count, tenants, one full reason and a few ids."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for saga_id, saga in sorted(facts.items()):
        if saga.status != SagaStatus.MANUAL_INTERVENTION:
            continue
        reason = saga.manual_reason or "(no evidence reason)"
        step = (saga.manual_step or "").strip() or "(saga)"
        group = groups.setdefault((reason_class(reason), step), {
            "reason": reason_class(reason), "step": step, "count": 0,
            "tenants": Counter(), "example": reason, "sagas": []})
        group["count"] += 1
        group["tenants"][saga.tenant] += 1
        if len(group["sagas"]) < examples:
            group["sagas"].append(saga_id)
    ordered = sorted(groups.values(), key=lambda g: (-g["count"], g["reason"], g["step"]))
    return [{**g, "tenants": dict(sorted(g["tenants"].items()))} for g in ordered]


def _zero_ledger(saga_id: str) -> TripLedger:
    return TripLedger(saga_id, 0, 0, 0, 0, 0, 0, 0, 0, 0)


def judge_sagas(facts: dict[str, SagaFacts], ledgers: dict[str, TripLedger]) -> SagaVerdicts:
    """Each saga's state against its ledgers; ledgers no saga in the log explains."""
    verdicts = SagaVerdicts(started=len(facts))
    for saga_id, saga in sorted(facts.items()):
        status = saga.status
        verdicts.by_status[status] += 1
        ledger = ledgers.get(saga_id) or _zero_ledger(saga_id)
        if status == "OPEN":
            verdicts.unsettled.append(saga_id)
        elif status == SagaStatus.MANUAL_INTERVENTION:
            if not saga.manual_reason:
                verdicts.problems.append(f"{saga_id}: MANUAL_INTERVENTION without evidence")
        elif status == SagaStatus.COMPLETED and not ledger.is_complete_trip:
            verdicts.problems.append(f"{saga_id}: COMPLETED but no complete trip in the ledgers")
        elif status == SagaStatus.COMPENSATED and not ledger.is_unwound:
            verdicts.problems.append(f"{saga_id}: COMPENSATED but holds or a charge remain")
        elif status != SagaStatus.PARTIALLY_COMPENSATED and not ledger.holds_trip_invariant:
            verdicts.problems.append(f"{saga_id}: {status} breaks the trip invariant")
    for saga_id in sorted(set(ledgers) - set(facts)):
        verdicts.problems.append(f"{saga_id}: in the providers' ledgers but not in the log")
    verdicts.manual_reasons = manual_reasons(facts)
    return verdicts


@dataclass
class CommandVerdicts:
    """Every agent command's outcome, counted by kind, and the details that explain them."""

    sent: Counter[str] = field(default_factory=Counter)
    accepted: Counter[str] = field(default_factory=Counter)
    outcomes: dict[str, Counter[str]] = field(default_factory=dict)
    dead_letter_reasons: Counter[str] = field(default_factory=Counter)
    lost: list[dict[str, Any]] = field(default_factory=list)
    lost_with_broker_state: list[dict[str, Any]] = field(default_factory=list)
    sent_while_down: Counter[str] = field(default_factory=Counter)
    publish_retries: int = 0
    resent: Counter[str] = field(default_factory=Counter)  # commands resent after a restart
    unpublished: int = 0
    unresolved: set[str] = field(default_factory=set)  # accepted, no effect, no dead letter


def _acted(command: Command, facts: dict[str, SagaFacts], by_key: dict[tuple[str, str], str],
           plan_names: set[str]) -> str | None:
    """'acted', 'moot' or None (no effect) for one accepted command."""
    if command.kind == "start":
        return "acted" if (AGENT_TENANT, command.target) in by_key else None
    if command.kind == "plan":
        return "acted" if command.target in plan_names else None
    saga = facts.get(command.target)
    if saga is None:
        return None
    if saga.cancel_requested:
        return "acted"
    finished_first = (saga.finished_at is not None and command.accepted_at is not None
                      and saga.finished_at < command.accepted_at)
    return "moot" if finished_first else None


def _dead_letter_for(command: Command, letters: list[DeadLetter]) -> DeadLetter | None:
    """The command's dead letter: by Celery task id where the table keeps it, else by the
    argument naming its target."""
    field_name = {"start": "key", "cancel": "saga_id", "plan": "name"}[command.kind]
    for letter in letters:
        if letter.task != command.task:
            continue
        if letter.task_id is not None:
            if letter.task_id in command.message_ids:
                return letter
        elif letter.kwargs.get(field_name) == command.target:
            return letter
    return None


def acted_commands(commands: list[Command], facts: dict[str, SagaFacts],
                   plan_names: set[str]) -> set[str]:
    """Ids of the commands whose effect is in the log (or moot): what the agent's
    ``sagafleet find`` would show it, for all of them at once."""
    by_key = {(s.tenant, s.key): s.saga_id for s in facts.values() if s.key is not None}
    return {c.command_id for c in commands if _acted(c, facts, by_key, plan_names)}


def _after_resend(command: Command, went_with_redis: bool,
                  blackouts: Sequence[tuple[float, float]]) -> str:
    """The outcome of a command that acted and was resent (see the module docstring)."""
    if went_with_redis:
        return "acted_after_resend"
    first_resend = command.resent_at_s[0]
    restart = max((b for b in blackouts if b[0] <= first_resend), default=None)
    accepted_s = command.accepted_s or 0.0
    if restart is not None and accepted_s < restart[0]:
        return "lost"  # not in Redis at the restart, not acting: the fleet had lost it
    return "acted"


def judge_commands(commands: list[Command], facts: dict[str, SagaFacts], plan_names: set[str],
                   letters: list[DeadLetter], dropped: dict[str, str],
                   in_broker: frozenset[str],
                   blackouts: Sequence[tuple[float, float]] = ()) -> CommandVerdicts:
    """Classify every command the agent sent (see the module docstring)."""
    by_key = {(s.tenant, s.key): s.saga_id for s in facts.values() if s.key is not None}
    verdicts = CommandVerdicts()
    for command in commands:
        verdicts.sent[command.kind] += 1
        verdicts.publish_retries += max(0, command.attempts - 1)
        for server in command.servers_down:
            verdicts.sent_while_down[server] += 1
        if command.accepted_s is None:
            verdicts.unpublished += 1
            continue
        verdicts.accepted[command.kind] += 1
        outcome = _acted(command, facts, by_key, plan_names)
        letter = None if outcome else _dead_letter_for(command, letters)
        if outcome is None and letter is not None:
            outcome = "dead_lettered"
            verdicts.dead_letter_reasons[letter.reason.split(":")[0][:80]] += 1
        accepted_s = command.accepted_s
        in_blackout = any(start <= accepted_s <= end for start, end in blackouts)
        went_with_redis = in_blackout or any(i in dropped for i in command.message_ids)
        if command.resends:
            verdicts.resent[command.kind] += 1
        if outcome == "acted" and command.resends:
            outcome = _after_resend(command, went_with_redis, blackouts)
        if outcome is None:
            verdicts.unresolved.add(command.command_id)
            if went_with_redis:
                outcome = "lost_with_broker_state"
            elif any(i in in_broker for i in command.message_ids):
                outcome = "pending_in_broker"
            else:
                outcome = "lost"
        verdicts.outcomes.setdefault(outcome, Counter())[command.kind] += 1
        if outcome in ("lost", "lost_with_broker_state"):
            item = {"kind": command.kind, "target": command.target,
                    "task_id": command.command_id, "accepted_at_s": command.accepted_s,
                    "servers_down": list(command.servers_down),
                    "refused_publishes": len(command.refused)}
            dropped_as = [dropped[i] for i in command.message_ids if i in dropped]
            if command.resends:
                item["resends"] = list(command.resends)
            if dropped_as:
                item["in_redis_when_emptied"] = dropped_as[0]
            elif in_blackout:
                item["in_redis_when_emptied"] = "published while Redis was being emptied"
            getattr(verdicts, outcome).append(item)
    return verdicts
