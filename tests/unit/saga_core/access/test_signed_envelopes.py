"""A signed command's layout, envelope and window, as the worker reads what an agent signs."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from saga_core.access.signed_envelopes import (
    CLOCK_SKEW,
    MAX_LIFETIME,
    CommandRefused,
    Refusal,
    check_window,
    parse_envelope,
    signed_parts,
)
from saga_core.errors import ErrorKind
from sagafleet.agent import CommandSigner

START = "sagafleet.commands.start_saga"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
KID = "sk_abcdefghijklmnopqrstuv"


def _pem() -> tuple[bytes, Ed25519PrivateKey]:
    key = Ed25519PrivateKey.generate()
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()), key


def _signer(lifetime_s: int = 300) -> CommandSigner:
    return CommandSigner(KID, _pem()[0], lifetime_s=lifetime_s, clock=NOW.timestamp)


def _refusal(call) -> CommandRefused:  # type: ignore[no-untyped-def]
    with pytest.raises(CommandRefused) as refused:
        call()
    return refused.value


def test_the_signer_writes_the_documented_layout_and_signs_the_envelopes_bytes() -> None:
    # given an agent's key and the signer built on it
    pem, key = _pem()
    signer = CommandSigner(KID, pem, clock=NOW.timestamp)
    # when it signs a start
    name, kwargs = signer.start_saga("trip", {"nights": 2}, key="booking-1", reason="asked")
    # then the message holds exactly envelope, kid, signature
    assert name == START and sorted(kwargs) == ["envelope", "kid", "signature"]
    assert kwargs["kid"] == KID
    # and the envelope is JSON text with the six fields, times in whole unix seconds
    envelope = json.loads(kwargs["envelope"])
    assert sorted(envelope) == ["args", "command_id", "expires_at", "issued_at", "task", "v"]
    assert envelope["v"] == 1 and envelope["task"] == START
    assert envelope["issued_at"] == int(NOW.timestamp())
    assert envelope["expires_at"] == envelope["issued_at"] + 300
    assert envelope["args"] == {"definition": "trip", "input": {"nights": 2},
                                "key": "booking-1", "reason": "asked"}
    # and the signature is base64url without padding, over the envelope's UTF-8 bytes
    assert "=" not in kwargs["signature"] and len(kwargs["signature"]) == 86
    raw = base64.urlsafe_b64decode(kwargs["signature"] + "==")
    key.public_key().verify(raw, kwargs["envelope"].encode("utf-8"))  # raises if not
    # and the worker reads it back as signed
    parts = signed_parts(kwargs)
    assert parts.signature == raw and parts.signed_bytes == kwargs["envelope"].encode()
    parsed = parse_envelope(parts.envelope, START)
    assert parsed.command_id == envelope["command_id"] and parsed.args["key"] == "booking-1"
    check_window(parsed, NOW)


def test_every_command_gets_its_own_command_id() -> None:
    signer = _signer()
    ids = {json.loads(signer.cancel_saga("s1")[1]["envelope"])["command_id"] for _ in range(3)}
    assert len(ids) == 3


@pytest.mark.parametrize(("kwargs", "refusal", "kind"), [
    ({"definition": "trip", "input": {}}, Refusal.UNSIGNED, ErrorKind.UNAUTHENTICATED),
    ({"envelope": "{}", "kid": KID}, Refusal.UNSIGNED, ErrorKind.UNAUTHENTICATED),
    ({"envelope": "{}", "kid": KID, "signature": "A" * 86, "key": "k"}, Refusal.UNSIGNED,
     ErrorKind.UNAUTHENTICATED),
    ({"envelope": "{}", "kid": KID, "signature": "A" * 86, "tenant": "acme"},
     Refusal.IDENTITY_IN_MESSAGE, ErrorKind.FORBIDDEN),
    ({"envelope": "{}", "kid": KID, "signature": "not base64!"}, Refusal.MALFORMED_SIGNATURE,
     ErrorKind.UNAUTHENTICATED),
    ({"envelope": "{}", "kid": "no spaces allowed", "signature": "A" * 86},
     Refusal.MALFORMED_SIGNATURE, ErrorKind.UNAUTHENTICATED),
])
def test_a_message_not_in_the_signed_layout_is_refused_with_its_reason(
        kwargs, refusal, kind) -> None:  # type: ignore[no-untyped-def]
    error = _refusal(lambda: signed_parts(kwargs))
    assert error.refusal is refusal and error.kind is kind
    assert str(error).startswith(f"{refusal}: ")


def _envelope(**fields) -> str:  # type: ignore[no-untyped-def]
    base = {"v": 1, "task": START, "command_id": "c-1", "issued_at": int(NOW.timestamp()),
            "expires_at": int(NOW.timestamp()) + 60, "args": {"definition": "trip"}}
    return json.dumps({**base, **fields})


@pytest.mark.parametrize(("text", "refusal"), [
    ("not json", Refusal.MALFORMED_ENVELOPE),
    ("[1]", Refusal.MALFORMED_ENVELOPE),
    ('{"v": 1, "v": 1}', Refusal.MALFORMED_ENVELOPE),
    (_envelope(v=2), Refusal.MALFORMED_ENVELOPE),
    (_envelope(task="sagafleet.commands.cancel_saga"), Refusal.WRONG_TASK),
    (_envelope(command_id=""), Refusal.MALFORMED_ENVELOPE),
    (_envelope(issued_at=1.5), Refusal.MALFORMED_ENVELOPE),
    (_envelope(issued_at="2026-12-01T12:00:00Z"), Refusal.MALFORMED_ENVELOPE),
    (_envelope(args=[]), Refusal.MALFORMED_ENVELOPE),
    (_envelope(extra=1), Refusal.MALFORMED_ENVELOPE),
    (_envelope(tenant="acme"), Refusal.IDENTITY_IN_MESSAGE),
    (_envelope(args={"definition": "trip", "actor": "root"}), Refusal.IDENTITY_IN_MESSAGE),
    ("[" * 10_000 + "]" * 10_000, Refusal.MALFORMED_ENVELOPE),
])
def test_a_signed_envelope_this_fleet_cannot_read_is_refused(text, refusal) -> None:  # type: ignore[no-untyped-def]
    assert _refusal(lambda: parse_envelope(text, START)).refusal is refusal


def test_the_window_allows_the_clock_skew_either_side_and_no_more() -> None:
    envelope = parse_envelope(_envelope(), START)
    # given an envelope valid from NOW for 60 s: inside the skew either side it is taken
    check_window(envelope, NOW - CLOCK_SKEW)
    check_window(envelope, envelope.expires_at + CLOCK_SKEW)
    # and outside it is refused, saying which way
    early = _refusal(lambda: check_window(envelope, NOW - CLOCK_SKEW - timedelta(seconds=1)))
    assert early.refusal is Refusal.NOT_YET_VALID
    late = _refusal(lambda: check_window(
        envelope, envelope.expires_at + CLOCK_SKEW + timedelta(seconds=1)))
    assert late.refusal is Refusal.EXPIRED and "sign it again" in str(late)


def test_a_lifetime_over_the_maximum_is_refused_even_inside_it() -> None:
    too_long = int((MAX_LIFETIME + timedelta(seconds=1)).total_seconds())
    envelope = parse_envelope(_envelope(expires_at=int(NOW.timestamp()) + too_long), START)
    assert _refusal(lambda: check_window(envelope, NOW)).refusal is Refusal.LIFETIME_TOO_LONG
    backwards = parse_envelope(_envelope(expires_at=int(NOW.timestamp()) - 1), START)
    assert _refusal(lambda: check_window(backwards, NOW)).refusal is Refusal.MALFORMED_ENVELOPE


def test_the_signer_refuses_a_lifetime_the_fleet_would_refuse() -> None:
    with pytest.raises(ValueError, match="lifetime_s"):
        _signer(lifetime_s=int(MAX_LIFETIME.total_seconds()) + 1)


def test_the_agent_module_keeps_the_fleets_wire_contract() -> None:
    # sagafleet.agent imports neither saga_core nor workers: its copy must stay equal
    from saga_core.access import signed_envelopes as signed_commands
    from sagafleet import agent
    from workers import celery_app, tasks

    assert agent.ENVELOPE_VERSION == signed_commands.ENVELOPE_VERSION
    assert agent.MAX_LIFETIME_S == signed_commands.MAX_LIFETIME.total_seconds()
    assert (agent.START_SAGA, agent.CANCEL_SAGA, agent.SUBMIT_PLAN) == (
        tasks.START_SAGA, tasks.CANCEL_SAGA, tasks.SUBMIT_PLAN)
    assert agent.COMMAND_QUEUE == celery_app.QUEUE_COMMANDS


def test_the_agent_module_imports_only_the_standard_library_and_cryptography() -> None:
    import subprocess
    import sys

    code = ("import sys; import sagafleet.agent; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "{'saga_core', 'workers', 'events', 'pydantic', 'psycopg', 'celery', 'redis'}); "
            "print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,  # noqa: S603
                         check=True).stdout.strip()
    assert out == "[]"


def test_the_documented_window_constants_and_the_lifetime_bounds() -> None:
    # found by the mutation run (issue 36): signed_envelopes.py:43, :47, :230, :231 survived
    # every test. docs/agents.md promises a 60 s clock skew and a 900 s maximum lifetime.
    assert (CLOCK_SKEW, MAX_LIFETIME) == (timedelta(seconds=60), timedelta(seconds=900))
    start = int(NOW.timestamp())
    check_window(parse_envelope(_envelope(expires_at=start + 900), START), NOW)  # at the max
    over = parse_envelope(_envelope(expires_at=start + 901), START)
    assert _refusal(lambda: check_window(over, NOW)).refusal is Refusal.LIFETIME_TOO_LONG
    check_window(parse_envelope(_envelope(expires_at=start + 1), START), NOW)  # the least
    empty = parse_envelope(_envelope(expires_at=start), START)  # no lifetime at all
    assert _refusal(lambda: check_window(empty, NOW)).refusal is Refusal.MALFORMED_ENVELOPE


@pytest.mark.parametrize(("seconds", "readable"), [
    (0, True), (253_402_300_799, True), (253_402_300_800, False), (-1, False)])
def test_envelope_times_are_unix_seconds_from_1970_to_the_end_of_9999(seconds: int,
                                                                      readable: bool) -> None:
    # found by the mutation run (issue 36): signed_envelopes.py:63 and :278 survived
    text = _envelope(issued_at=seconds, expires_at=seconds)
    if readable:
        assert parse_envelope(text, START).issued_at == datetime.fromtimestamp(seconds, UTC)
    else:
        assert _refusal(lambda: parse_envelope(text, START)).refusal is (
            Refusal.MALFORMED_ENVELOPE)
