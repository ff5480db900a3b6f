"""One chaos run: servers, fleet, operator, agent and faults; quiescence; the report.

This process plays the operator: it answers approval requests (the first is left to
expire and is asked again) and holds the sagas the agent is about to cancel. What it
reads is set-based (:mod:`chaos_run.observe`): one query per tick for the sagas waiting
on approval, one fold of just those, and one query over the log and one over the
ledgers at the end, so its own cost stays small next to the fleet's.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import redis
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from chaos_run import observe
from chaos_run.agent import AGENT_ACTOR, AGENT_TENANT, AgentPlan, AgentSender, CancelDesk
from chaos_run.broker import BrokerSnapshot, snapshot
from chaos_run.faults import LEASE_S, FleetProcesses, Injector, fault_schedule
from chaos_run.verdicts import acted_commands, judge_commands, judge_sagas
from saga_core.access.roles import ADMIN_ROLE, AGENT_ROLE, APPROVER_ROLE, Principal, PrincipalKind
from saga_core.errors import SagaError
from sagafleet import embedded, sandbox
from sagafleet.agent import CommandSigner
from sagafleet.demo import (
    APPROVER,
    DEMO_DEFINITION,
    Operator,
    demo_principal,
    register_demo_definition,
    trip_input,
)
from sagafleet.migrate import migrate_all
from sagafleet.sandbox import saga_ledgers
from workers.fleet import Fleet, FleetConfig

TRANSIENT = (SagaError, psycopg.Error, redis.RedisError, OSError)
DRAINED_GRACE_S = 5.0
"""How long no command may be left to wait for before held cancel targets are released."""
UNACKED_GRACE_S = 60.0
"""How long to wait for a command a worker holds unacknowledged (a retry's countdown)."""


class Costs:
    """Seconds this script itself spends, by activity (its overhead on the machine)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def timed(self, what: str, action: Callable[[], Any]) -> Any:
        """Run ``action``, adding its wall time to ``what``."""
        began = time.perf_counter()
        try:
            return action()
        finally:
            self.seconds[what] = self.seconds.get(what, 0.0) + time.perf_counter() - began


class ChaosRun:
    """One run: the fleet, the sagas, the agent, the schedule of faults, the final checks."""

    def __init__(self, args: argparse.Namespace, home: Path, log_dir: Path) -> None:
        self.args = args
        self.home = home
        self.log_dir = log_dir
        self.embedded = not (os.environ.get("SAGAFLEET_DATABASE_URL")
                             or os.environ.get("SAGAFLEET_BROKER_URL"))
        self.started = time.monotonic()
        self.costs = Costs()
        self.durations: dict[str, float] = {}
        self.desk = CancelDesk()
        self.operator: Operator | None = None  # once the fleet can authenticate its approver
        self.sentinel_master: str | None = None  # with a sentinel:// broker URL

    def elapsed(self) -> float:
        """Seconds since the run started."""
        return round(time.monotonic() - self.started, 2)

    def _phase(self, name: str, since: float) -> float:
        now = time.monotonic()
        self.durations[name] = round(now - since, 1)
        return now

    # -- setup ---------------------------------------------------------------------------

    def servers(self) -> tuple[str, str]:
        """The PostgreSQL server URL and the broker URL (embedded unless configured)."""
        if not self.embedded:
            return os.environ["SAGAFLEET_DATABASE_URL"], os.environ["SAGAFLEET_BROKER_URL"]
        return embedded.start_postgres(self.home).url, embedded.start_redis(self.home).url

    @staticmethod
    def fresh_database(server_url: str) -> str:
        """A new database for this run, so a run never mixes with another's sagas."""
        name = f"sf_chaos_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        params = conninfo_to_dict(server_url)
        params["dbname"] = name
        url = make_conninfo("", **params)
        migrate_all(url)
        sandbox.install(url)
        return url

    def agent_plan(self) -> AgentPlan:
        """How many commands the agent sends: a share of the sagas, some cancels and plans."""
        sagas = self.args.sagas
        return AgentPlan(starts=round(sagas * self.args.agent_share),
                         cancels=max(1, sagas // 20), plans=max(2, sagas // 100),
                         window_s=self.args.duration * 0.9, seed=self.args.seed)

    # -- the run -------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        """Run the fleet under chaos, wait for quiescence, check; return the report."""
        phase = time.monotonic()
        server_url, broker_url = self.servers()
        self.database = self.fresh_database(server_url)
        env = dict(os.environ)
        env.update({
            "SAGAFLEET_DATABASE_URL": self.database,
            "SAGAFLEET_BROKER_URL": broker_url,
            "SAGAFLEET_LEASE_SECONDS": str(LEASE_S),
            "SAGAFLEET_QUEUE_WAIT_SECONDS": "1",
            "SAGAFLEET_SWEEP_INTERVAL_SECONDS": "0.5",
            "SAGAFLEET_TOOLS": sandbox.TOOL_SET,
        })
        self.env, self.broker_url = env, broker_url
        trip = sandbox.open_trip_sandbox(self.database)
        fleet = Fleet(FleetConfig(database_url=self.database, broker_url=broker_url,
                                  lease_s=LEASE_S, queue_wait_s=1.0, worker_id="chaos-operator"),
                      trip.tools)
        # The agent starting sagas directly and the approver are principals of the fleet's
        # directory, acting through the principal their tokens prove (sagafleet.demo).
        client = fleet.client_for(demo_principal(fleet, "chaos-direct", PrincipalKind.AGENT,
                                                 frozenset({AGENT_ROLE, ADMIN_ROLE})))
        # The operator answers every tenant's requests, each with a person of that tenant:
        # the agent's sagas are acme's, and only an acme approver may answer them (with the
        # default tenant's approver alone, every acme request was refused as SagaNotFound,
        # expired three times and left the saga in MANUAL_INTERVENTION: 462 of 1000).
        self.operator = Operator(
            demo_principal(fleet, APPROVER, PrincipalKind.PERSON, frozenset({APPROVER_ROLE})),
            approvers={AGENT_TENANT: tenant_approver(fleet, AGENT_TENANT)})
        register_demo_definition(fleet)  # shared: the agents' tenant starts it too
        if self.args.fault_rate > 0:
            trip.faults.configure_mix(self.args.fault_rate, self.args.seed)
        procs = FleetProcesses(env, self.log_dir)
        for _ in range(self.args.workers):
            procs.spawn("worker")
        procs.spawn("sweeper")
        injector = Injector(procs, self.home, broker_url, embedded_servers=self.embedded,
                            seed=self.args.seed, clock=self.elapsed)
        injector.plan(fault_schedule(self.args.duration, self.args.kill_every, self.args.seed))
        plan = self.agent_plan()
        depositor = fleet.client(tenant=AGENT_TENANT, actor=AGENT_ACTOR)
        agent = AgentSender(broker_url, plan, self.desk, self.elapsed, injector.down,
                            deposit=lambda value: depositor.put_secret(
                                value, ttl=timedelta(hours=2)).as_input(),
                            signers=agent_signers(fleet, (AGENT_TENANT, client.tenant)),
                            acted=None if self.args.no_resend else self.seen_acting)
        injector.on_outage = agent.nudge.set
        direct_total = self.args.sagas - plan.starts
        direct: list[str] = []
        phase = self._phase("setup", phase)
        quiet = False
        try:
            self.started = time.monotonic()
            agent.start()
            start_window = self.args.duration * 0.6
            last_review = 0.0
            while self.elapsed() < self.args.duration:
                due = int(direct_total * min(1.0, self.elapsed() / max(start_window, 0.1)))
                while len(direct) < due:
                    if not self.start_direct(client, direct):
                        break
                injector.strike_due()
                procs.supervise()
                if time.monotonic() - last_review >= self.args.review_every:
                    last_review = time.monotonic()
                    self.review(fleet)
                time.sleep(0.1)
            injector.strike_due(everything=True)  # a short run still gets every fault
            while len(direct) < direct_total:
                self.start_direct(client, direct)
            agent.stop()
            phase = self._phase("chaos", phase)
            quiet = self.quiesce(fleet, procs, agent, injector)
            phase = self._phase("quiesce", phase)
            casualties = procs.casualties()
        finally:
            agent.stop()
            procs.stop()
        report = self.check(trip, agent, injector, procs, casualties, quiet, direct)
        report["script_cost_s"]["reference"] = self.reference_costs(
            fleet, report_ids(self.database))
        self._phase("checks", phase)
        self.durations["checks"] = round(self.durations["checks"] - self.durations["verify"], 1)
        fleet.close()
        report["durations_s"] = {**self.durations, "total": round(sum(self.durations.values()), 1)}
        return report

    def seen_acting(self, commands: list[Any]) -> set[str]:
        """What the agent's ``sagafleet find`` shows it: ids of ``commands`` in effect."""
        return acted_commands(commands, observe.saga_facts(self.database),
                              observe.definition_names(self.database))

    def start_direct(self, client: Any, direct: list[str]) -> bool:
        """Start the next saga through the client API (as an in-process caller would)."""
        index = len(direct)
        started = self.costs.timed("direct_starts", lambda: _retrying(lambda: client.start(
            DEMO_DEFINITION, trip_input(index, self.args.seed),
            key=f"chaos-{self.args.seed}-{index}")))
        if started is None:
            return False
        direct.append(started.saga_id)
        return True

    def review(self, fleet: Fleet) -> None:
        """One operator tick: the sagas waiting on approval, in one query, folded together;
        hand one to the agent when it wants a cancel target, answer the others."""
        operator = self.operator
        if operator is None:
            return
        try:
            waiting = self.costs.timed("observe", lambda: observe.awaiting_approval(self.database))
            waiting = [s for s in waiting if not self.desk.is_held(s)]
            if not waiting:
                return
            loaded = self.costs.timed("operator", lambda: fleet.repo.load_many(waiting))
        except TRANSIENT:
            return
        for saga_id in waiting:
            saga = loaded.get(saga_id)
            if saga is None or isinstance(saga, SagaError):
                continue
            if self.desk.offer(saga_id, saga.tenant):
                continue
            try:
                self.costs.timed("operator", partial(operator.review, fleet, saga))
            except TRANSIENT:
                return

    def quiesce(self, fleet: Fleet, procs: FleetProcesses, agent: AgentSender,
                injector: Injector) -> bool:
        """Wait until no accepted command can still take effect and every saga is settled
        (or the settle timeout passes).

        A command can still take effect while its message is queued, or unacknowledged in
        a live worker's hands (a retry waiting for its countdown); one a SIGKILLed worker
        held comes back only after the visibility timeout, so an unacknowledged command is
        waited for at most ``UNACKED_GRACE_S``. Sagas held for a cancel are released once
        nothing is left to wait for: their cancel was acted on, dead-lettered or lost.
        """
        deadline = time.monotonic() + self.args.settle_timeout
        unacked_since: dict[str, float] = {}
        quiet_since: float | None = None
        while time.monotonic() < deadline:
            procs.supervise()
            self.review(fleet)
            try:
                facts = self.costs.timed("observe", lambda: observe.saga_facts(self.database))
                broker = snapshot(self.broker_url, self.sentinel_master)
                unresolved = self.costs.timed("observe", partial(
                    self.unresolved_commands, agent, facts, broker, injector))
            except TRANSIENT:
                time.sleep(0.5)
                continue
            self.desk.release({s for s, f in facts.items() if f.cancel_requested})
            now = time.monotonic()
            for task_id in broker.unacked:
                unacked_since.setdefault(task_id, now)
            messages = {c.command_id: c.message_ids for c in agent.sent}
            waiting = [t for t in unresolved for m in messages.get(t, (t,))
                       if m in broker.queued or (
                           m in broker.unacked and now - unacked_since[m] < UNACKED_GRACE_S)]
            if waiting:
                quiet_since = None
            elif quiet_since is None:
                quiet_since = now
            if quiet_since is not None and now - quiet_since >= DRAINED_GRACE_S:
                self.desk.release()
                if all(f.settled for f in facts.values()):
                    return True
            time.sleep(0.5)
        return False

    def unresolved_commands(self, agent: AgentSender, facts: dict[str, observe.SagaFacts],
                            broker: BrokerSnapshot, injector: Injector) -> set[str]:
        """Task ids of accepted commands with neither an effect nor a dead letter yet."""
        return judge_commands(agent.sent, facts, observe.definition_names(self.database),
                              observe.command_dead_letters(self.database),
                              injector.dropped_commands, broker.command_ids).unresolved

    def reference_costs(self, fleet: Fleet, saga_ids: list[str]) -> dict[str, float]:
        """What one look at every saga costs set-based (one query) and saga by saga (a
        fold per saga, as a per-saga operator loop would pay on every tick)."""
        began = time.perf_counter()
        _retrying(lambda: observe.saga_facts(self.database))
        one_query = time.perf_counter() - began
        began = time.perf_counter()
        for saga_id in saga_ids:
            _retrying(partial(fleet.repo.load, saga_id))
        return {"all_sagas_one_query": round(one_query, 3),
                "all_sagas_one_fold_each": round(time.perf_counter() - began, 3)}

    # -- checks --------------------------------------------------------------------------

    def check(self, trip: Any, agent: AgentSender, injector: Injector,
              procs: FleetProcesses, casualties: list[str], quiet: bool,
              direct: list[str]) -> dict[str, Any]:
        """Every check of the run, set-based; violations make the exit code non-zero."""
        facts = _retrying(lambda: observe.saga_facts(self.database)) or {}
        ledger_rows = _retrying(lambda: saga_ledgers(trip.db))
        plan_names = _retrying(lambda: observe.definition_names(self.database)) or set()
        letters = _retrying(lambda: observe.command_dead_letters(self.database)) or []
        try:
            in_broker = snapshot(self.broker_url, self.sentinel_master)
        except TRANSIENT:
            in_broker = BrokerSnapshot(frozenset(), frozenset(), 0)
        ledgers = {row.saga_id: row for row in ledger_rows or []}
        sagas = judge_sagas(facts, ledgers)
        commands = judge_commands(agent.sent, facts, plan_names, letters,
                                  injector.dropped_commands, in_broker.command_ids,
                                  injector.redis_blackouts)
        for item in [*commands.lost, *commands.lost_with_broker_state]:
            accepted = item["accepted_at_s"]
            item["faults_near"] = [f"{r.at_s:.1f}s {r.fault} {r.target}".strip()
                                   for r in injector.records
                                   if accepted - 1.0 <= r.at_s <= accepted + 15.0]
        duplicates = [str(d) for row in ledger_rows or [] for d in row.duplicates]
        verify_began = time.monotonic()
        verify = run_verify(self.env)
        self.durations["verify"] = round(time.monotonic() - verify_began, 1)
        lost = sum(commands.outcomes.get("lost", Counter()).values())
        violations: list[str] = []
        if not quiet:
            violations.append(f"not quiescent after {self.args.settle_timeout:.0f}s")
        if ledger_rows is None:
            violations.append("the providers' ledgers could not be read back")
        violations += [f"process died: {c}" for c in casualties]
        violations += [f"unsettled: {s}" for s in sagas.unsettled]
        violations += sagas.problems
        violations += [f"duplicate effect: {d}" for d in duplicates]
        violations += [f"lost {c['kind']} command {c['target']} (task {c['task_id']})"
                       for c in commands.lost]
        if self.args.broker_loss_is_violation or not self.args.no_resend:
            # The agent resends what a restart dropped: a drop no resend repaired is a loss.
            violations += [f"lost with the broker's state: {c['kind']} {c['target']}"
                           for c in commands.lost_with_broker_state]
        if verify["ran"] and not verify["clean"]:
            violations.append(f"sagafleet verify: {verify['differences']} differences, "
                              f"exit {verify['exit_code']}")
        fault_counts = Counter(r.fault for r in injector.records)
        return {
            "seed": self.args.seed,
            "parameters": {
                "sagas": self.args.sagas, "workers": self.args.workers,
                "duration_s": self.args.duration, "kill_every_s": self.args.kill_every,
                "fault_rate": self.args.fault_rate, "agent_share": self.args.agent_share,
                "settle_timeout_s": self.args.settle_timeout, "lease_s": LEASE_S,
                "servers": "embedded" if self.embedded else "external",
            },
            "faults": {"counts": dict(sorted(fault_counts.items())),
                       "events": [r.__dict__ for r in injector.records],
                       "step_messages_dropped_by_redis": injector.dropped_steps},
            "provider_faults": _retrying(lambda: dict(sorted(trip.faults.hit_counts().items()))),
            "sagas": {
                "started": sagas.started,
                "started_directly": len(direct),
                "started_by_agent": sum(1 for f in facts.values()
                                        if f.key and f.key.startswith("agent-")),
                "settled": {s: n for s, n in sorted(sagas.by_status.items()) if s != "OPEN"},
                "unsettled": {"count": len(sagas.unsettled), "ids": sagas.unsettled},
                # Why each saga waits for a person: its last escalation's reason, grouped.
                "manual_intervention_reasons": sagas.manual_reasons,
            },
            "duplicate_effects": {"count": len(duplicates), "items": duplicates[:50]},
            "invariant_violations": sagas.problems,
            "commands": {
                "sent": dict(commands.sent),
                "accepted": dict(commands.accepted),
                "unpublished": commands.unpublished,
                "never_sent": len(agent.pending),
                "publish_retries": commands.publish_retries,
                "sent_while_down": dict(commands.sent_while_down),
                "outcomes": {o: dict(c) for o, c in sorted(commands.outcomes.items())},
                "acted": sum(commands.outcomes.get("acted", Counter()).values()),
                "dead_lettered": {
                    "count": sum(commands.outcomes.get("dead_lettered", Counter()).values()),
                    "reasons": dict(commands.dead_letter_reasons)},
                "lost": {"count": lost, "items": commands.lost},
                "lost_with_broker_state": {"count": len(commands.lost_with_broker_state),
                                           "items": commands.lost_with_broker_state},
                "resent_after_broker_restart": {
                    "protocol": "off (--no-resend)" if self.args.no_resend else "on",
                    "restarts_seen_by_agent": agent.restarts_seen,
                    "commands": dict(commands.resent),
                    "messages": sum(len(c.resends) for c in agent.sent),
                    "acted_after_resend": sum(commands.outcomes.get(
                        "acted_after_resend", Counter()).values())},
                "pending_in_broker": sum(
                    commands.outcomes.get("pending_in_broker", Counter()).values()),
                "cancels_without_target": agent.unserved_cancels + self.desk.unserved,
            },
            "verify": {k: v for k, v in verify.items() if k != "output"},
            "processes": {"spawned": procs.spawned, "killed": len(procs.killed),
                          "refused_to_start_while_a_server_was_down":
                              sorted(procs.refused_start.values()),
                          "died_unexpectedly": casualties},
            "operator": {"answered": dict(self.operator.answered) if self.operator else {},
                         "refused": dict(sorted(self.operator.refused.items()))
                         if self.operator else {},
                         "held_for_cancel": commands.sent.get("cancel", 0)},
            "script_cost_s": {**{k: round(v, 1) for k, v in sorted(self.costs.seconds.items())},
                              "cpu": round(_cpu_seconds(), 1)},
            "violations": violations,
        }


def _cpu_seconds() -> float:
    """CPU seconds this process (operator, agent thread, checks) has used so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def report_ids(database_url: str) -> list[str]:
    """Every saga id in the log."""
    return sorted(_retrying(lambda: observe.saga_facts(database_url)) or {})


def _retrying(action: Callable[[], Any], within_s: float = 60.0) -> Any:
    """Run ``action``, riding out a server restart; None if it never succeeded in time."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            return action()
        except TRANSIENT:
            if time.monotonic() > deadline:
                return None
            time.sleep(0.2)


def run_verify(env: dict[str, str]) -> dict[str, Any]:
    """Run ``sagafleet verify --json`` and count its differences."""
    base = [sys.executable, "-m", "sagafleet"]
    done = subprocess.run([*base, "verify", "--json"], env=env, capture_output=True,  # noqa: S603
                          text=True, check=False, timeout=600)
    try:
        found = json.loads(done.stdout)
    except ValueError:
        found = None
    if not isinstance(found, dict):
        found = {}
    anchors = found.get("anchors") or {}
    lost = [anchors["lost_in_promotion"]] if anchors.get("lost_in_promotion") else []
    return {"ran": True, "clean": done.returncode == 0, "exit_code": done.returncode,
            # checkpoints a standby promotion lost with the unreplicated tail (async only)
            "checkpoints_lost_in_promotion": len(lost + anchors.get("promotion_losses", [])),
            "differences": len(found.get("differences", [])) if found else None,
            "broken_chains": found.get("broken_chains"),
            "lagging": len(found.get("lagging", [])) if found else None,
            "sagas_checked": found.get("sagas_checked"),
            "output": done.stdout[-2000:] + done.stderr[-2000:]}


def tenant_approver(fleet: Fleet, tenant: str) -> Principal:
    """A person with the approver role in ``tenant``, as its token proves them."""
    issued = fleet.principals.add(tenant, APPROVER, PrincipalKind.PERSON, [APPROVER_ROLE])
    return fleet.authenticate(issued.token)


def agent_signers(fleet: Fleet, tenants: tuple[str, ...]) -> dict[str, CommandSigner]:
    """The chaos agent as a principal of each tenant (agent role), with a signing key made
    before the run: its commands are signed, as every agent's must be."""
    signers = {}
    for tenant in dict.fromkeys(tenants):
        fleet.principals.add(tenant, AGENT_ACTOR, PrincipalKind.AGENT, [AGENT_ROLE])
        issued = fleet.principals.add_signing_key(tenant, AGENT_ACTOR)
        assert issued.private_key_pem is not None  # generated here, returned once
        signers[tenant] = CommandSigner(issued.kid, issued.private_key_pem)
    return signers
