"""The docs cannot drift from the code: every code block of README.md, docs/**/*.md and
examples/README.md is checked against the real thing (Sybil finds the blocks;
``tests/docs/test_code_blocks.py`` runs them).

* ``python`` blocks run, in order, one namespace per page (a block after
  ``<!-- docs: imports-only -->`` needs servers to run, so only its imports run: the names
  it uses must still exist);
* ``yaml`` blocks load with the real loaders: a saga definition is parsed and validated
  against the tool catalogue that holds its tools; a part of one (``budget:``, ``input:``,
  a step list) is put into a whole definition first; a catalogue (or some of its entries)
  is validated as one; anything else must at least be YAML;
* every ``sagafleet …`` command line in a ``sh``/``console``/``bash`` block is parsed by
  the CLI's own argument parser (nothing is run).

``NOT_YET_MERGED`` names commands and options other branches add at the same time as these
pages document them; a command line using one is skipped, nothing else. Drop an entry once
its branch is merged.
"""

from __future__ import annotations

import argparse
import ast
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from sybil import Document, Example, Sybil
from sybil.parsers.markdown import CodeBlockParser

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

# Added by branches merged after these pages were written (none left: `sagafleet dev` and
# --seen-version are both merged).
NOT_YET_MERGED: frozenset[str] = frozenset()


def documents() -> list[Path]:
    """Every page the docs tests read: the README, the site's pages, the examples' guide."""
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md")), ROOT / "examples" / "README.md"]


def page_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


# --- python -------------------------------------------------------------------------------

DIRECTIVE = re.compile(r"<!--\s*docs:\s*([a-z-]+)\s*-->\s*$")


def directive_before(example: Example) -> str | None:
    """The ``<!-- docs: NAME -->`` comment on the line right above a block, if any."""
    before = example.document.text[:example.start].rstrip("\n")
    last_line = before.rsplit("\n", 1)[-1]
    match = DIRECTIVE.search(last_line)
    return match.group(1) if match else None


def _compiled(example: Example, source: str) -> Any:
    # Padded with blank lines so a traceback names the line in the page.
    line = example.document.text.count("\n", 0, example.start) + 1
    return compile("\n" * line + source, example.path, "exec")


def evaluate_python(example: Example) -> None:
    """Run the block in its page's namespace (or, when marked, only its imports)."""
    source: str = str(example.parsed)
    mode = directive_before(example)
    if mode == "imports-only":
        tree = ast.parse(source)
        imports = [node for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)]
        assert imports, f"{example.path}:{example.line}: an imports-only block imports nothing"
        source = "\n".join(ast.unparse(node) for node in imports)
        exec(compile(source, example.path, "exec"), {})  # noqa: S102
        return
    assert mode is None, f"{example.path}:{example.line}: unknown directive {mode!r}"
    exec(_compiled(example, source), example.namespace)  # noqa: S102


# --- yaml ---------------------------------------------------------------------------------


def catalogues() -> dict[str, Any]:
    """Every tool catalogue the project ships (the examples' and the test kit's), by file."""
    from saga_core.definitions.catalogue import ToolCatalogue

    found = {}
    for path in sorted(ROOT.glob("*/**/*_tools.yaml")):
        if ".venv" in path.parts or ".sagafleet" in path.parts:
            continue
        found[path.name] = ToolCatalogue.from_yaml(path.read_text(encoding="utf-8"))
    assert "trip_tools.yaml" in found, "the trip's catalogue is nowhere in the project"
    return found


def trip_document() -> dict[str, Any]:
    """The shipped trip definition as a document, for blocks that show a part of one."""
    (path,) = [p for p in ROOT.glob("*/**/trip.yaml") if ".venv" not in p.parts]
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    return document


def catalogue_for(tools: set[str]) -> Any:
    """The shipped catalogue that holds every one of these tools."""
    for catalogue in catalogues().values():
        if tools <= {spec.name for spec in catalogue.tools}:
            return catalogue
    raise AssertionError(f"no shipped tool catalogue holds all of {sorted(tools)}")


def _tools_of(document: dict[str, Any]) -> set[str]:
    names = set()
    for step in document.get("steps", []):
        names.add(step["tool"])
        if isinstance(step.get("compensation"), dict):
            names.add(step["compensation"]["tool"])
    return names


def check_definition(document: dict[str, Any]) -> None:
    """Parse a definition with the real loader and validate it against its catalogue."""
    from saga_core.definitions.definition import SagaDefinition
    from saga_core.definitions.validation import validate_definition

    text = yaml.safe_dump(document, sort_keys=False)
    definition = SagaDefinition.from_yaml(text)
    validate_definition(definition, catalogue_for(_tools_of(document)))


DEFINITION_KEYS = {"name", "version", "description", "retry_budget", "budget", "input",
                   "steps", "invariant", "default_retry", "escalation_deadline_s",
                   "max_approval_requests"}


def evaluate_yaml(example: Example) -> None:
    """Load the block as what it is: a definition, part of one, a catalogue, or YAML."""
    from saga_core.definitions.catalogue import ToolCatalogue
    from saga_core.definitions.definition import SagaDefinition

    text = str(example.parsed)
    document = yaml.safe_load(text)
    if isinstance(document, dict) and "steps" in document and "name" in document:
        # A whole definition: through the real loader first (the bounded YAML reader).
        SagaDefinition.from_yaml(text)
        check_definition(document)
    elif isinstance(document, dict) and "tools" in document:
        ToolCatalogue.from_yaml(text)
    elif isinstance(document, dict) and document and set(document) <= DEFINITION_KEYS:
        # Part of a definition: put into the trip and validated as a whole one.
        whole = trip_document()
        for key, value in document.items():
            if key == "input":
                whole["input"] = {**whole["input"], **value}
            else:
                whole[key] = value
        check_definition(whole)
    elif isinstance(document, list) and document and all(
            isinstance(item, dict) and "name" in item for item in document):
        # Entries of a tool catalogue: each replaces its namesake in the shipped catalogue.
        catalogue = catalogue_for({item["name"] for item in document})
        entries = {spec.name: spec.model_dump(mode="json") for spec in catalogue.tools}
        for item in document:
            entries[item["name"]] = {**entries[item["name"]], **item}
        ToolCatalogue.model_validate({"tools": list(entries.values())})
    else:
        assert document is not None, f"{example.path}:{example.line}: an empty YAML block"


# --- command lines ------------------------------------------------------------------------

CONTROL = {"|", "||", "&&", ";", "&", "(", ")"}


@dataclass(frozen=True)
class CommandLine:
    """One ``sagafleet`` invocation found in a shell block: its arguments after the name."""

    argv: tuple[str, ...]
    text: str


def _logical_lines(source: str) -> Iterator[str]:
    """Lines with ``\\`` continuations joined and ``$ `` prompts removed; output lines of a
    ``console`` block (no prompt) are left out when the block has prompts."""
    joined = source.replace("\\\n", " ")
    lines = joined.splitlines()
    prompted = any(line.startswith("$ ") for line in lines)
    for line in lines:
        if prompted:
            if line.startswith("$ "):
                yield line[2:]
        else:
            yield line


def sagafleet_commands(source: str) -> Iterator[CommandLine]:
    """Every ``sagafleet …`` invocation in a shell block, split at pipes, ``&&``, ``;``,
    ``&`` and ``$(…)``, after any ``VAR=value`` prefixes."""
    for line in _logical_lines(source):
        lexer = shlex.shlex(line, posix=True, punctuation_chars="|&;()")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        tokens = list(lexer)
        segment: list[str] = []
        for token in [*tokens, ";"]:
            if "$(" in token:  # a command substitution inside a word: its command too
                yield from sagafleet_commands(token[token.index("$(") + 2:token.rindex(")")])
            if token not in CONTROL:
                segment.append(token)
                continue
            words = [w for w in segment if not re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", w)]
            if words[:1] == ["export"]:
                words = []
            if words and Path(words[0]).name == "sagafleet":
                yield CommandLine(tuple(words[1:]), line.strip())
            segment = []


def not_yet_merged(argv: tuple[str, ...]) -> bool:
    """Whether a command line names a command or option of a branch not merged yet."""
    return any(word.split("=", 1)[0] in NOT_YET_MERGED for word in argv)


class ParserRefused(AssertionError):
    """The CLI's parser refused a documented command line."""


def parse_command_line(argv: tuple[str, ...]) -> argparse.Namespace:
    """Parse with the real ``sagafleet`` parser; a refusal is an AssertionError with argparse's
    message (its usage text goes nowhere)."""
    from sagafleet.cli import build_parser

    parser = build_parser()
    messages: list[str] = []

    def refuse(message: str) -> None:
        messages.append(message)
        raise ParserRefused(message)

    for sub in _all_parsers(parser):
        sub.error = refuse  # type: ignore[method-assign]
        sub.exit_on_error = False
    try:
        return parser.parse_args(list(argv))
    except argparse.ArgumentError as exc:
        raise ParserRefused(str(exc)) from None
    except SystemExit as exc:  # --help or --version: documented, and fine
        if exc.code not in (0, None):
            raise ParserRefused(f"exit {exc.code}: {messages}") from None
        return argparse.Namespace()


def _all_parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _all_parsers(sub)


def evaluate_shell(example: Example) -> None:
    """Parse every ``sagafleet`` command line of the block."""
    problems = []
    for command in sagafleet_commands(str(example.parsed)):
        if not_yet_merged(command.argv):
            continue
        try:
            parse_command_line(command.argv)
        except ParserRefused as exc:
            problems.append(f"  {command.text}\n    -> {exc}")
    assert not problems, (f"{example.path}:{example.line}: the CLI refuses a documented "
                          "command line:\n" + "\n".join(problems))


# --- the collection -----------------------------------------------------------------------

SHELLS = ("sh", "console", "bash")


def docs_sybil() -> Sybil:
    """Sybil with one parser per checked language."""
    parsers = [CodeBlockParser("python", evaluate_python),
               CodeBlockParser("yaml", evaluate_yaml),
               *(CodeBlockParser(language, evaluate_shell) for language in SHELLS)]
    return Sybil(parsers=parsers, path=str(ROOT))


def parsed(path: Path) -> Document:
    return docs_sybil().parse(path)
