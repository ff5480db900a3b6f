"""profile_fleet's phase rules name the project's files where they are now.

A rule whose path no longer exists matches nothing, and its samples fall silently to a
broader rule (a fold counted as decide, an event's serialisation as the append): the phase
breakdown a closing note quotes would be wrong without any error. These tests fail when a
module moves and the rules do not follow.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "scripts"))
from profile_fleet import PHASES, sample_phase  # noqa: E402

#: The project's own top-level rooms; other fragments name installed packages.
OWN = ("saga_core/", "events/", "application/", "workers/", "projections/", "sagafleet/")


@pytest.mark.parametrize("fragment", sorted({fragment for _, fragment, _ in PHASES
                                             if fragment.startswith(OWN)}))
def test_each_rule_names_a_file_or_folder_of_the_project(fragment: str) -> None:
    assert (ROOT / fragment).exists(), f"profile_fleet's rule names {fragment}, which is gone"


def test_a_rule_naming_functions_names_functions_its_file_defines() -> None:
    for _, fragment, functions in PHASES:
        if functions is None or not fragment.startswith(OWN):
            continue
        text = (ROOT / fragment).read_text()
        for name in functions:
            assert f"def {name}(" in text, f"{fragment} defines no {name}"


def _frame(function: str, path: str) -> str:
    """A frame as py-spy collapses it."""
    return f"{function} ({path}:1)"


def test_samples_go_to_the_phase_of_their_innermost_rule_or_their_whole_one() -> None:
    worker = _frame("run_step", "/app/workers/tasks.py")
    commit = _frame("Orchestrator.commit", "/app/application/orchestrator.py")
    plan = _frame("Orchestrator.plan_commit", "/app/application/orchestrator.py")
    settle = _frame("settle", "/app/application/orchestrator.py")
    decide = _frame("decide", "/app/saga_core/engine/decide.py")
    evolve = _frame("evolve", "/app/saga_core/engine/state.py")
    grant = _frame("grant_problem", "/app/saga_core/approval/policy.py")
    resolve = _frame("resolve_arguments", "/app/saga_core/engine/resolved_commands.py")
    prepare = _frame("prepare_events", "/app/events/eventstore/prepare.py")
    append = _frame("PostgresEventStore.append", "/app/events/eventstore/postgres.py")
    assert sample_phase([worker, commit, plan, settle, decide]) == "decide"
    assert sample_phase([worker, commit, plan, evolve]) == "fold"
    # A gate check owns the templates it resolves; decide's own resolutions are templates.
    assert sample_phase([worker, commit, plan, settle, decide, grant, resolve]) == (
        "authority and gate checks")
    assert sample_phase([worker, commit, plan, settle, decide, resolve]) == "templates"
    assert sample_phase([worker, commit, append, prepare]) == "serialisation"
    assert sample_phase([worker, commit, append]) == "append"
