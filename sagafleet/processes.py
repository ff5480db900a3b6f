"""Starting and stopping ``sagafleet`` child processes (the demo's fleet, benchmarks, tests)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path


def spawn_sagafleet(
    args: Sequence[str], env: Mapping[str, str], log: Path
) -> subprocess.Popen[bytes]:
    """Start ``python -m sagafleet ARGS`` in its own session, output appended to ``log``."""
    with log.open("ab") as out:
        return subprocess.Popen(  # noqa: S603 - our own interpreter and module
            [sys.executable, "-m", "sagafleet", *args], env=dict(env),
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )


def stop_processes(procs: Iterable[subprocess.Popen[bytes]], grace_s: float = 10.0) -> None:
    """Warm shutdown: resume (if stopped) and SIGTERM each, SIGKILL what outlives ``grace_s``."""
    live = [p for p in procs if p.poll() is None]
    for proc in live:
        proc.send_signal(signal.SIGCONT)  # a SIGSTOPped process cannot act on SIGTERM
        proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for proc in live:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
