"""scripts/mutation.py on a tiny module: it makes the mutants it says, writes them only into
a copy, and tells a killed mutant from a survivor by running the copy's tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))

import mutation  # noqa: E402

TINY = '''"""A limit check."""


def within(amount: int, limit: int) -> bool:
    """Whether amount stays within limit."""
    return amount <= limit and not amount < 0
'''

TINY_TEST = '''from tiny_core.tiny import within


def test_within_at_and_around_the_limit():
    assert within(10, 10) and within(9, 10) and not within(11, 10)
'''


def _tiny_project(root: Path, **more_tests: str) -> None:
    """The tiny module and its boundary test (and ``more_tests``, by module name) at root."""
    (root / "tiny_core").mkdir()
    (root / "tiny_core" / "__init__.py").write_text("")
    (root / "tiny_core" / "tiny.py").write_text(TINY)
    (root / "tests").mkdir()
    for name, text in {"test_tiny": TINY_TEST, **more_tests}.items():
        (root / "tests" / f"{name}.py").write_text(text)


def test_the_mutants_of_a_tiny_module_are_the_operators_it_holds() -> None:
    found = [(m.operator, m.description) for m in mutation.mutants_of("tiny.py", TINY)]
    assert found == [
        ("boolop", "and -> or"),
        ("compare", "< -> <="),
        ("compare", "<= -> <"),
        ("not", "not x -> x"),
        ("number", "0 -> 1"),
    ]  # no early return: the body already is one
    compare = next(m for m in mutation.mutants_of("tiny.py", TINY) if m.description == "<= -> <")
    assert "return (amount < limit) and not amount < 0" in compare.source
    assert '"""A limit check."""' in compare.source  # the rest of the file as written


def test_a_run_kills_a_caught_mutant_and_reports_a_survivor_without_touching_the_tree(
        tmp_path: Path) -> None:
    # given a tiny project: a module and a test that pins its boundary (not the sign check)
    _tiny_project(tmp_path)
    mutants = [m for m in mutation.mutants_of("tiny_core/tiny.py", TINY)
               if m.description in ("<= -> <", "< -> <=")]
    # when both run on a copy
    results = mutation.run_mutants(mutants, mutation.every_stage([["tests"]]), 1, 120, 1,
                                   progress=False,
                                   root=tmp_path, names=("tiny_core", "tests"))
    # then the boundary flip is killed by the test, the sign check's flip survives
    verdicts = {r.description: (r.verdict, r.killed_by) for r in results}
    assert verdicts["<= -> <"] == (
        "killed", "tests/test_tiny.py::test_within_at_and_around_the_limit")
    assert verdicts["< -> <="] == ("survived", "")
    assert mutation.scores(results) == {"tiny_core/tiny.py": {
        "mutants": 2, "killed": 1, "timeout": 0, "survived": 1, "score": 50.0}}
    assert (tmp_path / "tiny_core" / "tiny.py").read_text() == TINY  # the tree is untouched


def test_the_hand_made_mutations_still_find_their_lines() -> None:
    for hand in mutation.HAND:
        mutant = mutation.hand_mutant(hand)
        assert hand.after in mutant.source and mutant.operator == "hand"


@pytest.mark.parametrize(("argv", "message"), [
    ([], "name what to mutate"),
    (["--modules", "saga_core/nope.py"], "no Python module"),
    (["--modules", "workers/executor.py"], "only saga_core is mutated"),
    (["--jobs", "0", "--deciding"], "--jobs must be at least 1"),
])
def test_bad_arguments_are_refused_by_name(argv: list[str], message: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert mutation.main([*argv, "--list"]) == mutation.EXIT_USAGE
    assert message in capsys.readouterr().err


def test_a_mutant_runs_the_tests_that_reach_its_lines_quickest_first() -> None:
    reach = mutation.Reach(
        tests={"m.py": {10: ["t::slow", "t::quick"], 11: ["t::other"], 12: []}},
        on_import={"m.py": {3}}, durations={"t::slow": 5.0, "t::quick": 0.1, "t::other": 1.0})

    def mutant(line: int, end_line: int) -> mutation.Mutant:
        return mutation.Mutant("m.py", line, "compare", "< -> <=", "", end_line)

    assert reach.select(mutant(10, 10)) == ["t::quick", "t::slow"]
    assert reach.select(mutant(10, 11)) == ["t::quick", "t::other", "t::slow"]  # both lines
    assert reach.select(mutant(12, 12)) == []  # no test reaches it: survives without a run
    assert not reach.runs_on_import(mutant(10, 12))
    assert reach.runs_on_import(mutant(2, 3))  # a survivor of its tests runs every suite


WEAK_TEST = '''from tiny_core.tiny import within


def test_well_within():
    assert within(5, 10)
'''


@pytest.mark.parametrize("on_import", [False, True])
def test_a_survivor_of_the_tests_reaching_a_line_run_on_import_runs_every_suite(
        tmp_path: Path, on_import: bool) -> None:
    # given a tiny project whose weak test reaches the line (as far as the reach knows) and
    # whose boundary test does not
    _tiny_project(tmp_path, test_weak=WEAK_TEST)
    weak = "tests/test_weak.py::test_well_within"
    reach = mutation.Reach(tests={"tiny_core/tiny.py": {6: [weak]}},
                           on_import={"tiny_core/tiny.py": {6} if on_import else set()},
                           durations={weak: 0.1})
    flip = next(m for m in mutation.mutants_of("tiny_core/tiny.py", TINY)
                if m.description == "<= -> <")
    # when the boundary flip runs with that reach
    [result] = mutation.run_mutants([flip], reach.behind_every_suite([["tests"]]), 1, 120, 1,
                                    progress=False, root=tmp_path, names=("tiny_core", "tests"))
    # then the weak test alone lets it survive; on a line run on import every suite runs
    # after it, and the boundary test kills it
    if on_import:
        assert (result.verdict, result.tests) == ("killed", -1)
        assert result.killed_by == "tests/test_tiny.py::test_within_at_and_around_the_limit"
    else:
        assert (result.verdict, result.tests) == ("survived", 1)


def test_a_mutant_on_a_line_run_on_import_killed_by_its_reaching_tests_runs_no_more(
        tmp_path: Path) -> None:
    _tiny_project(tmp_path)
    boundary = "tests/test_tiny.py::test_within_at_and_around_the_limit"
    reach = mutation.Reach(tests={"tiny_core/tiny.py": {6: [boundary]}},
                           on_import={"tiny_core/tiny.py": {6}}, durations={boundary: 0.1})
    flip = next(m for m in mutation.mutants_of("tiny_core/tiny.py", TINY)
                if m.description == "<= -> <")
    nowhere = reach.behind_every_suite([["tests/nowhere"]])
    [result] = mutation.run_mutants([flip], nowhere, 1, 120, 1, progress=False, root=tmp_path,
                                    names=("tiny_core", "tests"))
    # killed by the one test that reaches it; the stages (here a path that does not exist,
    # which would fail as a collection error) never ran
    assert (result.verdict, result.killed_by, result.tests) == ("killed", boundary, 1)


def test_the_reach_of_a_tiny_project_names_the_test_of_each_line(tmp_path: Path) -> None:
    _tiny_project(tmp_path)
    copy = mutation.Copy(tmp_path, ("tiny_core", "tests"))
    try:
        reach = mutation.measure_reach(copy, ["tests"], 1, package="tiny_core")
    finally:
        copy.remove()
    test = "tests/test_tiny.py::test_within_at_and_around_the_limit"
    assert reach.tests["tiny_core/tiny.py"][6] == [test]  # the body: the test that calls it
    assert 4 in reach.on_import["tiny_core/tiny.py"]  # the def line: run on import
    assert set(reach.durations) == {test}
    # and a run with the reach kills the boundary flip through that one test
    flip = next(m for m in mutation.mutants_of("tiny_core/tiny.py", TINY)
                if m.description == "<= -> <")
    [result] = mutation.run_mutants([flip], reach.behind_every_suite([["tests"]]), 1, 120, 1,
                                    progress=False, root=tmp_path, names=("tiny_core", "tests"))
    assert (result.verdict, result.tests) == ("killed", 1)


def test_on_import_module_runs_the_other_tests_of_the_module_after_the_reaching_ones(
        tmp_path: Path) -> None:
    _tiny_project(tmp_path, test_weak=WEAK_TEST)
    weak = "tests/test_weak.py::test_well_within"
    boundary = "tests/test_tiny.py::test_within_at_and_around_the_limit"
    # the boundary test reaches the module (another line), not the mutated line
    reach = mutation.Reach(tests={"tiny_core/tiny.py": {6: [weak], 4: [boundary]}},
                           on_import={"tiny_core/tiny.py": {6}},
                           durations={weak: 0.1, boundary: 0.2})
    assert reach.module_tests("tiny_core/tiny.py") == [weak, boundary]
    flip = next(m for m in mutation.mutants_of("tiny_core/tiny.py", TINY)
                if m.description == "<= -> <")
    [result] = mutation.run_mutants([flip], reach.behind_module_tests(), 1, 120, 1,
                                    progress=False, root=tmp_path,
                                    names=("tiny_core", "tests"))
    assert (result.verdict, result.killed_by, result.tests) == ("killed", boundary, 2)
