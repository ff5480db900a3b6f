"""The principal directory: the same promises in memory and in PostgreSQL.

Tokens prove principals until rotated or revoked; the directory never gives a token back;
signing keys live and die with their principal.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from importlib.resources import files

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from application.principals.directory import (
    BAD_TOKEN,
    InvalidPrincipal,
    PrincipalConflict,
    PrincipalDirectory,
    PrincipalNotFound,
)
from application.principals.memory import MemoryPrincipals
from application.principals.postgres import PostgresPrincipals
from events import EventStore, apply_migrations
from saga_core.access.roles import Principal, PrincipalKind, Unauthenticated

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture(params=["memory", pytest.param("postgres", marks=pytest.mark.integration)])
def directory(request: pytest.FixtureRequest) -> Iterator[PrincipalDirectory]:
    """An empty directory of one implementation."""
    if request.param == "memory":
        yield MemoryPrincipals(lambda: T0)
        return
    url = request.getfixturevalue("fresh_database")
    with EventStore.connect(url, pool_size=2) as store:
        store.migrate()
        apply_migrations(url, "fleet", files("workers").joinpath("migrations"))
        yield PostgresPrincipals(store, lambda: T0)


def refused(directory: PrincipalDirectory, token: str) -> str:
    """The message ``authenticate`` refuses ``token`` with (fails if it is accepted)."""
    with pytest.raises(Unauthenticated) as error:
        directory.authenticate(token)
    return str(error.value)


def test_an_issued_token_proves_its_principal(directory: PrincipalDirectory) -> None:
    # given an approver added to tenant acme
    issued = directory.add("acme", "ada", PrincipalKind.PERSON, {"approver", "operator"})
    # then the token is shown once, shaped like a token
    assert issued.token.startswith("sft_") and len(issued.token) == 47
    assert issued.token not in repr(issued)
    # and it proves that very principal
    assert directory.authenticate(issued.token) == Principal(
        "acme", "ada", PrincipalKind.PERSON, frozenset({"approver", "operator"}))


def test_unknown_malformed_and_revoked_tokens_are_refused_alike(
    directory: PrincipalDirectory
) -> None:
    # given a principal whose token is then revoked, and tokens that were never issued
    gone = directory.add("acme", "bob", PrincipalKind.AGENT, ["agent"]).token
    directory.revoke("acme", "bob", "left the team")
    never = "sft_" + "A" * 43
    # then every one of them is refused with the same message
    messages = {refused(directory, token) for token in
                (gone, never, "", "sft_", "not a token", gone + "x", gone.upper())}
    assert messages == {BAD_TOKEN}


def test_rotation_replaces_the_token(directory: PrincipalDirectory) -> None:
    first = directory.add("acme", "ada", "person", ["approver"])
    # when the token is rotated
    second = directory.rotate("acme", "ada")
    # then only the new one works
    assert second.token != first.token
    assert refused(directory, first.token) == BAD_TOKEN
    assert directory.authenticate(second.token).name == "ada"


def test_revocation_is_final_and_keeps_the_name_taken(directory: PrincipalDirectory) -> None:
    issued = directory.add("acme", "ada", "person", ["approver"])
    # when ada is revoked
    record = directory.revoke("acme", "ada", "laptop stolen")
    # then the record says so, her token is refused, and nothing new can be issued to her
    assert record.revoked and record.revoked_reason == "laptop stolen"
    assert refused(directory, issued.token) == BAD_TOKEN
    with pytest.raises(PrincipalConflict, match="revoked"):
        directory.rotate("acme", "ada")
    with pytest.raises(PrincipalConflict, match="revoked"):
        directory.add_signing_key("acme", "ada")
    with pytest.raises(PrincipalConflict, match="already has"):
        directory.add("acme", "ada", "person", ["approver"])
    # and a second revoke keeps the first reason
    assert directory.revoke("acme", "ada", "again").revoked_reason == "laptop stolen"


def test_names_are_per_tenant(directory: PrincipalDirectory) -> None:
    mine = directory.add("acme", "ada", "person", ["approver"])
    theirs = directory.add("globex", "ada", "person", ["auditor"])
    assert directory.authenticate(mine.token).tenant == "acme"
    assert directory.authenticate(theirs.token).roles == {"auditor"}
    with pytest.raises(PrincipalConflict):
        directory.add("acme", "ada", "agent", ["agent"])


def test_list_shows_a_tenants_principals_and_never_a_token(
    directory: PrincipalDirectory
) -> None:
    ada = directory.add("acme", "ada", "person", ["approver"])
    directory.add("acme", "bot", "agent", ["agent"])
    directory.add("globex", "eve", "person", ["admin"])
    directory.revoke("acme", "bot", "retired")
    records = directory.list("acme")
    assert [(r.name, r.kind, r.revoked) for r in records] == [
        ("ada", PrincipalKind.PERSON, False), ("bot", PrincipalKind.AGENT, True)]
    assert records[0].created_at == T0 and records[0].token_issued_at == T0
    assert ada.token not in repr(records)
    assert directory.list("nobody") == []


def test_bad_principals_are_refused_naming_each_problem(directory: PrincipalDirectory) -> None:
    with pytest.raises(InvalidPrincipal) as error:
        directory.add("acme", "a b", "robot", ["Approver", "ok"])
    message = str(error.value)
    assert "name 'a b'" in message and "kind 'robot'" in message and "'Approver'" in message
    with pytest.raises(InvalidPrincipal, match="at least one role"):
        directory.add("acme", "ada", "person", [])
    assert directory.list("acme") == []


def test_unknown_principals_are_not_found(directory: PrincipalDirectory) -> None:
    for act in (lambda: directory.rotate("acme", "nobody"),
                lambda: directory.revoke("acme", "nobody", "x"),
                lambda: directory.get("acme", "nobody"),
                lambda: directory.add_signing_key("acme", "nobody"),
                lambda: directory.revoke_signing_key("sk_" + "A" * 22)):
        with pytest.raises(PrincipalNotFound):
            act()


def test_a_generated_signing_key_is_returned_once_and_verifies(
    directory: PrincipalDirectory
) -> None:
    directory.add("acme", "bot", "agent", ["agent"])
    # when the directory generates a key pair for bot
    issued = directory.add_signing_key("acme", "bot")
    assert issued.private_key_pem is not None and issued.kid.startswith("sk_")
    # then the kept public key verifies what the returned private key signs
    private = serialization.load_pem_private_key(issued.private_key_pem, password=None)
    assert isinstance(private, Ed25519PrivateKey)
    key = directory.signing_key(issued.kid)
    assert key is not None and key.principal.name == "bot" and key.principal.tenant == "acme"
    assert key.public_key == private.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert directory.get("acme", "bot").signing_keys == (issued.kid,)


def test_a_given_public_key_is_kept_raw_or_pem(directory: PrincipalDirectory) -> None:
    directory.add("acme", "bot", "agent", ["agent"])
    public = Ed25519PrivateKey.generate().public_key()
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    pem = public.public_bytes(serialization.Encoding.PEM,
                              serialization.PublicFormat.SubjectPublicKeyInfo)
    for given in (raw, pem):
        issued = directory.add_signing_key("acme", "bot", given)
        assert issued.private_key_pem is None
        key = directory.signing_key(issued.kid)
        assert key is not None and key.public_key == raw
    with pytest.raises(InvalidPrincipal):
        directory.add_signing_key("acme", "bot", b"-----BEGIN PUBLIC KEY-----\nxx\n")


def test_signing_keys_die_with_their_revocation_or_their_principals(
    directory: PrincipalDirectory
) -> None:
    directory.add("acme", "bot", "agent", ["agent"])
    one = directory.add_signing_key("acme", "bot").kid
    two = directory.add_signing_key("acme", "bot").kid
    # when one key is revoked, only it stops working
    directory.revoke_signing_key(one)
    assert directory.signing_key(one) is None and directory.signing_key(two) is not None
    # when the principal is revoked, every key stops working
    directory.revoke("acme", "bot", "compromised")
    assert directory.signing_key(two) is None
    # and unknown or malformed ids are simply unknown
    assert directory.signing_key("sk_" + "B" * 22) is None
    assert directory.signing_key("'; DROP TABLE x; --") is None
