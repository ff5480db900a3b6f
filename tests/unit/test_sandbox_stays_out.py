"""The sandbox (a simulator of the outside world) is no part of the production path."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION_ROOMS = ("saga_core", "events", "workers", "projections")


def imported_modules(source: str, package: str) -> set[str]:
    """Every module a file of ``package`` imports, absolute or relative, anywhere in it."""
    tree = ast.parse(source)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


@pytest.mark.parametrize("room", PRODUCTION_ROOMS)
def test_no_production_room_imports_the_sandbox(room: str) -> None:
    offenders = {}
    for path in (ROOT / room).rglob("*.py"):
        package = ".".join(path.relative_to(ROOT).parts[:-1])
        modules = imported_modules(path.read_text(encoding="utf-8"), package)
        offenders[str(path.relative_to(ROOT))] = sorted(
            m for m in modules if m == "sagafleet.sandbox" or m.startswith("sagafleet.sandbox.")
        )
    assert {p: m for p, m in offenders.items() if m} == {}


def test_the_sandbox_lives_outside_workers() -> None:
    assert not (ROOT / "workers" / "sandbox").exists()
    assert (ROOT / "sagafleet" / "sandbox" / "migrations").is_dir()


def test_the_checker_sees_every_spelling_of_a_sandbox_import() -> None:
    # a test that cannot fail is a defect: the checker must catch each way of importing it
    source = "from sagafleet import sandbox\nimport sagafleet.sandbox.faults\n"
    assert imported_modules(source, "workers") >= {"sagafleet.sandbox", "sagafleet.sandbox.faults"}
    relative = "def f():\n    from ..sandbox import adapters\n"
    assert "sagafleet.sandbox.adapters" in imported_modules(relative, "sagafleet.commands")
