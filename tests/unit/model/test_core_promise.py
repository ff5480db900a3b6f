"""The core promise explored by interleavings, not hand-picked scenarios (issue 36).

``core_promise_model.CorePromise`` generates saga shapes and interleaves worker, broker,
sweeper, clock, fault and person moves over the real engine on ``TestFleet``, checking
after every move that no non-deduplicating key is called twice without a lookup past its
commit horizon, no net effect is duplicated, compensations keep dependency order and stop
at the pivot, the state is the fold of the events, gates ask exactly above their limits,
and nothing finished still waits. CI runs a bounded, derandomized number of examples;
``scripts/model_run.py --examples N`` runs a long one.
"""

from __future__ import annotations

import os

from core_promise_model import CorePromise
from hypothesis import HealthCheck, Phase, settings

#: Examples CI explores (SAGAFLEET_MODEL_EXAMPLES overrides, for a longer local run).
CI_EXAMPLES = int(os.environ.get("SAGAFLEET_MODEL_EXAMPLES", "400"))
#: SAGAFLEET_MODEL_SHRINK=0 reports a failure as found, unshrunk: scripts/mutation.py
#: only needs to know that a mutant is caught, not the smallest example that shows it.
SHRINK = os.environ.get("SAGAFLEET_MODEL_SHRINK", "1") != "0"

TestCorePromise = CorePromise.TestCase
TestCorePromise.settings = settings(
    max_examples=CI_EXAMPLES,
    stateful_step_count=30,
    derandomize=True,  # the same examples on every run: CI cannot flake on a lucky draw
    deadline=None,  # an example's time is the engine's, not a property of the promise
    database=None,
    phases=[p for p in Phase if SHRINK or p is not Phase.shrink],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
