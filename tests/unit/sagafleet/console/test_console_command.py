"""``sagafleet console`` checks how it was asked to listen before it starts anything."""

from __future__ import annotations

import pytest

from sagafleet import cli
from sagafleet.exit_codes import ExitCode


@pytest.fixture
def bare(monkeypatch: pytest.MonkeyPatch, tmp_path):  # type: ignore[no-untyped-def]
    """No servers: any embedded server would appear under ``tmp_path``."""
    monkeypatch.setenv("SAGAFLEET_HOME", str(tmp_path))
    for name in ("SAGAFLEET_DATABASE_URL", "SAGAFLEET_BROKER_URL"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


@pytest.mark.parametrize("address", ["8080", "localhost:", "host:http", "host:70000"])
def test_a_malformed_address_is_a_usage_error(bare, capsys, address) -> None:
    assert cli.main(["console", "--http", address]) == ExitCode.USAGE
    assert "HOST:PORT" in capsys.readouterr().err
    assert not any(bare.iterdir())


def test_a_certificate_without_its_key_is_a_usage_error(bare, capsys) -> None:
    assert cli.main(["console", "--tls-cert", "cert.pem"]) == ExitCode.USAGE
    assert "--tls-key" in capsys.readouterr().err
    assert not any(bare.iterdir())


def test_the_help_says_how_to_sign_in(capsys) -> None:
    with pytest.raises(SystemExit):
        cli.main(["console", "--help"])
    out = capsys.readouterr().out
    assert "API token" in out and "--keep-servers" in out and "--no-projector" in out
