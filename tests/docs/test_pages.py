"""What the pages say about the code stays true: every ``sagafleet …`` they name in prose is
a real command with real options, the command-line page lists every command, every file and
module they point at exists, the README stays short and its two commands are the ones CI
runs, and the tutorial shows the definition file it says it shows."""

from __future__ import annotations

import argparse
import importlib
import re
import shlex
from pathlib import Path

import pytest
import yaml

from tests.docs.conftest import DOCS, NOT_YET_MERGED, ROOT, documents, page_id

INLINE_CODE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")


def _prose(text: str) -> str:
    """The page without its fenced code blocks (those are checked as code)."""
    return re.sub(r"^\s*```.*?^\s*```", "", text, flags=re.S | re.M)


def _parser() -> argparse.ArgumentParser:
    from sagafleet.cli import build_parser

    return build_parser()


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _positionals(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions
            if not a.option_strings and not isinstance(a, argparse._SubParsersAction)]


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def command_problem(mention: str) -> str | None:
    """Why a prose mention ``sagafleet …`` names no real command or option (None: it does)."""
    words = mention.replace("\\|", " ").split()[1:]
    words = [w.strip("[]()…,;.") for w in words]
    words = [w for w in words if w]
    if any(w.split("=", 1)[0] in NOT_YET_MERGED for w in words):
        return None
    parser, path = _parser(), ["sagafleet"]
    while words and not words[0].startswith("-"):
        choices = _subcommands(parser)
        if not choices:
            if not _positionals(parser) and re.fullmatch(r"[a-z][a-z-]*", words[0]):
                return f"`{' '.join(path)}` takes no {words[0]!r}"
            break
        if words[0] not in choices:
            if re.fullmatch(r"[a-z][a-z-]*", words[0]):
                return f"`{' '.join(path)}` has no command {words[0]!r}"
            break
        parser = choices[words.pop(0)]
        path.append(parser.prog.split()[-1])
    known = _options(parser)
    for word in words:
        option = word.split("=", 1)[0]
        if re.fullmatch(r"--[a-z][a-z0-9-]*", option) and option not in known:
            return f"`{' '.join(path)}` has no option {option}"
    return None


def _mentions(path: Path) -> list[str]:
    return [m for m in INLINE_CODE.findall(_prose(path.read_text(encoding="utf-8")))
            if m.startswith("sagafleet ") and not m.startswith("sagafleet.")]


@pytest.mark.parametrize("path", documents(), ids=page_id)
def test_every_command_named_in_prose_is_a_real_one(path: Path) -> None:
    problems = [f"{m!r}: {problem}" for m in _mentions(path)
                if (problem := command_problem(m)) is not None]
    assert not problems, f"{page_id(path)} names commands the CLI does not have:\n" + \
        "\n".join(problems)


def test_the_prose_check_catches_the_commands_that_never_existed() -> None:
    assert command_problem("sagafleet projector status") is not None
    assert command_problem("sagafleet dead-letters list") is not None
    assert command_problem("sagafleet approve SAGA STEP --as ada") is not None
    assert command_problem("sagafleet dead-letters show ID") is None
    assert command_problem("sagafleet principals add NAME --kind person\\|agent") is None
    assert sum(len(_mentions(path)) for path in documents()) >= 100


def _leaf_commands(parser: argparse.ArgumentParser, prefix: str = "sagafleet") -> list[str]:
    found = []
    for name, sub in _subcommands(parser).items():
        found.append(f"{prefix} {name}")
        found.extend(_leaf_commands(sub, f"{prefix} {name}"))
    return found


def test_the_command_line_page_names_every_command() -> None:
    page = (DOCS / "cli.md").read_text(encoding="utf-8")
    missing = [c for c in _leaf_commands(_parser()) if f"`{c}" not in page]
    assert not missing, f"docs/cli.md does not list {missing}"


# --- files and modules the pages point at ---------------------------------------------------

PATH_MENTION = re.compile(
    r"`((?:saga_core|events|application|workers|projections|sagafleet|scripts|tests|examples|"
    r"docs)/[A-Za-z0-9_./-]+)`")
MODULE_MENTION = re.compile(
    r"`((?:saga_core|events|application|workers|projections|sagafleet)(?:\.[A-Za-z_][A-Za-z0-9_]*)+)"
    r"(?:\(\))?`")
# Dotted names that are not Python: Celery task names, loggers, span attributes, the
# failover run's report fields.
NOT_PYTHON = re.compile(r"^(sagafleet\.(commands\.(start_saga|cancel_saga|submit_plan)|step|"
                        r"security|access|saga_id|commands)|"
                        r"events\.(acknowledged_before|missing_after)_failover)$")


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for name in parts[split:]:
            if not hasattr(target, name):
                return False
            target = getattr(target, name)
        return True
    return False


@pytest.mark.parametrize("path", documents(), ids=page_id)
def test_every_file_and_module_a_page_names_exists(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    missing_files = sorted({p for p in PATH_MENTION.findall(text)
                            if not (ROOT / p.rstrip("/")).exists()
                            and not p.startswith("tests/artifacts/")})  # made by test runs
    missing_names = sorted({m for m in MODULE_MENTION.findall(text)
                            if not NOT_PYTHON.match(m) and not _resolves(m)})
    assert not missing_files, f"{page_id(path)} names files that do not exist: {missing_files}"
    assert not missing_names, f"{page_id(path)} names modules or attributes that do not " \
        f"exist: {missing_names}"


# --- the README -----------------------------------------------------------------------------

README = ROOT / "README.md"


def _sh_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, flags=re.S)


def test_the_readme_stays_short() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 220


def _words(command: str) -> list[str]:
    # The flags that only quiet pip and pytest, or keep pytest's cache out of a CI clone.
    quiet = {"-q", "-p", "no:cacheprovider"}
    return [w for w in shlex.split(command) if w not in quiet]


def test_the_readmes_two_commands_are_the_ones_ci_runs() -> None:
    # given the README's first two shell blocks: the demo, and the whole test suite
    demo, suite = (block.strip() for block in _sh_blocks(README.read_text(encoding="utf-8"))[:2])
    assert demo == ("python3 -m venv .venv && .venv/bin/pip install . && "
                    ".venv/bin/sagafleet demo")
    # then CI runs the test command verbatim (quiet flags aside) ...
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    (ci_suite,) = re.findall(r"^\( (python3 -m venv .*?) \) \|\| status=\$\?$", ci, flags=re.M)
    assert _words(ci_suite) == _words(suite)
    # ... and its install check (which CI runs) does the demo command's three parts: a fresh
    # venv, `pip install .` of the checkout, `sagafleet demo`
    installs = (ROOT / "scripts" / "check_installs.sh").read_text(encoding="utf-8")
    assert "scripts/check_installs.sh" in ci
    assert '"$python" -m venv "$venv"' in installs
    assert '"$venv/bin/pip" install -q --disable-pip-version-check "$SOURCE"' in installs
    assert '"$venv/bin/sagafleet" demo' in installs


# --- the tutorial ---------------------------------------------------------------------------


def test_the_tutorial_shows_the_definition_file_it_runs() -> None:
    page = (DOCS / "tutorial.md").read_text(encoding="utf-8")
    shown = [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", page, re.S)]
    shipped = yaml.safe_load((DOCS / "examples" / "onboarding-approval.yaml").read_text())
    assert shipped in shown
    assert shipped["steps"][-1]["approval"]["required"] is True


# --- the architecture page ------------------------------------------------------------------


def test_the_architecture_page_states_the_rules_the_architecture_test_checks() -> None:
    from tests.unit.test_architecture import MAY_IMPORT

    page = (DOCS / "architecture.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([a-z_]+)` \| ([^|]+) \|", page, flags=re.M)
    stated = {room: ({room for room in MAY_IMPORT} if cell.strip() == "every room"
                     else set(re.findall(r"`([a-z_]+)`", cell)))
              for room, cell in rows if room in MAY_IMPORT}
    assert stated == MAY_IMPORT


def test_the_runbook_lists_every_operator_action_as_the_code_describes_it() -> None:
    from saga_core.engine.resolution import ACTION_EFFECTS, OPERATOR_ACTIONS

    page = (DOCS / "operations.md").read_text(encoding="utf-8")
    runbook = page[page.index("## Runbook"):]
    rows = re.findall(r"^\| `([a-z_]+)` \| (.*) \|$", runbook, flags=re.M)
    assert rows == [(action, ACTION_EFFECTS[action]) for action in OPERATOR_ACTIONS]
