"""One failover run: replicated servers, the fleet on them, sagas and agent commands, a
PostgreSQL failover, then a Redis Sentinel failover; quiescence; the report.

It reuses the chaos run's operator, agent, quiescence and verdicts (:mod:`chaos_run`): what
differs is the servers (:mod:`failover_run.servers`), the faults (two failovers, nothing
else), the witness of acknowledged events (:mod:`failover_run.witness`) and the checks of
what a failover may lose.

Callers follow the protocol the README gives for an asynchronous standby: after a database
failover, every caller re-checks what it was told had committed shortly before and sends
again what is missing (by idempotency key: the same saga id, the same operation keys, so a
provider replays what it already did). Here the direct client re-starts every acknowledged
start missing from the new primary, and the agent re-checks every accepted command (as it
does when it sees the broker's master change). With synchronous replication nothing is
missing, so nothing is sent again.
"""

from __future__ import annotations

import argparse
import os
import secrets
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
from chaos_run import observe
from chaos_run.agent import AGENT_ACTOR, AGENT_TENANT, AgentPlan, AgentSender
from chaos_run.broker import BrokerSnapshot, snapshot
from chaos_run.faults import FleetProcesses
from chaos_run.run import (
    TRANSIENT,
    ChaosRun,
    _retrying,
    agent_signers,
    run_verify,
    tenant_approver,
)
from chaos_run.verdicts import judge_commands, judge_sagas
from psycopg import sql

from failover_run.servers import SENTINEL_MASTER, Servers
from failover_run.witness import Witness
from saga_core.access.roles import ADMIN_ROLE, AGENT_ROLE, APPROVER_ROLE, PrincipalKind
from sagafleet import sandbox
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

LEASE_S = 3.0
VISIBILITY_TIMEOUT_S = 30.0
"""Short, so a message whose acknowledgement the Redis failover lost comes back in the run."""
DATABASE = "sf_failover"
START_WINDOW = 0.7
"""Sagas start over this share of the run."""
POSTGRES_FAILOVER_AT = 0.3
REDIS_FAILOVER_AT = 0.6


class NoDrops:
    """The chaos verdicts' view of a broker restart, for a run that empties no Redis."""

    dropped_commands: dict[str, str] = {}


class FailoverRun(ChaosRun):
    """The fleet on replicated servers through a PostgreSQL and a Redis failover."""

    def __init__(self, args: argparse.Namespace, home: Path, log_dir: Path) -> None:
        super().__init__(args, home, log_dir)
        self.embedded = False
        self.sentinel_master = SENTINEL_MASTER
        self.failovers: list[dict[str, Any]] = []
        self.direct_keys: dict[str, str] = {}  # idempotency key -> saga id acknowledged
        self.restarted_directly: list[str] = []
        self.witness: Witness | None = None
        self.wal_at_start = "0/0"

    # -- setup ---------------------------------------------------------------------------

    def prepare(self, servers: Servers) -> dict[str, str]:
        """A migrated database on the pair, the sandbox on the ledgers' server; the fleet's
        environment."""
        with psycopg.connect(servers.postgres.primary.url(), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))
        self.database = servers.postgres.url(DATABASE)
        migrate_all(self.database)
        self.wal_at_start = _wal_position(self.database)
        self.ledgers = servers.ledgers.url()
        sandbox.install(self.ledgers)
        self.broker_url = servers.redis.url
        env = dict(os.environ)
        env.update({
            "SAGAFLEET_DATABASE_URL": self.database,
            "SAGAFLEET_BROKER_URL": self.broker_url,
            "SAGAFLEET_BROKER_SENTINEL_MASTER": SENTINEL_MASTER,
            "SAGAFLEET_SANDBOX_DATABASE_URL": self.ledgers,
            "SAGAFLEET_TOOLS": sandbox.TOOL_SET,
            "SAGAFLEET_LEASE_SECONDS": str(LEASE_S),
            "SAGAFLEET_QUEUE_WAIT_SECONDS": "1",
            "SAGAFLEET_SWEEP_INTERVAL_SECONDS": "0.5",
            "SAGAFLEET_VISIBILITY_TIMEOUT_SECONDS": str(VISIBILITY_TIMEOUT_S),
            "SAGAFLEET_ANCHOR_KEY": secrets.token_hex(16),
            "SAGAFLEET_ANCHOR_INTERVAL_SECONDS": "2",
        })
        self.env = env
        return env

    def agent_plan(self) -> AgentPlan:
        """Agent starts (a share of the sagas) and a few plans and cancels, over the start
        window."""
        sagas = self.args.sagas
        return AgentPlan(starts=round(sagas * self.args.agent_share),
                         cancels=max(1, sagas // 25), plans=max(2, sagas // 100),
                         window_s=self.args.duration * START_WINDOW, seed=self.args.seed)

    # -- the run -------------------------------------------------------------------------

    def run_on(self, servers: Servers) -> dict[str, Any]:
        """Run the fleet through both failovers, wait for quiescence, check; the report."""
        phase = time.monotonic()
        env = self.prepare(servers)
        trip = sandbox.open_trip_sandbox(self.ledgers)
        fleet = Fleet(FleetConfig(database_url=self.database, broker_url=self.broker_url,
                                  broker_sentinel_master=SENTINEL_MASTER, lease_s=LEASE_S,
                                  queue_wait_s=1.0, worker_id="failover-operator"),
                      trip.tools)
        client = fleet.client_for(demo_principal(fleet, "failover-direct", PrincipalKind.AGENT,
                                                 frozenset({AGENT_ROLE, ADMIN_ROLE})))
        self.operator = Operator(
            demo_principal(fleet, APPROVER, PrincipalKind.PERSON, frozenset({APPROVER_ROLE})),
            approvers={AGENT_TENANT: tenant_approver(fleet, AGENT_TENANT)})
        register_demo_definition(fleet)
        if self.args.fault_rate > 0:
            trip.faults.configure_mix(self.args.fault_rate, self.args.seed)
        procs = FleetProcesses(env, self.log_dir)
        for _ in range(self.args.workers):
            procs.spawn("worker")
        procs.spawn("sweeper")
        procs.spawn("projector")
        plan = self.agent_plan()
        depositor = fleet.client(tenant=AGENT_TENANT, actor=AGENT_ACTOR)
        agent = AgentSender(self.broker_url, plan, self.desk, self.elapsed, lambda: (),
                            deposit=lambda value: depositor.put_secret(
                                value, ttl=timedelta(hours=2)).as_input(),
                            signers=agent_signers(fleet, (AGENT_TENANT, client.tenant)),
                            acted=self.seen_acting, sentinel_master=SENTINEL_MASTER)
        self.witness = Witness(servers.postgres.primary.url(DATABASE))
        direct_total = self.args.sagas - plan.starts
        direct: list[str] = []
        due = {"postgres": self.args.duration * POSTGRES_FAILOVER_AT,
               "redis": self.args.duration * REDIS_FAILOVER_AT}
        phase = self._phase("setup", phase)
        quiet, casualties = False, []
        try:
            self.started = time.monotonic()
            self.witness.start()
            agent.start()
            last_review = 0.0
            while self.elapsed() < self.args.duration or due:
                goal = int(direct_total * min(1.0, self.elapsed()
                                              / max(self.args.duration * START_WINDOW, 0.1)))
                while len(direct) < goal and self.start_direct(client, direct):
                    pass
                if "postgres" in due and self.elapsed() >= due["postgres"]:
                    del due["postgres"]
                    self.fail_over_postgres(servers)
                    agent.recheck()
                    self.start_missing_again(client)
                if "redis" in due and self.elapsed() >= due["redis"]:
                    del due["redis"]
                    self.fail_over_redis(servers)
                procs.supervise()
                if time.monotonic() - last_review >= self.args.review_every:
                    last_review = time.monotonic()
                    self.review(fleet)
                time.sleep(0.1)
            while len(direct) < direct_total and self.start_direct(client, direct):
                pass
            agent.stop()
            phase = self._phase("run", phase)
            quiet = self.quiesce(fleet, procs, agent, NoDrops())  # type: ignore[arg-type]
            phase = self._phase("quiesce", phase)
            casualties = procs.casualties()
        finally:
            agent.stop()
            procs.stop()
            if self.witness.is_alive():
                self.witness.last_look()
        report = self.check_failover(trip, agent, procs, casualties, quiet, direct)
        self._phase("checks", phase)
        self.durations["checks"] = round(self.durations["checks"] - self.durations["verify"], 1)
        fleet.close()
        report["durations_s"] = {**self.durations, "total": round(sum(self.durations.values()), 1)}
        return report

    def start_direct(self, client: Any, direct: list[str]) -> bool:
        """Start the next saga through the client API; remember its key as acknowledged."""
        index = len(direct)
        key = f"failover-{self.args.seed}-{index}"
        started = self.costs.timed("direct_starts", lambda: _retrying(lambda: client.start(
            DEMO_DEFINITION, trip_input(index, self.args.seed), key=key)))
        if started is None:
            return False
        direct.append(started.saga_id)
        self.direct_keys[key] = started.saga_id
        return True

    def start_missing_again(self, client: Any) -> None:
        """The client's side of an asynchronous failover: every start it was told had
        committed but the new primary lacks is started again, with the same key."""
        facts = _retrying(lambda: observe.saga_facts(self.database), within_s=120) or {}
        present = {f.key for f in facts.values() if f.key is not None}
        for key, _saga_id in sorted(self.direct_keys.items()):
            if key in present:
                continue
            index = int(key.rsplit("-", 1)[1])
            if _retrying(lambda i=index, k=key: client.start(
                    DEMO_DEFINITION, trip_input(i, self.args.seed), key=k)) is not None:
                self.restarted_directly.append(key)

    # -- the failovers -----------------------------------------------------------------------

    def fail_over_postgres(self, servers: Servers) -> None:
        """The witness looks a last time; the primary is frozen and SIGKILLed; after the
        detection delay the standby is promoted."""
        assert self.witness is not None
        record: dict[str, Any] = {"server": "postgresql", "at_s": self.elapsed()}
        # The standby falls behind first, as over a congested link: what the primary
        # acknowledges meanwhile reaches the standby only if the primary waits for it.
        senders = servers.postgres.pause_replication()
        record["wal_senders_paused"] = len(senders)
        time.sleep(self.args.lag_s)
        self.witness.last_look()
        record["killed_at"] = datetime.now(UTC)
        record["killed_processes"] = servers.postgres.kill_primary()
        time.sleep(self.args.detect_s)
        record["promote_s"] = round(servers.postgres.promote_standby(), 2)
        record["promoted_at"] = datetime.now(UTC)
        record["new_primary_port"] = servers.postgres.primary.port
        self.failovers.append(record)

    def fail_over_redis(self, servers: Servers) -> None:
        """The master is SIGKILLed; the Sentinels promote its replica."""
        record: dict[str, Any] = {"server": "redis", "at_s": self.elapsed()}
        record["promoted_after_s"] = round(servers.redis.kill_master(), 2)
        record["new_master_port"] = servers.redis.master_port()
        self.failovers.append(record)

    # -- checks --------------------------------------------------------------------------------

    def lost_events(self) -> set[UUID]:
        """Events the witness saw acknowledged on the old primary that the new one lacks."""
        assert self.witness is not None
        seen = list(self.witness.seen)
        if not seen:
            return set()

        def present() -> set[UUID]:
            with psycopg.connect(self.database, autocommit=True) as conn:
                rows = conn.execute("SELECT event_id FROM eventstore.events"
                                    " WHERE event_id = ANY(%s)", (seen,)).fetchall()
            return {row[0] for row in rows}

        found = _retrying(present)
        return set(seen) - (found if found is not None else set(seen))

    def writes_again_after_s(self) -> float | None:
        """Seconds from the primary's death to the first event committed on the new one."""
        record = next((f for f in self.failovers if f["server"] == "postgresql"), None)
        if record is None:
            return None

        def first() -> datetime | None:
            with psycopg.connect(self.database, autocommit=True) as conn:
                row = conn.execute("SELECT min(recorded_at) FROM eventstore.events"
                                   " WHERE recorded_at > %s", (record["killed_at"],)).fetchone()
            return row[0] if row else None

        found = _retrying(first)
        return None if found is None else round((found - record["killed_at"]).total_seconds(), 2)

    def log_volume(self, sagas: int) -> dict[str, Any]:
        """What the run wrote to the fleet's database: events, and WAL (every table of the
        fleet: log, read models, checkpoints, anchors), in all and per saga."""
        with psycopg.connect(self.database, autocommit=True) as conn:
            row = conn.execute(
                "SELECT (SELECT count(*) FROM eventstore.events),"
                " pg_wal_lsn_diff(pg_current_wal_lsn(), %s::pg_lsn)::bigint",
                (self.wal_at_start,)).fetchone()
        events, wal = (int(row[0]), int(row[1])) if row else (0, 0)
        per = max(sagas, 1)
        return {"events": events, "events_per_saga": round(events / per, 1),
                "wal_bytes": wal, "wal_bytes_per_saga": round(wal / per)}

    def check_failover(self, trip: Any, agent: AgentSender, procs: FleetProcesses,
                       casualties: list[str], quiet: bool, direct: list[str]) -> dict[str, Any]:
        """Every check of the run; violations make the exit code non-zero."""
        facts = _retrying(lambda: observe.saga_facts(self.database)) or {}
        ledger_rows = _retrying(lambda: saga_ledgers(trip.db))
        plan_names = _retrying(lambda: observe.definition_names(self.database)) or set()
        letters = _retrying(lambda: observe.command_dead_letters(self.database)) or []
        try:
            in_broker = snapshot(self.broker_url, SENTINEL_MASTER)
        except TRANSIENT:
            in_broker = BrokerSnapshot(frozenset(), frozenset(), 0)
        ledgers = {row.saga_id: row for row in ledger_rows or []}
        sagas = judge_sagas(facts, ledgers)
        commands = judge_commands(agent.sent, facts, plan_names, letters, {},
                                  in_broker.command_ids)
        duplicates = [str(d) for row in ledger_rows or [] for d in row.duplicates]
        lost = self.lost_events()
        assert self.witness is not None
        verify_began = time.monotonic()
        verify = run_verify(self.env)
        self.durations["verify"] = round(time.monotonic() - verify_began, 1)
        lost_commands = sum(commands.outcomes.get("lost", Counter()).values())
        synchronous = self.args.replication == "sync"
        violations: list[str] = []
        if not quiet:
            violations.append(f"not quiescent after {self.args.settle_timeout:.0f}s")
        if ledger_rows is None:
            violations.append("the providers' ledgers could not be read back")
        if len(self.failovers) < 2:
            violations.append(f"only {len(self.failovers)} of 2 failovers happened")
        violations += [f"process died: {c}" for c in casualties]
        violations += [f"unsettled: {s}" for s in sagas.unsettled]
        violations += sagas.problems
        violations += [f"duplicate effect: {d}" for d in duplicates]
        violations += [f"lost {c['kind']} command {c['target']} (task {c['task_id']})"
                       for c in commands.lost]
        if synchronous and lost:
            violations.append(f"{len(lost)} acknowledged events missing after the failover "
                              "with synchronous replication")
        if synchronous and self.restarted_directly:
            violations.append(f"{len(self.restarted_directly)} acknowledged starts missing "
                              "after the failover with synchronous replication")
        if synchronous and verify.get("checkpoints_lost_in_promotion"):
            violations.append(f"{verify['checkpoints_lost_in_promotion']} checkpoints lost in"
                              " the promotion with synchronous replication")
        if verify["ran"] and not verify["clean"]:
            violations.append(f"sagafleet verify: {verify['differences']} differences, "
                              f"exit {verify['exit_code']}")
        return {
            "seed": self.args.seed,
            "replication": self.args.replication,
            "parameters": {
                "sagas": self.args.sagas, "workers": self.args.workers,
                "duration_s": self.args.duration, "fault_rate": self.args.fault_rate,
                "agent_share": self.args.agent_share, "detect_s": self.args.detect_s,
                "lag_s": self.args.lag_s,
                "settle_timeout_s": self.args.settle_timeout, "lease_s": LEASE_S,
                "visibility_timeout_s": VISIBILITY_TIMEOUT_S,
            },
            "failovers": [{k: (v.isoformat() if isinstance(v, datetime) else v)
                           for k, v in f.items()} for f in self.failovers],
            "database_writes_again_after_s": self.writes_again_after_s(),
            "sagas": {
                "started": sagas.started,
                "started_directly": len(direct),
                "started_by_agent": sum(1 for f in facts.values()
                                        if f.key and f.key.startswith("agent-")),
                "settled": {s: n for s, n in sorted(sagas.by_status.items()) if s != "OPEN"},
                "unsettled": {"count": len(sagas.unsettled), "ids": sagas.unsettled},
                "manual_intervention_reasons": sagas.manual_reasons,
            },
            "events": {
                "acknowledged_before_failover": len(self.witness.seen),
                "missing_after_failover": len(lost),
                "missing_by_type": self.witness.by_type(lost),
                "witness_polls": self.witness.polls,
            },
            "log": _retrying(lambda: self.log_volume(sagas.started)),
            "direct_starts": {"acknowledged": len(self.direct_keys),
                              "missing_after_failover_started_again":
                                  len(self.restarted_directly)},
            "duplicate_effects": {"count": len(duplicates), "items": duplicates[:50]},
            "invariant_violations": sagas.problems,
            "commands": {
                "sent": dict(commands.sent),
                "accepted": dict(commands.accepted),
                "unpublished": commands.unpublished,
                "outcomes": {o: dict(c) for o, c in sorted(commands.outcomes.items())},
                "lost": {"count": lost_commands, "items": commands.lost},
                "resent": {"after_failovers_seen_by_agent": agent.restarts_seen,
                           "commands": dict(commands.resent),
                           "messages": sum(len(c.resends) for c in agent.sent)},
                "pending_in_broker": sum(
                    commands.outcomes.get("pending_in_broker", Counter()).values()),
                "dead_lettered": dict(commands.dead_letter_reasons),
            },
            "verify": {k: v for k, v in verify.items() if k != "output" or not verify["clean"]},
            "processes": {"spawned": procs.spawned,
                          "refused_to_start_while_a_server_was_down":
                              sorted(procs.refused_start.values()),
                          "died_unexpectedly": casualties},
            "operator": {"answered": dict(self.operator.answered) if self.operator else {},
                         "refused": dict(sorted(self.operator.refused.items()))
                         if self.operator else {}},
            "violations": violations,
        }


def _wal_position(url: str) -> str:
    """The server's current WAL position (it keeps counting across a promotion)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    return str(row[0]) if row else "0/0"
