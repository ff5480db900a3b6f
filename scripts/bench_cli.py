"""What a ``sagafleet`` call costs before it does anything: median wall time, CPU time and peak
resident memory of ``--version``, ``--help``, ``list`` and ``status`` over N runs.

Usage::

    python scripts/bench_cli.py [--runs N] [--sagafleet PATH ...]

Each ``--sagafleet`` is a console script to measure (default: the one beside this Python), so
that two installs are compared side by side, e.g. the main checkout's and a branch's::

    python scripts/bench_cli.py --sagafleet /work/main/.venv/bin/sagafleet \\
        --sagafleet .venv/bin/sagafleet

The read commands need a migrated database and a token: the script makes a throwaway
``SAGAFLEET_HOME`` with the embedded servers, migrates it, adds a reader and starts nothing
else; it stops the embedded servers and removes the home when it is done. Every figure is
measured per process (``os.wait4``), so the children's servers never count.
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
from dataclasses import dataclass
from pathlib import Path

CASES: dict[str, list[str]] = {
    "--version": ["--version"],
    "--help": ["--help"],
    "list": ["list", "--json"],
    "status": ["status", "00000000-0000-0000-0000-000000000000", "--json"],
}
"""What is measured: the two answers that need no server, and two read commands (``status``
of an unknown saga reads the log and says not found)."""


@dataclass(frozen=True)
class Run:
    """One process's cost."""

    wall_s: float
    cpu_s: float
    peak_rss_mb: float
    exit_code: int


def run_once(argv: list[str], env: dict[str, str]) -> Run:
    """Run ``argv`` once and measure it alone (its own rusage, not the children's total)."""
    started = time.perf_counter()
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    # ru_maxrss is in KiB on Linux.
    return Run(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024,
               process.returncode)


def prepare_home(sagafleet: str, home: Path) -> dict[str, str]:
    """A migrated embedded fleet under ``home`` and a reader's token: the environment the
    read commands run in."""
    env = {**os.environ, "SAGAFLEET_HOME": str(home)}
    for name in [n for n in env if n.startswith("SAGAFLEET_") and n != "SAGAFLEET_HOME"]:
        del env[name]
    subprocess.run([sagafleet, "db", "migrate"], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    token = home / "reader.token"
    subprocess.run([sagafleet, "principals", "add", "bench-reader", "--kind", "person",
                    "--role", "auditor", "--tenant", "bench", "--save-token", str(token)],
                   env=env, check=True, stdout=subprocess.DEVNULL)
    env["SAGAFLEET_TOKEN_FILE"] = str(token)
    return env


def stop_home(sagafleet: str, env: dict[str, str]) -> None:
    """Stop the embedded servers the preparation started."""
    subprocess.run([sagafleet, "embedded", "stop"], env=env, check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def measure(sagafleet: str, env: dict[str, str], runs: int) -> dict[str, dict[str, float]]:
    """The median figures of every case for one console script."""
    out: dict[str, dict[str, float]] = {}
    for case, args in CASES.items():
        samples = [run_once([sagafleet, *args], env) for _ in range(runs)]
        codes = {sample.exit_code for sample in samples}
        out[case] = {
            "wall_s": round(statistics.median(s.wall_s for s in samples), 3),
            "cpu_s": round(statistics.median(s.cpu_s for s in samples), 3),
            "peak_rss_mb": round(statistics.median(s.peak_rss_mb for s in samples), 1),
            "exit_code": float(min(codes)) if len(codes) == 1 else -1.0,
        }
    return out


def main() -> int:
    """Measure every console script given and print a table (and JSON with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per case (median)")
    parser.add_argument("--sagafleet", action="append", default=None,
                        help="a sagafleet console script (repeat to compare)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    scripts = args.sagafleet or [str(Path(sys.executable).with_name("sagafleet"))]
    for script in scripts:
        if shutil.which(script) is None:
            parser.error(f"--sagafleet {script}: not an executable")
    home = Path(tempfile.mkdtemp(prefix="bench-cli-"))
    results: dict[str, dict[str, dict[str, float]]] = {}
    env = prepare_home(scripts[-1], home)
    try:
        for script in scripts:
            results[script] = measure(script, env, args.runs)
    finally:
        stop_home(scripts[-1], env)
        shutil.rmtree(home, ignore_errors=True)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"median of {args.runs} runs (wall s / CPU s / peak RSS MB / exit code)")
    for script, cases in results.items():
        print(script)
        for case, figures in cases.items():
            print(f"  {case:<10} {figures['wall_s']:>7.3f} s  {figures['cpu_s']:>6.3f} s  "
                  f"{figures['peak_rss_mb']:>6.1f} MB  exit {int(figures['exit_code'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
