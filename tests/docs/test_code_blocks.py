"""Every checked code block of the README and the docs pages holds (see this folder's
conftest for what each language's check is): python runs, YAML loads as what it is, and
every ``sagafleet`` command line parses."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.conftest import (
    ROOT,
    documents,
    page_id,
    parsed,
    sagafleet_commands,
)

PAGES = documents()


def _blocks(path: Path, kind: str) -> list:
    return [example for example in parsed(path)
            if (kind == "python") == (example.region.evaluator.__name__ == "evaluate_python")]


PYTHON_PAGES = [path for path in PAGES if _blocks(path, "python")]


@pytest.mark.parametrize("path", PYTHON_PAGES, ids=page_id)
def test_the_python_blocks_of_a_page_run_in_order(path: Path, monkeypatch) -> None:
    # given a page's python blocks (one namespace: a later block may use an earlier one's
    # names), run where a reader runs them: the root of a checkout
    monkeypatch.chdir(ROOT)
    blocks = _blocks(path, "python")
    # when each runs, then none raises
    for example in blocks:
        example.evaluate()


SHELL_AND_YAML = [(path, example) for path in PAGES for example in _blocks(path, "other")]


@pytest.mark.parametrize(("path", "example"), SHELL_AND_YAML,
                         ids=[f"{page_id(p)}:{e.line}" for p, e in SHELL_AND_YAML])
def test_a_yaml_or_shell_block_holds(path: Path, example) -> None:
    example.evaluate()


def test_the_pages_hold_checked_blocks() -> None:
    # The checks above cannot pass by finding nothing.
    assert sum(len(_blocks(path, "python")) for path in PAGES) >= 8
    assert len(SHELL_AND_YAML) >= 25


def test_command_lines_are_found_where_a_shell_writes_them() -> None:
    # given shell text with prompts, continuations, env prefixes, pipes and substitutions
    source = ("$ sagafleet principals add ada --kind person \\\n    --role approver\n"
              "added person 'ada'\n"
              "$ printf %s \"$T\" | SAGAFLEET_TOKEN=x sagafleet secrets put --json\n"
              "$ psql \"$(sagafleet db url --show-password)\"  # a comment\n")
    # then each sagafleet invocation is found with its arguments, and output is not
    found = [c.argv for c in sagafleet_commands(source)]
    assert found == [("principals", "add", "ada", "--kind", "person", "--role", "approver"),
                     ("secrets", "put", "--json"),
                     ("db", "url", "--show-password")]


def test_a_command_line_the_cli_does_not_know_is_refused() -> None:
    from tests.docs.conftest import ParserRefused, parse_command_line

    with pytest.raises(ParserRefused):
        parse_command_line(("projector", "status"))
    with pytest.raises(ParserRefused):
        parse_command_line(("dead-letters", "list"))
    parse_command_line(("projections", "status", "--json"))


def test_not_yet_merged_names_only_what_the_cli_does_not_have_yet() -> None:
    # An entry the parser knows now was merged: drop it, so its command lines are checked.
    from tests.docs.conftest import NOT_YET_MERGED, ParserRefused, parse_command_line

    known = []
    for entry in NOT_YET_MERGED:
        argv = ("approve", "s", "step", entry, "1") if entry.startswith("--") else (entry,)
        try:
            parse_command_line(argv)
            known.append(entry)
        except ParserRefused:
            pass
    assert not known, f"merged now: drop {known} from NOT_YET_MERGED in tests/docs/conftest.py"
