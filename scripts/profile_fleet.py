"""Where a saga's CPU goes on the real fleet, by phase: workers and client over a whole run.

Starts ``--workers`` ``sagafleet worker`` processes (memory tools, as ``bench_fleet.py
--providers memory``) on fresh embedded servers, warms them up, then starts ``--sagas`` trip
sagas from this process and runs them to COMPLETED while py-spy samples every worker and this
process (whole turns of the real processes: Celery's consume, the claim, the tool call, the
commits, the publish, the ack). Each role's CPU per saga is read from /proc over the same
window (``cpu_accounting``); the samples only split it into phases:

    python scripts/profile_fleet.py                  # 2 workers, 400 sagas
    python scripts/profile_fleet.py --json           # one JSON document
    python scripts/profile_fleet.py --stacks DIR     # also keep the raw collapsed stacks

A sample's phase is that of the innermost frame a rule of :data:`PHASES` names (a psycopg
call inside an append is the append's; a pydantic validation inside a fold is the fold's).
Needs py-spy (``pip install py-spy``) and permission to attach to the processes (root, or
``ptrace_scope`` 0). Its sampling costs the sampled processes a little time: compare two
commits by running this on each, alternately, and read shares as well as milliseconds.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_databases import drop_database  # noqa: E402
from bench_fleet import TRIP, FinishedCounter, fresh_database, wait_ready  # noqa: E402
from cpu_accounting import CpuMeter  # noqa: E402

from sagafleet import embedded  # noqa: E402
from sagafleet.example_sagas import trip_tool_catalogue  # noqa: E402
from sagafleet.example_sagas.registration import register_trip  # noqa: E402
from sagafleet.processes import spawn_sagafleet, stop_processes  # noqa: E402
from workers.fleet import Fleet, FleetConfig  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RATE = 500  # samples per second and process

#: (phase, path fragment, function names or None for any): the first rule matching a frame
#: names its phase (None: the frame takes its caller's). A sample's phase is that of its
#: innermost named frame, except below a frame of a :data:`WHOLE` phase, which owns every
#: frame under it (the Redis client under a publish, the email parser under a gate check).
PHASES: tuple[tuple[str | None, str, frozenset[str] | None], ...] = (
    ("hashing", "events/eventstore/hashing.py", None),
    ("hashing", "events/integrity/chain.py", None),
    ("hashing", "saga_core/keys.py", None),
    ("secrets", "application/secrets/", None),
    ("secrets", "saga_core/secret_scrub.py", None),
    ("serialisation", "events/eventstore/prepare.py", None),
    ("serialisation", "events/eventstore/registry.py", frozenset({"to_new_event"})),
    ("serialisation", "events/saga_log/streams.py", frozenset({"new_events"})),
    ("serialisation", "saga_core/engine/state_codec.py", frozenset({"encode_state"})),
    ("serialisation", "saga_core/canonical_json.py", None),
    ("serialisation", "application/views.py", None),
    ("load", "events/eventstore/registry.py", None),
    ("load", "saga_core/engine/state_codec.py", None),
    ("load", "events/saga_log/snapshots.py", None),
    ("load", "events/eventstore/reading.py", None),
    ("load", "events/eventstore/driver.py", frozenset({"stored_event_row",
                                                       "recorded_event_row"})),
    ("load", "events/saga_log/streams.py", frozenset({
        "load", "load_many", "_fold_read", "fold", "fold_from_snapshot", "_decode",
        "_started", "load_history"})),
    ("fold", "saga_core/engine/state.py", None),
    ("fold", "events/saga_log/port.py", frozenset({"extended"})),
    # What is due (due_work) is decide's question; a claim's and a call's checks are gates.
    ("decide", "saga_core/engine/claims.py", frozenset({"due_work", "_claimable", "due_at"})),
    ("authority and gate checks", "saga_core/approval/", None),
    ("authority and gate checks", "saga_core/access/", None),
    ("authority and gate checks", "saga_core/engine/claims.py", None),
    ("authority and gate checks", "saga_core/engine/condition_rules.py", None),
    ("authority and gate checks", "saga_core/definitions/conditions.py", None),
    ("authority and gate checks", "application/gate_windows/", None),
    ("input validation", "saga_core/definitions/inputs.py", None),
    ("input validation", "saga_core/definitions/input_schema.py", None),
    ("input validation", "saga_core/limits.py", None),
    ("input validation", "jsonschema/", None),
    # Resolving a step's templates: its arguments for a gate check, a claim, a key check.
    ("templates", "saga_core/definitions/templates.py", None),
    ("templates", "saga_core/engine/resolved_commands.py", None),
    (None, "saga_core/engine/events.py", None),  # an event built: its builder's cost
    ("decide", "saga_core/", None),  # decide, due times, stops, budgets
    ("decide", "application/orchestrator.py", frozenset({"settle", "_window_work",
                                                         "wake_ups", "_due"})),
    ("decide", "application/claiming.py", None),  # the claims a commit takes ahead
    ("append", "events/", None),  # the store, its statements, loans and definitions check
    ("append", "application/orchestrator.py", frozenset({"_append"})),
    ("publish", "workers/publisher.py", None),
    ("publish", "celery/app/amqp.py", None),
    ("publish", "celery/app/base.py", frozenset({"send_task"})),
    ("publish", "kombu/messaging.py", frozenset({"publish", "_publish"})),
    ("ack", "kombu/message.py", frozenset({"ack", "ack_log_error"})),
    ("ack", "kombu/transport/virtual/base.py", frozenset({"basic_ack"})),
    ("tool call", "memory_tools.py", None),
    ("tool call", "workers/executor.py", frozenset({"_call_tool"})),
    ("worker: claim and record", "workers/executor.py", None),
    ("worker: claim and record", "application/orchestrator.py", None),
    ("worker: branches", "workers/branches.py", None),
    ("telemetry (logs, metrics, spans)", "logging/", None),
    ("telemetry (logs, metrics, spans)", "prometheus_client/", None),
    ("telemetry (logs, metrics, spans)", "sentry_sdk/", None),
    ("telemetry (logs, metrics, spans)", "opentelemetry/", None),
    ("telemetry (logs, metrics, spans)", "application/telemetry/", None),
    ("consume (Celery, kombu, Redis)", "workers/reliable_redis.py", None),
    ("consume (Celery, kombu, Redis)", "workers/tasks.py", None),
    ("consume (Celery, kombu, Redis)", "celery/", None),
    ("consume (Celery, kombu, Redis)", "kombu/", None),
    ("consume (Celery, kombu, Redis)", "redis/", None),
    ("client: start", "application/client.py", None),
)
#: Phases that own every frame below their own (see :data:`PHASES`).
WHOLE = frozenset({"hashing", "secrets", "serialisation", "fold", "authority and gate checks",
                   "input validation", "templates", "publish", "ack", "tool call",
                   "telemetry (logs, metrics, spans)"})
_TRANSPARENT = "(caller's)"


def frame_phase(frame: str) -> str | None:
    """The phase one collapsed frame (``Class.function (path:line)``) belongs to: a phase,
    :data:`_TRANSPARENT` (its caller's), or None when no rule names it."""
    qualified, _, where = frame.partition(" (")
    name = qualified.rsplit(".", 1)[-1]  # py-spy names methods Class.method
    for phase, fragment, functions in PHASES:
        if fragment in where and (functions is None or name in functions):
            return _TRANSPARENT if phase is None else phase
    return None


def sample_phase(stack: list[str]) -> str:
    """The phase of a sample (its frames outermost first): see :data:`PHASES`."""
    found = "other"
    for frame in stack:
        phase = frame_phase(frame)
        if phase is None or phase == _TRANSPARENT:
            continue
        found = phase
        if phase in WHOLE:
            break
    return found


def phase_samples(lines: Iterable[str], *, under: str | None = None) -> collections.Counter[str]:
    """Samples per phase in py-spy's raw (collapsed) output; ``under``: only samples with a
    frame whose function is that name (the client's starts, not its counting)."""
    counts: collections.Counter[str] = collections.Counter()
    for line in lines:
        stack_text, _, count = line.rstrip("\n").rpartition(" ")
        if not stack_text or not count.isdigit():
            continue
        stack = stack_text.split(";")
        if under is not None and not any(frame.partition(" (")[0].rsplit(".", 1)[-1] == under
                                        for frame in stack):
            continue
        counts[sample_phase(stack)] += int(count)
    return counts


def spy(pid: int, out: Path) -> subprocess.Popen[bytes]:
    """py-spy sampling ``pid`` into ``out`` (raw collapsed stacks) until SIGINT: only the
    thread holding the GIL, so a sample is Python running (a thread blocked in a wait on a
    lock, a socket or the pool's queue is not)."""
    return subprocess.Popen(  # noqa: S603 - py-spy from PATH or the venv
        [shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy"), "record",
         "-p", str(pid), "-r", str(RATE), "-f", "raw", "--gil", "-o", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop_spy(proc: subprocess.Popen[bytes]) -> None:
    """Stop py-spy and let it write its file."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()


def breakdown(counts: Mapping[str, int], cpu_ms: float) -> dict[str, float]:
    """Each phase's share of the samples as milliseconds of the role's ``cpu_ms`` (largest
    first). py-spy's sample count is not a clock (it samples the thread it sees holding the
    GIL, and may fall behind): the shares split the CPU time /proc measured."""
    total = sum(counts.values()) or 1
    return {phase: round(cpu_ms * n / total, 3) for phase, n in counts.most_common()}


def main() -> None:  # noqa: PLR0915 - one run, in order
    """Run, sample, print the breakdown."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--sagas", type=int, default=400)
    parser.add_argument("--warm-up", type=int, default=60)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--stacks", type=Path, help="keep the raw collapsed stacks here")
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="sfp-", dir="/tmp"))
    stacks = args.stacks or home / "stacks"
    stacks.mkdir(parents=True, exist_ok=True)
    server = embedded.start_postgres(home).url
    broker = embedded.start_redis(home).url
    database = fresh_database(server)
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'scripts'}",
           "SAGAFLEET_DATABASE_URL": database, "SAGAFLEET_BROKER_URL": broker,
           "SAGAFLEET_TOOLS": "memory_tools:trip_tools"}
    procs = [spawn_sagafleet(["worker"], env, home / f"worker-{i}.log")
             for i in range(args.workers)]
    fleet = Fleet(FleetConfig(database_url=database, broker_url=broker), trip_tool_catalogue())
    try:
        register_trip(fleet)
        client = fleet.client(actor="profile")
        wait_ready(broker, args.workers)
        with psycopg.connect(database, autocommit=True) as conn:
            finished = FinishedCounter(conn)

            def run(sagas: int, label: str) -> float:
                """Start and finish ``sagas``; the CPU seconds the starts took here."""
                before = finished()
                began = time.process_time()
                for index in range(sagas):
                    client.start("trip", TRIP, key=f"{label}-{time.time()}-{index}")
                starting = time.process_time() - began
                deadline = time.monotonic() + 1800
                while finished() - before < sagas:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"{label}: not all {sagas} sagas finished")
                    time.sleep(0.02)
                return starting

            run(args.warm_up, "warm")
            spies = [spy(proc.pid, stacks / f"worker-{i}.txt") for i, proc in enumerate(procs)]
            spies.append(spy(os.getpid(), stacks / "client.txt"))
            time.sleep(1.0)  # py-spy attached
            meter = CpuMeter(workers=[proc.pid for proc in procs], broker=broker, database=conn)
            starting = run(args.sagas, "profile")
            cpu = meter.stop()
            for proc in spies:
                stop_spy(proc)
    finally:
        fleet.close()
        stop_processes(procs, grace_s=15)
        drop_database(server, database)
        embedded.stop_embedded(home)

    per_saga = {role: seconds * 1000 / args.sagas for role, seconds in cpu.items()}
    worker_counts: collections.Counter[str] = collections.Counter()
    for i in range(args.workers):
        worker_counts.update(phase_samples((stacks / f"worker-{i}.txt").read_text().splitlines()))
    client_counts = phase_samples((stacks / "client.txt").read_text().splitlines(),
                                  under="start")
    # Read: the servers' files, the workers' logs and stacks kept here go (--stacks elsewhere
    # stay; a run that raised keeps them all).
    shutil.rmtree(home, ignore_errors=True)
    report = {
        "sagas": args.sagas, "workers": args.workers,
        "cpu_ms_per_saga": {role: round(ms, 3) for role, ms in per_saga.items()},
        "client_start_cpu_ms": round(starting * 1000 / args.sagas, 3),
        "worker_phases_ms": breakdown(worker_counts, per_saga.get("workers", 0.0)),
        "client_start_phases_ms": breakdown(client_counts, starting * 1000 / args.sagas),
        "samples": {"workers": sum(worker_counts.values()), "client": sum(client_counts.values())},
    }
    if args.json:
        print(json.dumps(report))
        return
    print(f"{args.sagas} trip sagas on {args.workers} workers (memory tools); CPU ms per saga: "
          + ", ".join(f"{role} {ms:.2f}" for role, ms in per_saga.items())
          + f"; total {sum(per_saga.values()):.2f}")
    for title, phases in (("workers, by phase", report["worker_phases_ms"]),
                          (f"client.start ({report['client_start_cpu_ms']:.2f} ms), by phase",
                           report["client_start_phases_ms"])):
        print(f"{title} (ms per saga):")
        for phase, ms in phases.items():
            print(f"  {phase:<36} {ms:6.3f}")
    if args.stacks:
        print(f"raw stacks in {args.stacks}")


if __name__ == "__main__":
    main()
