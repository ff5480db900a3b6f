"""The console command behaves as command-line users expect: --version, every variable in
--help, usage errors exit 2 with one line, Ctrl-C exits 130 — before any server is touched."""

from __future__ import annotations

import argparse

import pytest

from sagafleet import cli
from sagafleet.exit_codes import ExitCode
from sagafleet.settings import Settings


def test_version_prints_the_installed_version_and_exits_zero(capsys) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith("sagafleet ")


def test_help_names_every_settings_variable_with_its_default(capsys) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    shown = capsys.readouterr().out
    for name in Settings.model_fields:
        assert f"SAGAFLEET_{name.upper()} [" in shown, name
    assert "130  interrupted" in shown


@pytest.mark.parametrize("argv", [
    ["demo", "--sagas", "0"],
    ["worker", "--concurrency", "0"],
    ["mcp", "--http", "no-port-here"],
])
def test_an_out_of_range_option_is_a_usage_error_exit_2_with_one_line(
    argv: list[str], capsys, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    # given no servers at all: the option is refused before anything would start one
    monkeypatch.setenv("SAGAFLEET_HOME", str(tmp_path))
    code = cli.main(argv)
    assert code == ExitCode.USAGE
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert not any(tmp_path.iterdir())  # no embedded server was started


def test_ctrl_c_exits_130(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(args: argparse.Namespace, settings: Settings) -> int:
        raise KeyboardInterrupt

    parser = cli.build_parser()
    real_parse = parser.parse_args

    def parse(argv: list[str]) -> argparse.Namespace:
        args = real_parse(argv)
        args.handler = interrupted
        return args

    monkeypatch.setattr(parser, "parse_args", parse)
    monkeypatch.setattr(cli, "build_parser", lambda argv=None: parser)
    assert cli.main(["db", "url"]) == ExitCode.INTERRUPTED == 130
