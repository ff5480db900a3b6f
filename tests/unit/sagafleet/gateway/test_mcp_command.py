"""``sagafleet mcp`` decides who it acts as before it touches any server: the token does."""

from __future__ import annotations

import pytest

from sagafleet import cli
from sagafleet.exit_codes import ExitCode


@pytest.fixture
def bare(monkeypatch: pytest.MonkeyPatch, tmp_path):  # type: ignore[no-untyped-def]
    """No servers and no token: any embedded server would appear under ``tmp_path``."""
    monkeypatch.setenv("SAGAFLEET_HOME", str(tmp_path))
    for name in ("SAGAFLEET_TOKEN", "SAGAFLEET_DATABASE_URL", "SAGAFLEET_BROKER_URL"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def test_stdio_without_a_token_refuses_to_start_with_exit_11(bare, capsys) -> None:
    # when the stdio server is started with no token
    code = cli.main(["mcp"])
    # then it exits 11 naming where a token comes from, and started nothing at all
    assert code == ExitCode.UNAUTHENTICATED
    err = capsys.readouterr().err
    assert "SAGAFLEET_TOKEN" in err and "--token-file" in err and "Traceback" not in err
    assert not any(bare.iterdir())


def test_a_missing_token_file_is_refused_the_same_way(bare, capsys) -> None:
    code = cli.main(["mcp", "--token-file", str(bare / "absent")])
    assert code == ExitCode.UNAUTHENTICATED
    assert "absent" in capsys.readouterr().err
    assert [p.name for p in bare.iterdir()] == []


def test_http_takes_each_requests_token_so_a_token_file_is_a_usage_error(bare, capsys) -> None:
    code = cli.main(["mcp", "--http", "127.0.0.1:8765", "--token-file", "t"])
    assert code == ExitCode.USAGE
    assert "Authorization: Bearer" in capsys.readouterr().err
    assert not any(bare.iterdir())


@pytest.mark.parametrize("gone", ["--tenant", "--actor", "--trust-headers"])
def test_the_flags_that_chose_tenant_and_actor_are_gone(bare, gone) -> None:
    # the principal decides: these are no longer options of `sagafleet mcp`
    with pytest.raises(SystemExit) as done:
        cli.main(["mcp", gone, "acme"] if gone != "--trust-headers" else ["mcp", gone])
    assert done.value.code == ExitCode.USAGE
