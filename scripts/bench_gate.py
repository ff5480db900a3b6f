"""The quick benchmark CI runs: issue 35's same-run ratios as one JSON line, and a failure
only when one falls below a floor far under its target.

In about a minute and a half on fresh embedded servers (or the given ones), in turns so that
whatever the machine does meanwhile falls on both sides alike:

* ``fleet_vs_durable``: trip sagas per second on 2 ``sagafleet worker`` processes (memory
  tools, as ``bench_fleet.py --providers memory``) over durable 4-task Celery chains per
  second (each task commits a row first) on 2 workers: target >= 0.8;
* ``durable_cpu_over_fleet_cpu``: CPU per durable chain over CPU per saga, all roles (workers,
  PostgreSQL backends, Redis, the starting process): target >= 1/1.5 (the fleet at most 1.5x);
* ``durable_task_cpu_over_start_cpu``: a durable chain's CPU per task over ``client.start``'s
  CPU: target >= 1.8 (``client.start`` <= 1 ms where a durable task costs 1.8 ms, as on the
  machine issue 35 was measured on: a ratio, so a slower CI machine does not fail it);
* ``store_batch100_vs_raw``, ``store_read_all_vs_raw``: a 100-event append and a 1,000-event
  ``read_all`` page against hand-written SQL over the same columns and indexes (keyset pages
  for the read), as ``bench_store.py``: target >= 0.9 each.

Each ratio is "higher is better"; its floor is far below the target (CI machines are shared
and noisy: noise must never fail the gate, a slip of a third should). The JSON line also
carries the medians behind each ratio, the runs, the floors and targets, the commit and the
seconds the gate took. Exit status 1 when a ratio is below its floor (the line is printed
first), 2 on bad arguments.

    python scripts/bench_gate.py                       # a table and the verdict
    python scripts/bench_gate.py --json > gate.json    # one JSON line (CI keeps it)
    python scripts/bench_gate.py --compare a.jsonl b.jsonl   # two commits' lines, side by side

To compare two commits, run the gate on each in turn, several times, appending the lines
(``--json >> a.jsonl`` on one checkout, ``>> b.jsonl`` on the other), then ``--compare``:
the median of each ratio per file, and b's over a's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_databases import drop_database  # noqa: E402
from bench_fleet import CLIENT_START, baseline, fleet_run, fresh_database  # noqa: E402
from bench_store import RAW_TABLE, Appender, RawInserter, fill, interleaved, paging  # noqa: E402
from cpu_accounting import ROLES, total_ms  # noqa: E402

from events import EventStore  # noqa: E402
from sagafleet import embedded  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

#: ratio: (target, floor). Every ratio is "higher is better"; each floor sits below the
#: lowest of 12 runs on this project's shared two-core machine (noise never fails the gate)
#: and about 40% under their median (a slip of that size does); the throughput ratio, the
#: noisiest (0.49 to 1.02 for one commit there), guards against halving only.
RATIOS: Mapping[str, tuple[float, float]] = {
    "fleet_vs_durable": (0.8, 0.4),
    "durable_cpu_over_fleet_cpu": (round(1 / 1.5, 3), 0.45),
    "durable_task_cpu_over_start_cpu": (1.8, 0.5),
    "store_batch100_vs_raw": (0.9, 0.65),
    "store_read_all_vs_raw": (0.9, 0.8),
}


def fleet_ratios(server: str, broker: str, rounds: int, sagas: int, logs: Path) -> dict[str, Any]:
    """Durable chains and fleet sagas on 2 workers each, in turns: rates, CPU, ratios."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    database = fresh_database(server)
    durable: list[tuple[float, dict[str, float]]] = []
    fleet: list[tuple[float, dict[str, float]]] = []
    try:
        for _ in range(rounds):
            durable.append(baseline(broker, 2, sagas, env, logs, durable=database))
            rate, _, used = fleet_run(database, broker, 2, sagas, env, logs, providers="memory")
            fleet.append((rate, used))
    finally:
        drop_database(server, database)
    durable_rate = statistics.median(rate for rate, _ in durable)
    fleet_rate = statistics.median(rate for rate, _ in fleet)
    durable_cpu = statistics.median(total_ms(used, sagas) for _, used in durable)
    fleet_cpu = statistics.median(total_ms(used, sagas) for _, used in fleet)
    start_cpu = statistics.median(used[CLIENT_START] * 1000 / sagas for _, used in fleet)
    return {
        "ratios": {
            "fleet_vs_durable": fleet_rate / durable_rate,
            "durable_cpu_over_fleet_cpu": durable_cpu / fleet_cpu,
            "durable_task_cpu_over_start_cpu": durable_cpu / 4 / start_cpu,
        },
        "figures": {
            "durable_chains_per_s": round(durable_rate, 2),
            "fleet_sagas_per_s": round(fleet_rate, 2),
            "durable_cpu_ms_per_chain": round(durable_cpu, 3),
            "fleet_cpu_ms_per_saga": round(fleet_cpu, 3),
            "client_start_cpu_ms": round(start_cpu, 3),
            "fleet_cpu_ms_by_role": {role: round(statistics.median(
                used.get(role, 0.0) for _, used in fleet) * 1000 / sagas, 3) for role in ROLES},
            "runs": {"durable_chains_per_s": [round(r, 2) for r, _ in durable],
                     "fleet_sagas_per_s": [round(r, 2) for r, _ in fleet]},
        },
    }


def store_ratios(server: str, appends: int) -> dict[str, Any]:
    """A 100-event append and a 1,000-event read_all page against hand-written SQL."""
    database = fresh_database(server)
    try:
        with EventStore.connect(database, pool_size=4) as store, \
                psycopg.connect(database, autocommit=True) as raw:
            raw.execute(RAW_TABLE.encode())
            fill(raw, 10_000)
            store_batch, raw_batch = Appender(store, "hundred"), RawInserter(raw, "hundred")
            batch = interleaved({"store": lambda: store_batch(100),
                                 "raw": lambda: raw_batch(100)}, appends, warm=16)
            page = paging(store, raw)
    finally:
        drop_database(server, database)
    return {
        "ratios": {"store_batch100_vs_raw": batch["raw"] / batch["store"],
                   "store_read_all_vs_raw": page["raw"] / page["store"]},
        "figures": {"batch100_append_ms": {k: round(v, 3) for k, v in batch.items()},
                    "read_all_page1000_ms": {k: round(v, 3) for k, v in page.items()}},
    }


def commit() -> str | None:
    """The checkout's commit, when git can tell."""
    try:
        found = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,  # noqa: S607
                               text=True, check=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return found.stdout.strip() or None


def below_floor(ratios: Mapping[str, float]) -> list[str]:
    """The ratios below their floors, each with its figures."""
    return [f"{name} {ratios[name]:.3f} < floor {floor}" for name, (_, floor) in RATIOS.items()
            if name in ratios and ratios[name] < floor]


def compare(paths: Sequence[Path]) -> None:
    """Print each ratio's median per file of JSON lines, and the last file's over the first's."""
    medians: list[dict[str, float]] = []
    for path in paths:
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        if not lines:
            raise SystemExit(f"{path}: no JSON lines")
        medians.append({name: statistics.median(line["ratios"][name] for line in lines
                                                if name in line["ratios"])
                        for name in RATIOS if any(name in line["ratios"] for line in lines)})
    width = max(16, *(len(path.name) + 2 for path in paths))  # a column per file, apart
    print(f"{'ratio (higher is better)':<34}" + "".join(f"{p.name:>{width}}" for p in paths)
          + f"{'last/first':>12}")
    for name in RATIOS:
        if all(name in found for found in medians):
            print(f"{name:<34}" + "".join(f"{found[name]:>{width}.3f}" for found in medians)
                  + f"{medians[-1][name] / medians[0][name]:>12.2f}")


def main() -> int:
    """Measure, print, judge."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", help="PostgreSQL server (default: embedded)")
    parser.add_argument("--broker-url", help="Redis broker (default: embedded)")
    parser.add_argument("--rounds", type=int, default=2, help="turns of each fleet side")
    parser.add_argument("--sagas", type=int, default=150, help="sagas (chains) per turn")
    parser.add_argument("--appends", type=int, default=60, help="100-event appends per side")
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    parser.add_argument("--compare", type=Path, nargs="+", metavar="JSONL",
                        help="compare files of the gate's JSON lines (no measuring)")
    args = parser.parse_args()
    if args.compare:
        compare(args.compare)
        return 0
    if args.rounds < 1 or args.sagas < 10 or args.appends < 10:
        parser.error("--rounds >= 1, --sagas >= 10 and --appends >= 10")
    began = time.monotonic()
    home = Path(tempfile.mkdtemp(prefix="sfg-", dir="/tmp"))
    logs = home / "logs"
    logs.mkdir()
    try:
        server = args.database_url or embedded.start_postgres(home).url
        broker = args.broker_url or embedded.start_redis(home).url
        fleet = fleet_ratios(server, broker, args.rounds, args.sagas, logs)
        store = store_ratios(server, args.appends)
    finally:
        if not (args.database_url and args.broker_url):
            embedded.stop_embedded(home)
    # Measured: the servers' files and the workers' logs go (a run that raised keeps them).
    shutil.rmtree(home, ignore_errors=True)
    ratios = {name: round(value, 3) for name, value in {**fleet["ratios"],
                                                         **store["ratios"]}.items()}
    failed = below_floor(ratios)
    line = {
        "gate": "issue-35", "commit": commit(), "ok": not failed, "failed": failed,
        "ratios": ratios, "targets": {name: target for name, (target, _) in RATIOS.items()},
        "floors": {name: floor for name, (_, floor) in RATIOS.items()},
        "figures": {**fleet["figures"], **store["figures"]},
        "settings": {"rounds": args.rounds, "sagas": args.sagas, "appends": args.appends,
                     "workers": 2, "cpus": os.cpu_count()},
        "seconds": round(time.monotonic() - began, 1),
    }
    if args.json:
        print(json.dumps(line), flush=True)
    else:
        for name, value in ratios.items():
            target, floor = RATIOS[name]
            mark = "BELOW FLOOR" if value < floor else ("meets target" if value >= target else "")
            print(f"{name:<34} {value:7.3f}   target >= {target:<6} floor {floor:<5} {mark}")
        print(json.dumps(line["figures"]))
        print(f"{'gate passed' if not failed else 'gate FAILED: ' + '; '.join(failed)}"
              f" ({line['seconds']} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
