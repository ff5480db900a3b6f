"""The chaos run's judgement of agent commands and its fault schedule (pure: no servers)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))

from chaos_run.agent import AGENT_TENANT, Command  # noqa: E402
from chaos_run.faults import fault_schedule  # noqa: E402
from chaos_run.observe import DeadLetter, SagaFacts  # noqa: E402
from chaos_run.verdicts import (  # noqa: E402
    acted_commands,
    judge_commands,
    manual_reasons,
    reason_class,
)

from workers.tasks import CANCEL_SAGA, START_SAGA, SUBMIT_PLAN  # noqa: E402

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def _facts(saga_id: str, *, key: str | None = None, finished_at: datetime | None = None,
           cancel_requested: bool = False) -> SagaFacts:
    return SagaFacts(saga_id=saga_id, tenant=AGENT_TENANT, key=key,
                     finished=None if finished_at is None else "COMPLETED",
                     finished_at=finished_at, manual_at=None, resolved_at=None,
                     manual_reason=None, cancel_requested=cancel_requested)


def _command(task: str, target: str, *, accepted: bool = True, at_s: float = 1.0) -> Command:
    return Command(command_id=f"task-{target}", task=task, args={}, target=target, due_s=0.0,
                   accepted_s=at_s if accepted else None,
                   accepted_at=NOW if accepted else None)


def test_each_accepted_command_gets_exactly_one_outcome_and_only_fleet_losses_are_lost():
    # given what the log, the dead letters and Redis say at the end of a run
    facts = {
        "s-started": _facts("s-started", key="agent-1"),
        "s-cancelled": _facts("s-cancelled", cancel_requested=True),
        "s-done-early": _facts("s-done-early", finished_at=NOW - timedelta(seconds=5)),
        "s-done-late": _facts("s-done-late", finished_at=NOW + timedelta(seconds=5)),
    }
    letters = [DeadLetter(START_SAGA, None, {"key": "agent-2"}, "StoreUnavailable: db down"),
               DeadLetter(SUBMIT_PLAN, "task-plan_b", {}, "PlanRejected: unknown tool")]
    commands = [
        _command(START_SAGA, "agent-1"),        # its saga exists
        _command(START_SAGA, "agent-2"),        # refused with a reason
        _command(START_SAGA, "agent-3"),        # in Redis when Redis was emptied
        _command(START_SAGA, "agent-4"),        # still unacknowledged in Redis
        _command(START_SAGA, "agent-7", at_s=50.0),  # published while Redis was emptied
        _command(START_SAGA, "agent-5"),        # nowhere: the fleet lost it
        _command(START_SAGA, "agent-6", accepted=False),  # the agent gave up publishing
        _command(CANCEL_SAGA, "s-cancelled"),
        _command(CANCEL_SAGA, "s-done-early"),  # the saga had finished before the cancel
        _command(CANCEL_SAGA, "s-done-late"),   # finished after it, never cancelled: lost
        _command(SUBMIT_PLAN, "plan_a"),
        _command(SUBMIT_PLAN, "plan_b"),        # refused; its letter names the task id
    ]
    # when the run judges them
    verdicts = judge_commands(commands, facts, {"plan_a"}, letters,
                              {"task-agent-3": "queued"}, frozenset({"task-agent-4"}),
                              [(49.5, 51.0)])
    # then every accepted command lands in one bucket, and the losses are told apart
    outcomes = {name: dict(counts) for name, counts in verdicts.outcomes.items()}
    assert outcomes == {
        "acted": {"start": 1, "cancel": 1, "plan": 1},
        "dead_lettered": {"start": 1, "plan": 1},
        "lost_with_broker_state": {"start": 2},
        "pending_in_broker": {"start": 1},
        "lost": {"start": 1, "cancel": 1},
        "moot": {"cancel": 1},
    }
    assert verdicts.unpublished == 1 and verdicts.accepted["start"] == 6
    assert [c["target"] for c in verdicts.lost] == ["agent-5", "s-done-late"]
    assert [c["in_redis_when_emptied"] for c in verdicts.lost_with_broker_state] == [
        "queued", "published while Redis was being emptied"]
    assert dict(verdicts.dead_letter_reasons) == {"StoreUnavailable": 1, "PlanRejected": 1}


def _resent(command: Command, at_s: float) -> Command:
    command.resends.append(f"resend-{command.target}")
    command.resent_at_s.append(at_s)
    return command


def test_a_resend_repairs_what_a_restart_dropped_but_never_hides_a_loss_of_the_fleet():
    # given a Redis restart over [49.5, 51.0], after which the agent resent at 52 s every
    # accepted command it did not see acting
    facts = {f"s-{n}": _facts(f"s-{n}", key=f"agent-{n}") for n in range(1, 5)}
    commands = [
        _resent(_command(START_SAGA, "agent-1", at_s=40.0), 52.0),  # queued when emptied
        _resent(_command(START_SAGA, "agent-2", at_s=50.0), 52.0),  # accepted in the restart
        _resent(_command(START_SAGA, "agent-3", at_s=40.0), 52.0),  # not in Redis: lost before
        _resent(_command(START_SAGA, "agent-4", at_s=51.5), 52.0),  # in the new Redis already
        _resent(_command(START_SAGA, "agent-5", at_s=40.0), 52.0),  # dropped, resend dropped
        _command(START_SAGA, "agent-6", at_s=45.0),  # never resent: acted before
    ]
    facts["s-6"] = _facts("s-6", key="agent-6")
    # when the run judges them (the resend of agent-5 went with Redis too)
    dropped = {"task-agent-1": "queued", "task-agent-5": "queued",
               "resend-agent-5": "unacked, held by a worker"}
    verdicts = judge_commands(commands, facts, set(), [], dropped, frozenset(), [(49.5, 51.0)])
    # then a dropped command that acted once resent is told apart from one that acted on
    # its own; the one the fleet had lost before the restart stays lost; the one no resend
    # repaired is lost with the broker's state
    outcomes = {name: dict(counts) for name, counts in verdicts.outcomes.items()}
    assert outcomes == {"acted_after_resend": {"start": 2}, "acted": {"start": 2},
                        "lost": {"start": 1}, "lost_with_broker_state": {"start": 1}}
    assert [c["target"] for c in verdicts.lost] == ["agent-3"]
    assert verdicts.lost_with_broker_state[0]["resends"] == ["resend-agent-5"]
    assert verdicts.resent == {"start": 5}
    # and what the agent sees acting is what its find would show
    assert acted_commands(commands, facts, set()) == {
        f"task-agent-{n}" for n in (1, 2, 3, 4, 6)}


def test_the_fault_schedule_kills_every_few_seconds_and_restarts_each_server():
    # given a five-minute run with a kill every six seconds
    schedule = fault_schedule(300.0, 6.0, seed=7)
    faults = [fault for _, fault in schedule]
    # then kills come every few seconds over the run, and every rarer fault is there
    kills = [at for at, fault in schedule if fault == "kill_worker"]
    assert len(kills) >= 35 and max(b - a for a, b in zip(kills, kills[1:], strict=False)) < 12
    assert faults.count("restart_redis") == 2 and faults.count("restart_postgres") == 2
    assert faults.count("sigstop_worker") == 3
    assert all(0 < at < 300 for at, _ in schedule)
    # and the same seed gives the same schedule
    assert fault_schedule(300.0, 6.0, seed=7) == schedule


def _paused(saga_id: str, reason: str, step: str, tenant: str = AGENT_TENANT,
            resolved: bool = False) -> SagaFacts:
    return SagaFacts(saga_id=saga_id, tenant=tenant, key=None, finished=None, finished_at=None,
                     manual_at=10, resolved_at=20 if resolved else None, manual_reason=reason,
                     cancel_requested=False, manual_step=step)


def test_sagas_in_manual_intervention_are_grouped_by_reason_class_and_step_most_first():
    # given sagas paused for a person for two reasons (one with instance details), one
    # paused saga an operator resolved since, and one finished saga
    expired = "approval expired; no usable approval after 3 requests"
    facts = {
        "s1": _paused("s1", expired, "forward capture_payment"),
        "s2": _paused("s2", expired, "forward capture_payment", tenant="default"),
        "s3": _paused("s3", expired, "forward capture_payment"),
        "s4": _paused("s4", "target changed since the forward step (precondition): "
                            "PreconditionFailed: hold_id 'hh_1' is at version 2, expected 1",
                      "compensation hold_hotel"),
        "s5": _paused("s5", "target changed since the forward step (precondition): "
                            "PreconditionFailed: hold_id 'hh_9' is at version 3, expected 1",
                      "compensation hold_hotel"),
        "s6": _paused("s6", "approval denied", "forward send_itinerary", resolved=True),
        "s7": _facts("s7", finished_at=NOW),
    }
    # when the run groups them
    groups = manual_reasons(facts, examples=2)
    # then one row per reason class and step, most first, with tenants and example ids;
    # the resolved and the finished sagas are not in it
    assert [(g["reason"], g["step"], g["count"], g["tenants"], g["sagas"]) for g in groups] == [
        (expired, "forward capture_payment", 3, {"acme": 2, "default": 1}, ["s1", "s2"]),
        ("target changed since the forward step (precondition)", "compensation hold_hotel",
         2, {"acme": 2}, ["s4", "s5"]),
    ]
    assert groups[1]["example"].endswith("is at version 2, expected 1")
    assert reason_class("lookup found no receipt") == "lookup found no receipt"
