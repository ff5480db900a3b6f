"""Costs proven bounded: hostile documents under a memory cap get a typed error or succeed.

bounded_cost_probe.py runs in a subprocess whose address space is capped at what it uses
after start-up plus HEADROOM, and feeds generated YAML and JSON (alias chains, deep
nesting, wide fan-out, shared references) and the known hostile documents to register,
validate_plan and start. A MemoryError, RecursionError or any untyped exception fails it,
and so does not finishing within a generous deadline (a hang, not a speed threshold).
The control shows the cap is real: the register path before issue 20 dies under it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PROBE = Path(__file__).with_name("bounded_cost_probe.py")
ROOT = Path(__file__).resolve().parents[3]
HEADROOM = 384 * 1024 * 1024
"""Memory the probe may add to its start-up size: far above what the largest accepted
input costs (scripts/bench_limits.py measures it), far below what the alias bomb takes."""
DEADLINE_S = 300


def _probe(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(PROBE), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=DEADLINE_S, check=False)


def test_hostile_documents_get_a_typed_error_or_succeed_within_a_memory_cap() -> None:
    # given 40 generated documents and the known hostile ones, under the memory cap
    done = _probe("40", str(HEADROOM))
    # then every one was refused with a typed error or accepted: nothing else happened
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert "property held" in done.stdout


def test_the_cap_is_real_the_register_path_before_issue_20_dies_under_it() -> None:
    # given the eight-level alias file of issue 20 (440 MB before this change)
    done = _probe("unbounded", str(HEADROOM), "8")
    # then PyYAML's plain loader and validation run out of the capped memory
    assert done.returncode != 0 and "MemoryError" in done.stderr, done.stderr[-2000:]
