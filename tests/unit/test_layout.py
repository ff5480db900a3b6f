"""The unit tests mirror the packages (issue 32 step 3): ``tests/unit/<package>/test_<module>.py``.

A directory under ``tests/unit`` names a package of the project (or one module, when that
module's tests fill several files); a test file named for a module lives in the directory of
that module's package. The cross-cutting suites below test no one module and keep their place.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "tests" / "unit"
INTEGRATION = ROOT / "tests" / "integration"
PACKAGES = ("saga_core", "events", "application", "workers", "projections", "sagafleet")

# Suites that test no one module: hostile input across every layer, the helper scripts, the
# model-based test of the whole engine (issue 36, tests/unit/model), and the rules between the
# rooms (directly in tests/unit).
CROSS_CUTTING_DIRS = ("hostile", "scripts", "model")
CROSS_CUTTING_FILES = ("test_architecture.py", "test_layout.py", "test_sandbox_stays_out.py")
# Directory names that hold data or caches, not tests of a package.
NOT_PACKAGES = ("fixtures", "__pycache__")
# Integration directories that belong to one package (the others are fleet-wide scenarios).
MIRRORED_INTEGRATION = ("events", "projections", "application", "sagafleet")
# Integration directories grouped by how they run, not by module: the console in a headless
# browser, and the console's single sign-on against a real OpenID provider (with its node app).
THEME_DIRS = (("sagafleet", "console", "browser"), ("sagafleet", "console", "oidc"))


def names_package_or_module(parts: tuple[str, ...]) -> bool:
    """Whether ``parts`` (relative to the project root) is a package or a module of it."""
    if not parts or parts[0] not in PACKAGES:
        return False
    where = ROOT.joinpath(*parts)
    return (where / "__init__.py").is_file() or where.with_suffix(".py").is_file()


def mirrored_dirs() -> list[tuple[Path, tuple[str, ...]]]:
    """Every directory under tests/unit and the mirrored integration ones, with its mirror."""
    found: list[tuple[Path, tuple[str, ...]]] = []
    for base in [UNIT] + [INTEGRATION / name for name in MIRRORED_INTEGRATION]:
        start = base if base == UNIT else base.parent
        for directory in sorted(p for p in base.rglob("*") if p.is_dir()):
            parts = directory.relative_to(start).parts
            if parts[0] in CROSS_CUTTING_DIRS or any(p in NOT_PACKAGES for p in parts):
                continue
            if any(parts[: len(theme)] == theme for theme in THEME_DIRS):
                continue
            found.append((directory, parts))
        if base != UNIT:
            found.append((base, (base.name,)))
    return found


def modules_by_name() -> dict[str, set[tuple[str, ...]]]:
    """Each module or sub-package name of the project -> the packages (as parts) holding it."""
    holders: dict[str, set[tuple[str, ...]]] = {}
    for package in PACKAGES:
        for source in (ROOT / package).rglob("*.py"):
            parts = source.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if len(parts) > 1 and not parts[-1].startswith("_"):
                holders.setdefault(parts[-1], set()).add(parts[:-1])
    return holders


def test_the_layout_sees_the_mirrored_directories() -> None:
    seen = {parts for _, parts in mirrored_dirs()}
    assert {
        ("saga_core", "engine"),
        ("events", "eventstore"),
        ("workers",),
        ("sagafleet", "console"),
        ("application",),
    } <= seen


@pytest.mark.parametrize(
    ("directory", "parts"),
    mirrored_dirs(),
    ids=lambda value: str(value.relative_to(ROOT)) if isinstance(value, Path) else "",
)
def test_every_test_directory_names_a_package_or_module(
    directory: Path, parts: tuple[str, ...]
) -> None:
    assert names_package_or_module(parts), (
        f"{directory.relative_to(ROOT)} names no package or module "
        f"({'/'.join(parts)} is neither a package nor a .py file under the project root)"
    )


def test_only_the_cross_cutting_suites_sit_directly_in_tests_unit() -> None:
    loose = sorted(p.name for p in UNIT.glob("test_*.py") if p.name not in CROSS_CUTTING_FILES)
    assert loose == [], f"tests/unit/{loose} test one module: move them under its package"


def test_a_test_named_for_a_module_lives_beside_that_modules_package() -> None:
    holders = modules_by_name()
    misplaced: list[str] = []
    for directory, parts in mirrored_dirs():
        for test_file in sorted(directory.glob("test_*.py")):
            module = test_file.stem.removeprefix("test_")
            packages = holders.get(module)
            # A module-named directory (tests/unit/sagafleet/cli) stands for the module's package.
            home = parts if (ROOT.joinpath(*parts) / "__init__.py").is_file() else parts[:-1]
            if packages and home not in packages:
                where = " or ".join("/".join(p) for p in sorted(packages))
                misplaced.append(f"{test_file.relative_to(ROOT)} (its module is in {where})")
    assert misplaced == []


@pytest.mark.parametrize(
    "path", ["tests/unit/workers/test_executor.py", "tests/unit/application/test_orchestrator.py"]
)
def test_the_executor_and_the_orchestrator_have_test_modules_named_for_them(path: str) -> None:
    assert (ROOT / path).is_file()
