"""``sagafleet.auth.cli_principal``: a command acts as the principal its token proves."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from pydantic import SecretStr

from application.principals.memory import MemoryPrincipals
from saga_core.access.roles import PrincipalKind, Unauthenticated
from sagafleet.auth import add_token_option, cli_principal
from sagafleet.settings import Settings


def parsed(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_token_option(parser)
    return parser.parse_args(list(argv))


def test_the_token_file_wins_over_the_environment(tmp_path: Path) -> None:
    # given two principals, one's token in a file and the other's in SAGAFLEET_TOKEN
    directory = MemoryPrincipals()
    ada = directory.add("acme", "ada", PrincipalKind.PERSON, ["approver"])
    bob = directory.add("acme", "bob", PrincipalKind.PERSON, ["operator"])
    token_file = tmp_path / "token"
    token_file.write_text(ada.token + "\n")
    settings = Settings(token=SecretStr(bob.token))
    # then the file's principal acts; without the file, the environment's
    assert cli_principal(parsed("--token-file", str(token_file)), settings, directory).name == "ada"
    assert cli_principal(parsed(), settings, directory).name == "bob"


def test_no_token_or_an_unreadable_file_is_unauthenticated(tmp_path: Path) -> None:
    directory = MemoryPrincipals()
    with pytest.raises(Unauthenticated, match="no API token"):
        cli_principal(parsed(), Settings(), directory)
    with pytest.raises(Unauthenticated, match="cannot read"):
        cli_principal(parsed("--token-file", str(tmp_path / "absent")), Settings(), directory)
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(Unauthenticated, match="is empty"):
        cli_principal(parsed("--token-file", str(tmp_path / "empty")), Settings(), directory)


def test_a_bad_token_is_refused_without_echoing_it() -> None:
    wrong = "sft_" + "Z" * 43
    with pytest.raises(Unauthenticated) as error:
        cli_principal(parsed(), Settings(token=SecretStr(wrong)), MemoryPrincipals())
    assert wrong not in str(error.value)
    assert wrong not in repr(Settings(token=SecretStr(wrong)))
