"""A pytest plugin for ``scripts/mutation.py``: each test's lines under its own context.

Loaded (``-p mutation_contexts``) in the one run under coverage that maps every line of
``saga_core`` to the tests that reach it: coverage switches to a context named by the test's
node id while the test runs (set-up and tear-down included) and back to the empty context
between tests, so what only runs on import or collection stays in the empty one. Every module
of the package ``SAGAFLEET_MUTATION_PACKAGE`` names is imported before the first test, so a
module a test would import lazily does not file its import-time lines under that test. Each
test's duration is written to the file ``SAGAFLEET_MUTATION_DURATIONS`` names, so a mutant
runs its quickest tests first.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import time
from collections.abc import Iterator
from pathlib import Path

import coverage
import pytest

_durations: dict[str, float] = {}


def pytest_sessionstart(session: pytest.Session) -> None:
    name = os.environ.get("SAGAFLEET_MUTATION_PACKAGE")
    if not name:
        return
    package = importlib.import_module(name)
    for module in pkgutil.walk_packages(package.__path__, f"{name}."):
        try:
            importlib.import_module(module.name)
        except ImportError:  # an optional dependency not installed: no test imports it either
            continue


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    measuring = coverage.Coverage.current()
    if measuring is not None:
        measuring.switch_context(item.nodeid)
    started = time.perf_counter()
    try:
        yield
    finally:
        _durations[item.nodeid] = time.perf_counter() - started
        if measuring is not None:
            measuring.switch_context("")


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = os.environ.get("SAGAFLEET_MUTATION_DURATIONS")
    if path:
        Path(path).write_text(json.dumps(_durations), encoding="utf-8")
