"""A feature whose extra is not installed stops with one line naming the extra (exit 2),
never an ImportError from deep inside: the MCP gateway (``mcp``) and Sentry (``sentry``).
The default install leaves both out; here their absence is made by blocking the import."""

from __future__ import annotations

import sys

import pytest

from application.telemetry.sentry import init_sentry
from saga_core.errors import MissingExtra
from sagafleet.cli import main
from sagafleet.exit_codes import ExitCode


@pytest.mark.parametrize("argv", [["tools", "export"], ["mcp"], ["mcp", "--http", "127.0.0.1:1"]])
def test_the_gateway_commands_name_the_mcp_extra(argv, monkeypatch, capsys) -> None:
    # given an install without the mcp extra
    monkeypatch.setitem(sys.modules, "mcp", None)
    # when a gateway command runs
    code = main(argv)
    # then it exits 2 with one line naming the pip command
    err = capsys.readouterr().err.strip()
    assert code == ExitCode.USAGE
    assert "\n" not in err and "pip install 'sagafleet[mcp]'" in err


def test_a_sentry_dsn_without_the_sentry_extra_is_refused_not_ignored(monkeypatch) -> None:
    # given an install without sentry-sdk
    monkeypatch.setitem(sys.modules, "sentry_sdk", None)
    # then a configured DSN stops the process, naming the extra
    with pytest.raises(MissingExtra, match=r"pip install 'sagafleet\[sentry\]'"):
        init_sentry("http://public@127.0.0.1:9/1", component="worker")
    # and no DSN needs nothing
    assert init_sentry(None, component="worker") is False
