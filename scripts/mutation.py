"""A small mutation tester for ``saga_core``: change one operator, run the tests, count.

Each mutant is one small change to one module, made on the parsed source (``ast``):

=================  ===========================================================
operator           change
=================  ===========================================================
``compare``        ``<`` ↔ ``<=``, ``>`` ↔ ``>=``, ``==`` ↔ ``!=``, ``is`` ↔ ``is not``,
                   ``in`` ↔ ``not in`` (each operator of a chain on its own)
``boolop``         ``and`` ↔ ``or``
``not``            ``not x`` → ``x``
``bool``           ``True`` ↔ ``False``
``number``         an integer constant ``n`` → ``n + 1``
``minmax``         ``min(...)`` ↔ ``max(...)``
``return``         a function returns at once (``return None`` before its body)
=================  ===========================================================

Only the changed expression's text is replaced (in parentheses), so the rest of the file,
comments included, stays as written. A mutant is written into a temporary copy of the
project, never into the working tree, and tests run on that copy (``-x``: the first failure
kills it) with a timeout; a mutant whose tests time out is counted as killed (``timeout``),
as is one that no longer imports.

Which tests: the unit, test-kit and model suites, once, under coverage, with each test in a
context of its own (``scripts/mutation_contexts.py``) give every line of ``saga_core`` the
tests that reach it. A mutant then runs only those, quickest first; one on a line no test
reaches survives without a run (reported as such). A line that runs on import (a constant,
a default, a class body, a check called while a module builds its models) can reach any
test, so a mutant there that survives the tests reaching the line runs every suite too: a
kill is a kill whichever test makes it, but only every suite can say it survives.
``--on-import module`` runs, in place of every suite, the tests that reach any line of the
mutant's module: much faster for a package's score, but a change another module reads at
import (a constant imported by name) may go unseen, so that score is a lower bound.
``--no-select`` runs every suite for every mutant, in two stages, as a check of the
selection.

::

    python scripts/mutation.py --hand               # the issue's four hand-made mutations
    python scripts/mutation.py --deciding --jobs 1  # claims, decide, state, gates, ...
    python scripts/mutation.py --modules saga_core/keys.py --json
    python scripts/mutation.py --list --modules saga_core/engine/claims.py

Not for CI: the coverage run takes a few minutes, and a mutant from two seconds (killed by
its first test) to the time its reaching tests take together (a survivor on the fold's hot
lines: about a minute on a 2-core machine).
Exit codes: 0 done (survivors are reported, not failures), 2 bad arguments, 3 the tests do
not pass on the unmutated copy (nothing to measure against).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from coverage import CoverageData

ROOT = Path(__file__).resolve().parent.parent

EXIT_OK, EXIT_USAGE, EXIT_BASELINE = 0, 2, 3

#: The modules that decide (issue 36), by the names the issue gives them.
DECIDING = {
    "claims": "saga_core/engine/claims.py",
    "decide": "saga_core/engine/decide.py",
    "state": "saga_core/engine/state.py",
    "gates": "saga_core/approval/risk_gates.py",
    "gate policy": "saga_core/approval/policy.py",
    "authority": "saga_core/access/roles.py",
    "authority: who may answer a request": "saga_core/approval/answers.py",
    "plans": "saga_core/agents/plans.py",
    "stops": "saga_core/engine/stops.py",
    "keys": "saga_core/keys.py",
}

#: What the copy leaves out of the project (tests read the README, docs, examples, ...).
NOT_COPIED = {".git", ".venv", ".sagafleet", ".hypothesis", ".mypy_cache", ".ruff_cache",
              "sagafleet.egg-info"}
#: What the copy holds: everything else at the project's top level.
COPIED = tuple(sorted(p.name for p in ROOT.iterdir() if p.name not in NOT_COPIED))
#: The tests that guard saga_core, and the parts of them the runs name: the unit tests (the
#: model-based test among them) and the test kit's. Every suite and stage below is cut from
#: these three paths, so together they are always exactly these tests.
UNIT, TESTKIT, MODEL = "tests/unit", "tests/testkit", "tests/unit/model"
#: The unit tests nearest saga_core (most mutants die there, fast).
NEAREST = "tests/unit/saga_core"
#: The suites, by name, as the hand table shows them.
SUITES: dict[str, list[str]] = {
    "unit": [UNIT, f"--ignore={MODEL}"],
    "testkit": [TESTKIT],
    "model": [MODEL],
}
#: Without selection a mutant runs in two stages: first the tests nearest saga_core, the
#: test kit's and the model, then, for a mutant that survived them, the rest of the unit tests.
FIRST_STAGE = [NEAREST, TESTKIT, MODEL]
SECOND_STAGE = [UNIT, f"--ignore={NEAREST}", f"--ignore={MODEL}"]
#: The same tests as one run (the run under coverage that maps lines to tests).
ALL_TESTS = [UNIT, TESTKIT]
#: Examples the model-based test explores per mutant (CI explores more).
MODEL_EXAMPLES = 100
#: Selected tests beyond this many go to pytest through an arguments file (``@file``).
ARGUMENTS_INLINE = 50

_SWAPS: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
    ast.In: ast.NotIn, ast.NotIn: ast.In,
}
_SYMBOL = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==",
           ast.NotEq: "!=", ast.Is: "is", ast.IsNot: "is not", ast.In: "in",
           ast.NotIn: "not in"}


class MutationError(Exception):
    """Bad arguments, or a project the tool cannot measure; the message says which."""


@dataclass(frozen=True)
class Mutant:
    """One change: where, which operator, what it does, and the module's mutated text."""

    module: str
    line: int
    operator: str
    description: str
    source: str = field(repr=False, compare=False)
    #: The last line the change spans (an expression may run over several).
    end_line: int

    @property
    def lines(self) -> range:
        return range(self.line, self.end_line + 1)

    @property
    def ident(self) -> str:
        return f"{self.module}:{self.line} {self.operator}: {self.description}"


@dataclass
class Result:
    """What the tests made of one mutant: killed (by which test), survived, or timed out."""

    module: str
    line: int
    operator: str
    description: str
    verdict: str  # killed | survived | timeout
    killed_by: str = ""
    seconds: float = 0.0
    #: Tests its last run named: -1 every suite (no selection, or a line run on import that
    #: the tests reaching it did not kill), 0 none (no test reaches its line: it survives
    #: unrun).
    tests: int = -1

    @property
    def unreached(self) -> str:
        """What the reports add to a mutant no test reaches."""
        return "  (no test reaches it)" if self.tests == 0 else ""


#: One run of a mutant: its pytest arguments and the tests it names (-1: every suite).
Run = tuple[list[str], int]
#: What a mutant runs, in order, until a run kills it (none: no test reaches it).
Plan = Callable[[Mutant], list[Run]]


def every_stage(stages: list[list[str]]) -> Plan:
    """Every stage for every mutant, each while it survives (no selection)."""
    return lambda mutant: [(stage, -1) for stage in stages]


# -- making mutants


def _segment(lines: list[str], node: ast.expr) -> tuple[int, int, int, int]:
    assert node.end_lineno is not None and node.end_col_offset is not None
    return node.lineno, node.col_offset, node.end_lineno, node.end_col_offset


def _replace(source: str, node: ast.expr, text: str) -> str:
    """``source`` with ``node``'s text replaced by ``text`` in parentheses (columns are
    UTF-8 byte offsets, as ast gives them)."""
    lines = source.splitlines(keepends=True)
    start_line, start_col, end_line, end_col = _segment(lines, node)
    first = lines[start_line - 1].encode()
    last = lines[end_line - 1].encode()
    head = first[:start_col].decode()
    tail = last[end_col:].decode()
    return ("".join(lines[:start_line - 1]) + head + f"({text})" + tail
            + "".join(lines[end_line:]))


def _in_docstring_or_annotation(parents: dict[ast.AST, ast.AST], node: ast.AST) -> bool:
    child, parent = node, parents.get(node)
    while parent is not None:
        if isinstance(parent, (ast.arg, ast.AnnAssign)) and child is getattr(
                parent, "annotation", None):
            return True
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)) and child is parent.returns:
            return True
        child, parent = parent, parents.get(parent)
    return False


def mutants_of(module: str, source: str) -> Iterator[Mutant]:
    """Every mutant of one module's source, in file order."""
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found: list[Mutant] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.expr) and _in_docstring_or_annotation(parents, node):
            continue
        found.extend(_node_mutants(module, source, node))
    yield from sorted(found, key=lambda m: (m.line, m.operator, m.description))


def _node_mutants(module: str, source: str, node: ast.AST) -> Iterator[Mutant]:
    def mutant(expr: ast.expr, operator: str, description: str, new: ast.expr) -> Mutant:
        return Mutant(module, expr.lineno, operator, description,
                      _replace(source, expr, ast.unparse(new)), expr.end_lineno or expr.lineno)

    if isinstance(node, ast.Compare):
        for index, op in enumerate(node.ops):
            swapped = _SWAPS.get(type(op))
            if swapped is None:
                continue
            new = ast.Compare(node.left, [*node.ops[:index], swapped(), *node.ops[index + 1:]],
                              node.comparators)
            yield mutant(node, "compare", f"{_SYMBOL[type(op)]} -> {_SYMBOL[swapped]}", new)
    elif isinstance(node, ast.BoolOp):
        other: ast.boolop = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        names = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
        yield mutant(node, "boolop", f"{names[0]} -> {names[1]}", ast.BoolOp(other, node.values))
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield mutant(node, "not", "not x -> x", node.operand)
    elif isinstance(node, ast.Constant) and isinstance(node.value, bool):
        yield mutant(node, "bool", f"{node.value} -> {not node.value}",
                     ast.Constant(not node.value))
    elif isinstance(node, ast.Constant) and type(node.value) is int:
        yield mutant(node, "number", f"{node.value} -> {node.value + 1}",
                     ast.Constant(node.value + 1))
    elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
          and node.func.id in ("min", "max")):
        other_name = "max" if node.func.id == "min" else "min"
        call = ast.Call(ast.Name(other_name, ast.Load()), node.args, node.keywords)
        yield mutant(node, "minmax", f"{node.func.id} -> {other_name}", call)
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        yield from _return_early(module, source, node)


def _return_early(module: str, source: str,
                  function: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[Mutant]:
    """``return None`` as the first statement after the docstring (not for generators,
    abstract stubs or one-statement bodies that already return)."""
    body = function.body
    first = 1 if (body and isinstance(body[0], ast.Expr)
                  and isinstance(body[0].value, ast.Constant)
                  and isinstance(body[0].value.value, str)) else 0
    if first >= len(body) or any(isinstance(n, (ast.Yield, ast.YieldFrom))
                                 for n in ast.walk(function)):
        return
    statement = body[first]
    if isinstance(statement, (ast.Return, ast.Pass, ast.Raise)) or (
            isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)):
        return
    lines = source.splitlines(keepends=True)
    line = lines[statement.lineno - 1]
    indent = line[:len(line) - len(line.lstrip())]
    mutated = "".join(lines[:statement.lineno - 1]) + f"{indent}return None\n" + "".join(
        lines[statement.lineno - 1:])
    yield Mutant(module, statement.lineno, "return", f"{function.name} returns None at once",
                 mutated, statement.lineno)


# -- the hand-made mutations of issue 36


@dataclass(frozen=True)
class HandMutation:
    """A one-line change the issue made by hand: module, the text before and after."""

    name: str
    module: str
    before: str
    after: str


HAND = (
    HandMutation("claims: re-claim after the lease for any tool", DECIDING["claims"],
                 "if spec is not None and spec.dedupes_by_key:", "if spec is not None:"),
    HandMutation("gates: an amount at the limit asks (> to >=)", DECIDING["gates"],
                 "if amount > Decimal(str(self.limit)):", "if amount >= Decimal(str(self.limit)):"),
    HandMutation("gate policy: the longer TTL wins", DECIDING["gate policy"],
                 "return min(values) if values else", "return max(values) if values else"),
    HandMutation("decide: a denied compensation treated as a denied forward step",
                 DECIDING["decide"],
                 "if run.kind is FORWARD and not state.pivot_passed:\n"
                 "                return _Outcome(rejection=denied)",
                 "if not state.pivot_passed:\n"
                 "                return _Outcome(rejection=denied)"),
)


def hand_mutant(hand: HandMutation) -> Mutant:
    """The hand-made mutation as a mutant (its text must occur exactly once)."""
    source = (ROOT / hand.module).read_text(encoding="utf-8")
    if source.count(hand.before) != 1:
        raise MutationError(f"{hand.module}: expected {hand.before!r} exactly once, found it "
                            f"{source.count(hand.before)} times (the code moved?)")
    line = source[:source.index(hand.before)].count("\n") + 1
    return Mutant(hand.module, line, "hand", hand.name, source.replace(hand.before, hand.after),
                  line + hand.before.count("\n"))


# -- running


class Copy:
    """A temporary copy of the project in which one mutant at a time is written."""

    def __init__(self, root: Path = ROOT, names: Sequence[str] = COPIED) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="sagafleet-mutation-"))
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".sagafleet", "*.egg-info")
        for name in names:
            source = root / name
            if source.is_dir():
                shutil.copytree(source, self.path / name, ignore=ignore)
            else:
                shutil.copy2(source, self.path / name)

    def pytest(self, arguments: Sequence[str], timeout: float, model_examples: int, *,
               prefix: Sequence[str] = ("-m",), env: dict[str, str] | None = None,
               ) -> subprocess.CompletedProcess[str] | None:
        """pytest on the copy (None: it ran past ``timeout``); many arguments go through an
        arguments file, so a hot line's thousand tests fit any command line."""
        if len(arguments) > ARGUMENTS_INLINE:
            listed = self.path / ".mutation-arguments"
            listed.write_text("\n".join(arguments) + "\n", encoding="utf-8")
            arguments = [f"@{listed}"]
        environment = {**os.environ, "PYTHONPATH": str(self.path),
                       "PYTHONDONTWRITEBYTECODE": "1",
                       "SAGAFLEET_MODEL_EXAMPLES": str(model_examples),
                       "SAGAFLEET_MODEL_SHRINK": "0",  # caught is enough: no time shrinking
                       **(env or {})}
        command = [sys.executable, *prefix, "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
                   "--no-header", "-o", "addopts=", *arguments]
        try:
            return subprocess.run(command, cwd=self.path, env=environment, capture_output=True,
                                  text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return None

    def run(self, mutant: Mutant | None, suite: Sequence[str], timeout: float,
            model_examples: int) -> tuple[str, str, float]:
        """Run ``suite`` with ``mutant`` written in; (verdict, first failing test, seconds)."""
        target = self.path / mutant.module if mutant is not None else None
        original = target.read_text(encoding="utf-8") if target is not None else ""
        if mutant is not None and target is not None:
            target.write_text(mutant.source, encoding="utf-8")
        started = time.monotonic()
        try:
            done = self.pytest(["-x", *suite], timeout, model_examples)
        finally:
            if target is not None:
                target.write_text(original, encoding="utf-8")
        seconds = time.monotonic() - started
        if done is None:
            return "timeout", "", seconds
        if done.returncode == 0:
            return "survived", "", seconds
        return "killed", _first_failure(done.stdout + done.stderr), seconds

    def check_imports_from_copy(self) -> None:
        """The copy's saga_core is the one imported, not the installed working tree's."""
        env = {**os.environ, "PYTHONPATH": str(self.path)}
        done = subprocess.run([sys.executable, "-c", "import saga_core; print(saga_core.__file__)"],
                              cwd=self.path, env=env, capture_output=True, text=True, check=False)
        if not done.stdout.strip().startswith(str(self.path)):
            raise MutationError(f"the copy imports saga_core from {done.stdout.strip()!r}, "
                                f"not from {self.path}: mutants would not be tested")

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def _first_failure(output: str) -> str:
    for line in output.splitlines():
        if line.startswith(("FAILED ", "ERROR ")):
            return line.split(" ", 1)[1].split(" - ")[0]
    return "(collection or import error)"


# -- which tests reach which line


@dataclass
class Reach:
    """Which tests reach each line of the measured package, from one run under coverage.

    ``tests[module][line]`` are node ids; ``on_import[module]`` the lines that ran outside any
    test (on import, at collection); ``durations`` each test's seconds in that run.
    """

    tests: dict[str, dict[int, list[str]]]
    on_import: dict[str, set[int]]
    durations: dict[str, float]
    seconds: float = 0.0

    def select(self, mutant: Mutant) -> list[str]:
        """The tests that reach ``mutant``'s lines while they run, quickest first; ``[]``
        when none does."""
        by_line = self.tests.get(mutant.module, {})
        return self._quickest_first({t for line in mutant.lines for t in by_line.get(line, ())})

    def module_tests(self, module: str) -> list[str]:
        """The tests that reach any line of ``module`` while they run, quickest first."""
        return self._quickest_first(
            {test for tests in self.tests.get(module, {}).values() for test in tests})

    def _quickest_first(self, tests: set[str]) -> list[str]:
        return sorted(tests, key=lambda test: (self.durations.get(test, 0.0), test))

    def runs_on_import(self, mutant: Mutant) -> bool:
        """Whether a line of ``mutant`` runs on import: any test may then see the change."""
        return any(line in self.on_import.get(mutant.module, ()) for line in mutant.lines)

    def behind_every_suite(self, stages: list[list[str]]) -> Plan:
        """The tests reaching a mutant's lines; for a line run on import that they did not
        kill, then every stage (a kill is a kill whichever test makes it, but only every
        suite can say that a mutant a test may see on import survives)."""
        def plan(mutant: Mutant) -> list[Run]:
            runs = self._reaching(mutant)
            return runs + [(stage, -1) for stage in stages] if self.runs_on_import(mutant) \
                else runs
        return plan

    def behind_module_tests(self) -> Plan:
        """As :meth:`behind_every_suite`, with the other tests that reach the mutant's module
        in place of every stage: faster, and a lower bound of the score."""
        def plan(mutant: Mutant) -> list[Run]:
            runs = self._reaching(mutant)
            if not self.runs_on_import(mutant):
                return runs
            selected = runs[0][0] if runs else []
            rest = [t for t in self.module_tests(mutant.module) if t not in selected]
            return runs + [(rest, len(selected) + len(rest))] if rest else runs
        return plan

    def _reaching(self, mutant: Mutant) -> list[Run]:
        selected = self.select(mutant)
        return [(selected, len(selected))] if selected else []


def measure_reach(copy: Copy, suites: Sequence[str], model_examples: int,
                  package: str = "saga_core") -> Reach:
    """Run ``suites`` once under coverage on the unmutated copy, each test in its own
    context; MutationError when they do not pass there."""
    data_file = copy.path / ".mutation-coverage"
    durations_file = copy.path / ".mutation-durations.json"
    started = time.monotonic()
    done = copy.pytest(
        ["-p", "mutation_contexts", *suites], 3 * 3600, model_examples,
        prefix=("-m", "coverage", "run", f"--data-file={data_file}", f"--source={package}",
                "-m"),
        env={"PYTHONPATH": os.pathsep.join([str(copy.path), str(Path(__file__).parent)]),
             "SAGAFLEET_MUTATION_DURATIONS": str(durations_file),
             "SAGAFLEET_MUTATION_PACKAGE": package})
    seconds = time.monotonic() - started
    if done is None or done.returncode != 0:
        output = "" if done is None else done.stdout + done.stderr
        raise MutationError(f"the tests fail on the unmutated copy ({_first_failure(output)}): "
                            f"fix them")
    # Only a node id pytest can be given back selects a test; a line whose tests cannot be
    # named that way runs every suite.
    listed = copy.pytest(["--collect-only", *suites], 600, model_examples)  # -q: node ids
    if listed is None or listed.returncode != 0:
        raise MutationError("the tests' node ids could not be listed (pytest --collect-only "
                            "failed or timed out on the unmutated copy)")
    known = {line.strip() for line in listed.stdout.splitlines() if "::" in line}
    data = CoverageData(basename=str(data_file))
    data.read()
    tests: dict[str, dict[int, list[str]]] = {}
    on_import: dict[str, set[int]] = {}
    for measured in data.measured_files():
        module = str(Path(measured).resolve().relative_to(copy.path.resolve()))
        for line, contexts in data.contexts_by_lineno(measured).items():
            named = [context for context in contexts if context in known]
            if len(named) < len(contexts):
                on_import.setdefault(module, set()).add(line)
            tests.setdefault(module, {})[line] = named
    durations = json.loads(durations_file.read_text(encoding="utf-8"))
    return Reach(tests, on_import, durations, round(seconds, 1))


def run_mutants(mutants: list[Mutant], plan: Plan, jobs: int, timeout: float,
                model_examples: int, progress: bool, *, root: Path = ROOT,
                names: Sequence[str] = COPIED) -> list[Result]:
    """Run every mutant on ``jobs`` copies of the project, each run of its ``plan`` while it
    survives; results in the mutants' order."""
    copies = [Copy(root, names) for _ in range(jobs)]
    try:
        if root == ROOT:
            copies[0].check_imports_from_copy()
        free = list(copies)

        def one(mutant: Mutant) -> Result:
            verdict, by, seconds, tests = "survived", "", 0.0, 0
            copy = free.pop()
            try:
                for suite, named in plan(mutant):
                    verdict, by, took = copy.run(mutant, suite, timeout, model_examples)
                    seconds, tests = seconds + took, named
                    if verdict != "survived":
                        break
            finally:
                free.append(copy)
            result = Result(mutant.module, mutant.line, mutant.operator, mutant.description,
                            verdict, by, round(seconds, 1), tests=tests)
            if progress:
                print(f"  {verdict:8} {seconds:6.1f}s {mutant.ident}"
                      + (f"  [{by}]" if by else "") + result.unreached, file=sys.stderr,
                      flush=True)
            return result

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            return list(pool.map(one, mutants))
    finally:
        for copy in copies:
            copy.remove()


def baseline(stages: list[list[str]], model_examples: int) -> float:
    """Seconds the longest stage takes unmutated; MutationError when one does not pass."""
    copy = Copy()
    longest = 0.0
    try:
        copy.check_imports_from_copy()
        for suite in stages:
            verdict, by, seconds = copy.run(None, suite, 3600, model_examples)
            if verdict != "survived":
                raise MutationError(f"the tests fail on the unmutated copy ({by}): fix them")
            longest = max(longest, seconds)
    finally:
        copy.remove()
    return longest


def reach_of_suites(model_examples: int) -> Reach:
    """The reach of the unit, test-kit and model suites over saga_core, measured on a copy."""
    copy = Copy()
    try:
        copy.check_imports_from_copy()
        return measure_reach(copy, ALL_TESTS, model_examples)
    finally:
        copy.remove()


def scores(results: list[Result]) -> dict[str, dict[str, object]]:
    """Per module: mutants, killed (timeouts included), survived, score in percent."""
    table: dict[str, dict[str, object]] = {}
    for result in results:
        row = table.setdefault(result.module, {"mutants": 0, "killed": 0, "timeout": 0,
                                               "survived": 0})
        row["mutants"] = int(str(row["mutants"])) + 1
        row[result.verdict] = int(str(row[result.verdict])) + 1
    for row in table.values():
        caught = int(str(row["killed"])) + int(str(row["timeout"]))
        row["score"] = round(100 * caught / int(str(row["mutants"])), 1)
    return table


def run_hand(suites: list[str], jobs: int, model_examples: int) -> list[dict[str, object]]:
    """Each hand-made mutation against each suite on its own: which suites catch it."""
    rows: list[dict[str, object]] = []
    mutants = [hand_mutant(hand) for hand in HAND]
    for suite_name in suites:
        suite = SUITES[suite_name]
        results = run_mutants(mutants, every_stage([suite]), jobs, 1800, model_examples,
                              progress=True)
        for hand, result in zip(HAND, results, strict=True):
            row = next((r for r in rows if r["mutation"] == hand.name), None)
            if row is None:
                row = {"mutation": hand.name, "module": hand.module}
                rows.append(row)
            row[suite_name] = result.verdict
            row[f"{suite_name}_by"] = result.killed_by
    return rows


# -- the command line


def _modules(args: argparse.Namespace) -> list[str]:
    chosen = list(args.modules or [])
    if args.deciding:
        chosen += DECIDING.values()
    if args.all:
        chosen += sorted(str(p.relative_to(ROOT)) for p in (ROOT / "saga_core").rglob("*.py")
                         if p.name != "__init__.py")
    if not chosen:
        raise MutationError("name what to mutate: --modules PATH..., --deciding, --all or --hand")
    known = []
    for module in dict.fromkeys(chosen):
        path = ROOT / module
        if not path.is_file() or path.suffix != ".py":
            raise MutationError(f"no Python module {module!r} under {ROOT}")
        if not path.resolve().is_relative_to(ROOT / "saga_core"):
            raise MutationError(f"{module!r} is not in saga_core: only saga_core is mutated")
        known.append(module)
    return known


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modules", nargs="+", metavar="PATH",
                        help="saga_core modules to mutate (paths from the project root)")
    parser.add_argument("--deciding", action="store_true",
                        help="the deciding modules: " + ", ".join(DECIDING))
    parser.add_argument("--all", action="store_true", help="every module of saga_core")
    parser.add_argument("--hand", action="store_true",
                        help="the issue's four hand-made mutations, against each suite")
    parser.add_argument("--list", action="store_true", help="list the mutants; run nothing")
    parser.add_argument("--jobs", type=int, default=1, help="mutants run at once (default 1)")
    parser.add_argument("--suite", nargs="+", choices=list(SUITES), default=list(SUITES),
                        help="--hand: the suites to show (default all); a mutation run "
                             "always runs unit, test-kit and model tests, in two stages")
    parser.add_argument("--model-examples", type=int, default=MODEL_EXAMPLES,
                        help=f"examples of the model test per mutant (default {MODEL_EXAMPLES})")
    parser.add_argument("--limit", type=int, help="only the first N mutants (a quick look)")
    parser.add_argument("--no-select", action="store_true",
                        help="every suite for every mutant, not only the tests that reach "
                             "its line (slow; a check of the selection)")
    parser.add_argument("--on-import", choices=["every", "module"], default="every",
                        help="what a mutant on a line run on import runs after surviving the "
                             "tests that reach the line: every suite (default), or the tests "
                             "that reach its module (faster; a change another module reads "
                             "at import may go unseen, so its score is a lower bound)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    try:
        if args.jobs < 1:
            raise MutationError(f"--jobs must be at least 1, got {args.jobs}")
        if args.hand:
            rows = run_hand(args.suite, args.jobs, args.model_examples)
            print(json.dumps({"hand": rows}, indent=2) if args.json
                  else _hand_table(rows, args.suite))
            return EXIT_OK
        mutants = [m for module in _modules(args)
                   for m in mutants_of(module, (ROOT / module).read_text(encoding="utf-8"))]
        if args.limit is not None:
            mutants = mutants[:args.limit]
        if args.list:
            for mutant in mutants:
                print(mutant.ident)
            print(f"{len(mutants)} mutants", file=sys.stderr)
            return EXIT_OK
        stages = [FIRST_STAGE, SECOND_STAGE]
        if args.no_select:
            plan, took = every_stage(stages), baseline(stages, args.model_examples)
            print(f"baseline {took:.1f}s", file=sys.stderr)
        else:
            reach = reach_of_suites(args.model_examples)
            plan = (reach.behind_module_tests() if args.on_import == "module"
                    else reach.behind_every_suite(stages))
            took = reach.seconds
            print(f"reach: {len(reach.durations)} tests over saga_core under coverage in "
                  f"{took:.1f}s", file=sys.stderr)
        timeout = max(60.0, 3 * took)
        print(f"timeout per mutant {timeout:.0f}s, {len(mutants)} mutants", file=sys.stderr)
        started = time.monotonic()
        # Progress goes to stderr either way: a long run cut short still shows each verdict.
        results = run_mutants(mutants, plan, args.jobs, timeout, args.model_examples,
                              progress=True)
        elapsed = time.monotonic() - started
    except MutationError as error:
        print(f"mutation: {error}", file=sys.stderr)
        return EXIT_BASELINE if "unmutated" in str(error) else EXIT_USAGE
    table = scores(results)
    if args.json:
        print(json.dumps({"seconds": round(elapsed), "baseline_s": round(took, 1),
                          "on_import": args.on_import,
                          "modules": table, "results": [asdict(r) for r in results]}, indent=2))
    else:
        print(_score_table(table, results, elapsed))
    return EXIT_OK


def _hand_table(rows: list[dict[str, object]], suites: list[str]) -> str:
    lines = [f"{'mutation':66} " + " ".join(f"{s:9}" for s in suites)]
    for row in rows:
        lines.append(f"{row['mutation']:66} " + " ".join(
            f"{'caught' if row[s] != 'survived' else 'MISSED':9}" for s in suites))
        for suite in suites:
            if row.get(f"{suite}_by"):
                lines.append(f"    {suite}: {row[f'{suite}_by']}")
    return "\n".join(lines)


def _score_table(table: dict[str, dict[str, object]], results: list[Result],
                 elapsed: float) -> str:
    lines = [f"{'module':42} {'mutants':>7} {'killed':>6} {'timeout':>7} {'survived':>8} "
             f"{'score':>6}"]
    for module, row in table.items():
        lines.append(f"{module:42} {row['mutants']:>7} {row['killed']:>6} {row['timeout']:>7} "
                     f"{row['survived']:>8} {row['score']:>5}%")
    lines.append(f"took {elapsed / 60:.1f} min")
    survivors = [r for r in results if r.verdict == "survived"]
    if survivors:
        lines.append("survivors:")
        lines += [f"  {r.module}:{r.line} {r.operator}: {r.description}{r.unreached}"
                  for r in survivors]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
