"""bench_fleet's bound line: the fleet's CPU against the durable chain's, every role summed.

The line is what a closing note quotes as the throughput the fleet's CPU allows; a role left
out of the sum, or the two sides swapped, would quote a bound the run does not support.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "scripts"))
from bench_fleet import cpu_bound  # noqa: E402


def run(workers: float, postgres: float, redis: float, client: float) -> dict[str, float]:
    """One run's CPU seconds by role, as CpuMeter.stop returns them (with the starts' key)."""
    return {"workers": workers, "postgres": postgres, "redis": redis, "client": client,
            "client.start": client}


def test_the_bound_sums_every_role_and_takes_each_sides_median() -> None:
    # given three runs a side, 100 items each: durable 1.0 s a run (10 ms an item), the fleet
    # 1.6 s in its median run (16 ms), with an outlier on each side
    cpu = {
        "durable": [run(0.6, 0.2, 0.1, 0.1), run(0.6, 0.2, 0.1, 0.1), run(3.0, 0.0, 0.0, 0.0)],
        "fleet": [run(0.9, 0.4, 0.1, 0.2), run(1.0, 0.4, 0.1, 0.2), run(0.1, 0.0, 0.0, 0.0)],
    }

    # when the line is written
    line = cpu_bound(cpu, 100)

    # then it quotes 16 / 10 and its inverse, and what 0.8x the durable chain asks
    assert "1.60x the durable chain's" in line
    assert "at most ~0.62x the durable chain" in line
    assert "0.8x needs <= 1.25x its CPU" in line
