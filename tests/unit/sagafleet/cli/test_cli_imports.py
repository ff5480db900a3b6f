"""``sagafleet --version`` and ``--help`` import none of the rooms: only the chosen
subcommand's module is imported (``sagafleet.cli.COMMANDS``), and ``--help``'s tail is read
from a file a test keeps current."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from sagafleet import cli

HEAVY = ("celery", "kombu", "psycopg", "pydantic", "pydantic_settings", "redis", "yaml",
         "saga_core", "events", "application", "workers", "projections", "sagafleet.settings",
         "sagafleet.commands.reports")
"""Packages a call that only prints must not pay for."""

PROBE = """
import json, sys
from sagafleet.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def imported_by(*argv: str) -> set[str]:
    """The modules a fresh interpreter holds after ``sagafleet ARGV``."""
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True,
                          text=True, check=True)
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


@pytest.mark.parametrize("argv", [["--version"], ["--help"]])
def test_version_and_help_import_no_room_and_no_driver(argv: list[str]) -> None:
    # given a fresh interpreter, when it answers --version or --help
    modules = imported_by(*argv)
    # then none of the heavy packages was imported
    loaded = sorted(name for name in modules
                    if any(name == heavy or name.startswith(heavy + ".") for heavy in HEAVY))
    assert loaded == []


def test_a_subcommand_imports_its_own_module_and_no_other_command() -> None:
    # given a fresh interpreter, when it shows one subcommand's help
    modules = imported_by("db", "--help")
    # then the db command's module is loaded, and no other command's
    assert "sagafleet.commands.db" in modules
    commands = {name for name in modules if name.startswith("sagafleet.commands.")}
    assert commands == {"sagafleet.commands.db"}


def test_every_listed_command_is_registered_by_the_module_the_table_names() -> None:
    # given the full parser and, for each command, the parser built for it alone
    full = cli.build_parser()
    subparsers = next(a for a in full._actions if isinstance(a, argparse._SubParsersAction))
    assert list(subparsers.choices) == [command.name for command in cli.COMMANDS]
    for command in cli.COMMANDS:
        alone = cli.build_parser([command.name])
        sub = next(a for a in alone._actions if isinstance(a, argparse._SubParsersAction))
        # then the chosen command's parser is its module's, with a handler of its own
        # (placeholders have none); every other name is still listed
        parser = sub.choices[command.name]
        assert parser._subparsers is not None or parser.get_default("handler") is not None, (
            command.name)
        assert list(sub.choices) == list(subparsers.choices)


def test_the_help_epilog_file_is_current() -> None:
    # the stored tail equals what the settings, roles and exit codes make it today;
    # regenerate with: python -m sagafleet.cli --write-epilog
    assert cli.stored_epilog() == cli.epilog()


def test_an_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(["no-such-command"])
    assert done.value.code == 2
    assert "invalid choice: 'no-such-command'" in capsys.readouterr().err


def test_the_read_commands_import_no_broker_no_console_and_no_client() -> None:
    # given a fresh interpreter, when it loads the read commands (status, list, ...)
    probe = ("import json, sys, sagafleet.commands.reports; "
             "print(json.dumps(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True)
    modules = set(json.loads(done.stdout))
    # then what only acting commands and services need stayed out
    heavy = {"celery", "kombu", "sagafleet.console", "application.client", "jsonschema",
             "prometheus_client"}
    assert heavy.isdisjoint(modules), sorted(heavy & modules)
