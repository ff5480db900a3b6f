"""Chaos run: trip sagas at load on a real fleet while its processes and servers are abused.

    python scripts/chaos.py [--sagas N] [--workers W] [--duration S] [--seed K]
                            [--fault-rate P] [--settle-timeout T] [--json]

It starts W ``sagafleet worker`` processes and one ``sagafleet sweeper`` on a fresh database,
starts N trip sagas over the first part of the run, and while they run it (reproducibly for a
seed) SIGKILLs random workers and starts replacements, SIGSTOPs one worker past its lease and
then resumes it, restarts Redis empty, and restarts PostgreSQL. This process plays the
operator (it answers approval requests; the first one is left to expire and is asked again).

At the end it waits for quiescence and checks, from the log and the providers' ledgers:

* every saga is terminal, or in MANUAL_INTERVENTION with evidence;
* no duplicate net effect in any ledger, and every saga's business invariant
  (COMPLETED = one trip and one net charge; COMPENSATED = no holds and no net charge);
* every process it did not kill survived every server restart;
* ``sagafleet verify`` is clean, when the command exists.

It prints a table of the faults injected and the outcomes and exits 1 on any violation.
Server restarts need the embedded servers (the default); with ``SAGAFLEET_DATABASE_URL`` /
``SAGAFLEET_BROKER_URL`` set they are skipped and reported as such.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from saga_core.contracts import SagaStatus
from saga_core.errors import SagaError
from saga_core.events import ManualInterventionRequired
from sagafleet import embedded, sandbox
from sagafleet.demo import DEMO_DEFINITION, Operator, demo_definition, trip_input
from sagafleet.migrate import migrate_all
from sagafleet.processes import spawn_sagafleet, stop_processes
from sagafleet.sandbox import TripSandbox, ledger_for_saga, ledger_totals
from workers.fleet import Fleet, FleetConfig

LEASE_S = 3.0
TRANSIENT = (SagaError, psycopg.Error, OSError)


@dataclass
class ChaosAction:
    """One fault the run injected: when, what, on which target, and what came of it."""

    at_s: float
    fault: str
    target: str
    result: str = "ok"


@dataclass
class Fleetprocs:
    """The fleet's processes: workers (replaceable) and one sweeper."""

    env: dict[str, str]
    log_dir: Path
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    sweeper: subprocess.Popen[bytes] | None = None
    killed: set[int] = field(default_factory=set)
    spawned: int = 0

    def spawn(self, role: str) -> subprocess.Popen[bytes]:
        """Start one ``sagafleet worker`` or ``sagafleet sweeper``."""
        self.spawned += 1
        proc = spawn_sagafleet([role], self.env, self.log_dir / f"{role}-{self.spawned}.log")
        if role == "worker":
            self.workers.append(proc)
        else:
            self.sweeper = proc
        return proc

    def live_workers(self) -> list[subprocess.Popen[bytes]]:
        """Workers still running."""
        return [p for p in self.workers if p.poll() is None]

    def casualties(self) -> list[str]:
        """Processes that died without this script killing them."""
        dead = [p for p in [*self.workers, self.sweeper]
                if p is not None and p.poll() is not None and p.pid not in self.killed]
        return [f"pid {p.pid} ({' '.join(map(str, p.args[-1:]))}) exited with {p.returncode}"
                for p in dead]

    def stop(self) -> None:
        """Warm shutdown, then SIGKILL what is left; resume anything stopped first."""
        stop_processes([p for p in [*self.workers, self.sweeper] if p is not None], grace_s=15)


class ChaosRun:
    """One run: the fleet, the sagas, the schedule of faults, and the final checks."""

    def __init__(self, args: argparse.Namespace, home: Path, log_dir: Path) -> None:
        self.args = args
        self.home = home
        self.log_dir = log_dir
        self.rng = random.Random(args.seed)
        self.actions: list[ChaosAction] = []
        self.embedded = not (os.environ.get("SAGAFLEET_DATABASE_URL")
                             or os.environ.get("SAGAFLEET_BROKER_URL"))
        self.started = time.monotonic()

    # -- setup ---------------------------------------------------------------------------

    def servers(self) -> tuple[str, str]:
        """The PostgreSQL server URL and the broker URL (embedded unless configured)."""
        if not self.embedded:
            return os.environ["SAGAFLEET_DATABASE_URL"], os.environ["SAGAFLEET_BROKER_URL"]
        return embedded.start_postgres(self.home).url, embedded.start_redis(self.home).url

    def fresh_database(self, server_url: str) -> str:
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

    def elapsed(self) -> float:
        """Seconds since the run started."""
        return round(time.monotonic() - self.started, 1)

    # -- faults --------------------------------------------------------------------------

    def schedule(self) -> list[tuple[float, str]]:
        """When each fault strikes, as fractions of the duration (shuffled per seed)."""
        faults = ["kill_worker", "kill_worker", "sigstop_worker", "restart_redis",
                  "restart_postgres", "kill_worker"]
        self.rng.shuffle(faults)
        duration = self.args.duration
        return [(duration * (0.15 + 0.7 * i / max(len(faults) - 1, 1)), fault)
                for i, fault in enumerate(faults)]

    def inject(self, fault: str, procs: Fleetprocs) -> None:
        """Strike one fault and record it."""
        action = ChaosAction(self.elapsed(), fault, "")
        self.actions.append(action)
        try:
            if fault == "kill_worker":
                victim = self.rng.choice(procs.live_workers())
                action.target = f"worker pid {victim.pid}"
                procs.killed.add(victim.pid)
                victim.kill()
                victim.wait()
                replacement = procs.spawn("worker")
                action.result = f"SIGKILL; replacement pid {replacement.pid}"
            elif fault == "sigstop_worker":
                victim = self.rng.choice(procs.live_workers())
                action.target = f"worker pid {victim.pid}"
                victim.send_signal(signal.SIGSTOP)
                time.sleep(LEASE_S + 2.0)  # past its lease: its claims are now in doubt
                victim.send_signal(signal.SIGCONT)
                action.result = f"SIGSTOP for {LEASE_S + 2.0:.0f}s (lease {LEASE_S:.0f}s), SIGCONT"
            elif fault == "restart_redis":
                action.target = "redis (embedded)"
                if not self.embedded:
                    action.result = "skipped: external broker"
                    return
                embedded.stop_redis(self.home)
                embedded.start_redis(self.home)  # no persistence: every message is gone
                action.result = "stopped, started empty"
            elif fault == "restart_postgres":
                action.target = "postgresql (embedded)"
                if not self.embedded:
                    action.result = "skipped: external database"
                    return
                done = restart_postgres(self.home)
                action.result = "fast shutdown, restarted" if done.returncode == 0 else \
                    f"restart failed: {done.stderr.strip()[:200]}"
        except (IndexError, SagaError, OSError) as exc:
            action.result = f"failed: {exc}"

    # -- the run -------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        """Run the fleet under chaos, wait for quiescence, check; return the report."""
        server_url, broker_url = self.servers()
        database = self.fresh_database(server_url)
        env = dict(os.environ)
        env.update({
            "SAGAFLEET_DATABASE_URL": database,
            "SAGAFLEET_BROKER_URL": broker_url,
            "SAGAFLEET_LEASE_SECONDS": str(LEASE_S),
            "SAGAFLEET_QUEUE_WAIT_SECONDS": "1",
            "SAGAFLEET_SWEEP_INTERVAL_SECONDS": "0.5",
            "SAGAFLEET_TOOLS": sandbox.TOOL_SET,
        })
        trip = sandbox.open_trip_sandbox(database)
        fleet = Fleet(FleetConfig(database_url=database, broker_url=broker_url,
                                  lease_s=LEASE_S, queue_wait_s=1.0, worker_id="chaos-operator"),
                      trip.tools)
        client = fleet.client(actor="chaos-agent")
        client.register_definition(demo_definition())
        faults = trip.faults
        if self.args.fault_rate > 0:
            faults.configure_mix(self.args.fault_rate, self.args.seed)
        procs = Fleetprocs(env, self.log_dir)
        for _ in range(self.args.workers):
            procs.spawn("worker")
        procs.spawn("sweeper")
        operator = Operator()
        saga_ids: list[str] = []
        try:
            plan = self.schedule()
            start_window = self.args.duration * 0.6
            while self.elapsed() < self.args.duration:
                due = int(self.args.sagas * min(1.0, self.elapsed() / max(start_window, 0.1)))
                while len(saga_ids) < max(due, 1) and len(saga_ids) < self.args.sagas:
                    started = _retrying(lambda: client.start(
                        DEMO_DEFINITION, trip_input(len(saga_ids), self.args.seed),
                        key=f"chaos-{self.args.seed}-{len(saga_ids)}"))
                    if started is None:
                        break
                    saga_ids.append(started.saga_id)
                while plan and plan[0][0] <= self.elapsed():
                    self.inject(plan.pop(0)[1], procs)
                self.review(fleet, operator, saga_ids)
                time.sleep(0.2)
            for _, fault in plan:  # a short run still gets every fault
                self.inject(fault, procs)
            while len(saga_ids) < self.args.sagas:
                started = _retrying(lambda: client.start(
                    DEMO_DEFINITION, trip_input(len(saga_ids), self.args.seed),
                    key=f"chaos-{self.args.seed}-{len(saga_ids)}"))
                if started is not None:
                    saga_ids.append(started.saga_id)
            quiet = self.quiesce(fleet, operator, saga_ids)
            casualties = procs.casualties()
        finally:
            procs.stop()
        report = self.check(fleet, trip, saga_ids, env, casualties, quiet)
        fleet.close()
        return report

    def review(self, fleet: Fleet, operator: Operator, saga_ids: list[str]) -> int:
        """Answer approvals; return how many sagas are not yet settled."""
        open_ = 0
        for saga_id in saga_ids:
            loaded = _retrying(lambda sid=saga_id: fleet.repo.load(sid))
            if loaded is None:
                return len(saga_ids)
            status = loaded.state.status
            if not (status.is_terminal or status is SagaStatus.MANUAL_INTERVENTION):
                open_ += 1
                try:
                    operator.review(fleet, loaded)
                except TRANSIENT:
                    pass
        return open_

    def quiesce(self, fleet: Fleet, operator: Operator, saga_ids: list[str]) -> bool:
        """Wait until every saga is settled (or the settle timeout passes)."""
        deadline = time.monotonic() + self.args.settle_timeout
        while time.monotonic() < deadline:
            if self.review(fleet, operator, saga_ids) == 0:
                return True
            time.sleep(0.3)
        return False

    # -- checks --------------------------------------------------------------------------

    @staticmethod
    def check_saga(fleet: Fleet, trip: TripSandbox, saga_id: str) -> tuple[SagaStatus, str | None]:
        """The saga's state, and what is wrong with it (from its log and the ledgers)."""
        loaded = fleet.repo.load(saga_id)
        status = loaded.state.status
        ledger = ledger_for_saga(trip.db, saga_id)
        if status is SagaStatus.MANUAL_INTERVENTION:
            manual = [e for e in loaded.events if isinstance(e, ManualInterventionRequired)]
            if not manual or not manual[-1].evidence.reason:
                return status, "MANUAL_INTERVENTION without evidence"
            return status, None
        if not status.is_terminal:
            return status, f"left {status}"
        if status is SagaStatus.COMPLETED and not ledger.is_complete_trip:
            return status, "COMPLETED but no complete trip in the ledgers"
        if status is SagaStatus.COMPENSATED and not ledger.is_unwound:
            return status, "COMPENSATED but holds or a charge remain"
        if status is not SagaStatus.PARTIALLY_COMPENSATED and not ledger.holds_trip_invariant:
            return status, f"{status} breaks the trip invariant"
        return status, None

    def check(self, fleet: Fleet, trip: TripSandbox, saga_ids: list[str], env: dict[str, str],
              casualties: list[str], quiet: bool) -> dict[str, Any]:
        """Every check of the run; violations make the exit code non-zero."""
        violations: list[str] = []
        if not quiet:
            violations.append(f"not quiescent after {self.args.settle_timeout:.0f}s")
        violations += [f"process died: {c}" for c in casualties]
        states: Counter[str] = Counter()
        for saga_id in saga_ids:
            found = _retrying(lambda sid=saga_id: self.check_saga(fleet, trip, sid))
            if found is None:
                violations.append(f"{saga_id}: could not be read back")
                continue
            status, problem = found
            states[str(status)] += 1
            if problem:
                violations.append(f"{saga_id}: {problem}")
        totals = _retrying(lambda: ledger_totals(trip.db))
        duplicates = [] if totals is None else list(totals.duplicate_effects)
        if totals is None:
            violations.append("the providers' ledgers could not be read back")
        violations += [f"duplicate effect: {d}" for d in duplicates]
        verify = run_verify(env)
        if verify["ran"] and not verify["clean"]:
            violations.append(f"sagafleet verify is not clean: {verify['output'][:500]}")
        return {
            "sagas": len(saga_ids),
            "workers": self.args.workers,
            "duration_s": self.args.duration,
            "seed": self.args.seed,
            "chaos": [a.__dict__ for a in self.actions],
            "provider_faults": dict(sorted(trip.faults.hit_counts().items())),
            "outcomes": dict(sorted(states.items())),
            "duplicate_effects": len(duplicates),
            "verify": {k: v for k, v in verify.items() if k != "output"},
            "violations": violations,
            "elapsed_s": self.elapsed(),
        }


def restart_postgres(home: Path) -> subprocess.CompletedProcess[str]:
    """Restart the embedded cluster in place (fast shutdown drops every connection).

    ``pg_ctl restart`` reuses the options the cluster was started with (postmaster.opts),
    so the socket and URL stay the same; pgserver itself caches a started server per
    process and would not start it again.
    """
    import pgserver

    data_dir = home.resolve() / "pg"
    pg_ctl = Path(pgserver.__file__).parent / "pginstall" / "bin" / "pg_ctl"
    cmd = [str(pg_ctl), "-D", str(data_dir), "-m", "fast", "-w", "-l",
           str(data_dir / "restart.log"), "restart"]
    if os.geteuid() == 0:
        # pgserver runs the cluster as its own unprivileged user when started by root.
        cmd = ["su", "-s", "/bin/sh", "pgserver", "-c", " ".join(cmd)]
    return subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=120)  # noqa: S603


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
    """Run ``sagafleet verify --json`` when this sagafleet has it."""
    base = [sys.executable, "-m", "sagafleet"]
    helptext = subprocess.run([*base, "--help"], env=env, capture_output=True,  # noqa: S603
                              text=True, check=False).stdout
    if " verify " not in helptext:
        return {"ran": False, "clean": None, "output": ""}
    done = subprocess.run([*base, "verify", "--json"], env=env, capture_output=True,  # noqa: S603
                          text=True, check=False, timeout=300)
    return {"ran": True, "clean": done.returncode == 0, "exit_code": done.returncode,
            "output": done.stdout + done.stderr}


def render(report: dict[str, Any]) -> str:
    """The human-readable tables."""
    lines = [f"chaos run: {report['sagas']} sagas, {report['workers']} workers, "
             f"{report['duration_s']:.0f}s of chaos, seed {report['seed']}, "
             f"{report['elapsed_s']:.0f}s in all", "",
             f"{'at':>6}  {'fault':<18} {'target':<24} result",
             f"{'-' * 6}  {'-' * 18} {'-' * 24} {'-' * 30}"]
    for action in report["chaos"]:
        lines.append(f"{action['at_s']:>5.1f}s  {action['fault']:<18} {action['target']:<24} "
                     f"{action['result']}")
    lines += ["", "provider faults injected:"]
    for boundary, count in report["provider_faults"].items():
        lines.append(f"  {boundary:<26} {count:>5}")
    lines += ["", "outcomes:"]
    for state, count in report["outcomes"].items():
        lines.append(f"  {state:<26} {count:>5}")
    verify = report["verify"]
    lines += ["", f"duplicate effects: {report['duplicate_effects']}",
              "sagafleet verify: " + ("not available" if not verify["ran"]
                                      else "clean" if verify["clean"] else "NOT CLEAN")]
    if report["violations"]:
        lines += ["", f"VIOLATIONS ({len(report['violations'])}):"]
        lines += [f"  - {v}" for v in report["violations"]]
    else:
        lines += ["", "no violations"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run, print, exit 0 (clean) or 1 (violations)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sagas", type=int, default=50)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--duration", type=float, default=60.0,
                        help="seconds of chaos (sagas start during the first 60%%)")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--fault-rate", type=float, default=0.1,
                        help="share of provider calls meeting an injected fault")
    parser.add_argument("--settle-timeout", type=float, default=240.0)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    if args.sagas < 1 or args.workers < 1 or args.duration <= 0:
        parser.error("--sagas and --workers must be >= 1 and --duration > 0")
    home = Path(tempfile.mkdtemp(prefix="sf-chaos-", dir="/tmp"))
    log_dir = home / "logs"
    log_dir.mkdir()
    run = ChaosRun(args, home, log_dir)
    try:
        report = run.run()
    finally:
        if run.embedded:
            embedded.stop_embedded(home)
    print(json.dumps(report, indent=2) if args.json else render(report))
    if report["violations"]:
        print(f"\nlogs kept in {log_dir}", file=sys.stderr)
        return 1
    shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
