"""The long run of the core-promise model (tests/unit/model): many more examples than CI.

::

    python scripts/model_run.py --examples 1500                # random, as Hypothesis draws
    python scripts/model_run.py --examples 400 --derandomize   # CI's examples, reproducible
    python scripts/model_run.py --examples 200 --json

Prints the examples explored (valid ones; Hypothesis may try more), the moves (rule steps)
they made, the sagas that ended in each state, and the time taken. Exit code 0 when nothing
was found, 1 when an invariant failed (the shrunk example is printed), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "unit" / "model")]

import core_promise_model as model  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402
from hypothesis.stateful import run_state_machine_as_test  # noqa: E402

EXIT_OK, EXIT_FOUND, EXIT_USAGE = 0, 1, 2


class CountingPromise(model.CorePromise):  # type: ignore[misc]
    """The model, counting what it explores (examples, moves, how sagas ended)."""

    examples = 0
    steps = 0
    ended: Counter[str] = Counter()

    def __init__(self) -> None:
        super().__init__()
        CountingPromise.examples += 1

    def check_invariants(self, *args: Any, **kwargs: Any) -> None:
        # Called once after the initial moves and once after every rule (a Hypothesis hook).
        CountingPromise.steps += 1
        super().check_invariants(*args, **kwargs)

    def teardown(self) -> None:
        super().teardown()
        if self.fleet is not None:
            for saga_id in self.sagas:
                state = self.fleet.state(saga_id)
                CountingPromise.ended[str(state.status)] += 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=1000, help="examples to explore")
    parser.add_argument("--steps", type=int, default=30, help="moves per example (default 30)")
    parser.add_argument("--derandomize", action="store_true",
                        help="the same examples every run (as CI draws them)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    if args.examples < 1 or args.steps < 1:
        print("model_run: --examples and --steps must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    chosen = settings(max_examples=args.examples, stateful_step_count=args.steps,
                      deadline=None, database=None, derandomize=args.derandomize,
                      suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    started = time.monotonic()
    found = None
    try:
        run_state_machine_as_test(CountingPromise, settings=chosen)
    except AssertionError as error:
        found = str(error)
    elapsed = time.monotonic() - started
    report = {"examples": CountingPromise.examples, "steps": CountingPromise.steps,
              "seconds": round(elapsed, 1), "ended": dict(CountingPromise.ended),
              "found": found}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"examples explored: {report['examples']} (asked for {args.examples})")
        print(f"moves checked:     {report['steps']}")
        print(f"time:              {elapsed:.0f} s")
        print("sagas ended:       " + ", ".join(f"{k} {v}" for k, v in sorted(
            CountingPromise.ended.items())))
        print("found:             " + (found or "nothing"))
    return EXIT_FOUND if found else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
