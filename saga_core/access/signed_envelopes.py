"""Signed agent commands: the message layout, the envelope, and the pure checks of both.

A ``sagafleet.commands.*`` message carries exactly three keyword arguments (docs/agents.md,
"Signed commands")::

    {"envelope": "<JSON text>", "kid": "<signing key id>",
     "signature": "<base64url (no padding) Ed25519 signature of the envelope's UTF-8 bytes>"}

The envelope is a JSON object ``{"v": 1, "task": ..., "command_id": ..., "issued_at": ...,
"expires_at": ..., "args": {...}}`` (times in whole unix seconds). The worker checks, in
this order: the layout (:func:`signed_parts`), the key and the signature over the raw bytes
(``application.command_signatures``, which needs a key), then — only once the signature holds —
the envelope (:func:`parse_envelope`), its time window (:func:`check_window`) and its
single use (``fleet.command_nonces``). Tenant and actor are the signing key's principal's:
a ``tenant`` or ``actor`` in the message, the envelope or its ``args`` is refused, never
read. Any JSON serialisation of the envelope is fine, since the exact bytes sent are what
is signed and verified; nothing is canonicalised.

Every refusal is a :class:`CommandRefused` naming its :class:`Refusal` (the dead letter
keeps it), of kind ``UNAUTHENTICATED`` (the message does not prove itself) or
``FORBIDDEN`` (it is proven, but asks for what its principal may not do).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Final

from saga_core.access.roles import NotPermitted, Unauthenticated
from saga_core.errors import ErrorKind, SagaError
from saga_core.limits import LimitExceeded, json_text_depth

ENVELOPE_VERSION: Final = 1
"""The envelope's ``v``: the only layout this fleet reads."""

CLOCK_SKEW: Final = timedelta(seconds=60)
"""How far a signer's clock may be off the worker's: a command is taken from ``issued_at``
minus this until ``expires_at`` plus this."""

MAX_LIFETIME: Final = timedelta(minutes=15)
"""The longest ``expires_at - issued_at`` accepted: a captured message is worth at most
this long (plus the skew), and single-use nonces are kept only that long."""

SIGNED_FIELDS: Final = ("envelope", "kid", "signature")
"""The keyword arguments of a signed command: these three, and nothing else."""

ENVELOPE_FIELDS: Final = ("v", "task", "command_id", "issued_at", "expires_at", "args")
"""The envelope's fields: these six, and nothing else."""

IDENTITY_FIELDS: Final = ("tenant", "actor")
"""Names a message may not carry: who acts is the signing key's principal."""

KID_PATTERN: Final = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
COMMAND_ID_PATTERN: Final = re.compile(r"^[A-Za-z0-9_.:-]{1,100}$")
SIGNATURE_PATTERN: Final = re.compile(r"^[A-Za-z0-9_-]{86}$")  # 64 bytes, base64url unpadded
MAX_UNIX_SECONDS: Final = 253_402_300_799  # 9999-12-31T23:59:59Z


class Refusal(StrEnum):
    """Why a command was refused: the first word of its dead letter's reason."""

    UNSIGNED = "unsigned"  # no envelope, kid or signature
    MALFORMED_SIGNATURE = "malformed_signature"  # kid or signature not in the layout
    UNKNOWN_KEY = "unknown_key"  # no such kid, or it was revoked
    BAD_SIGNATURE = "bad_signature"  # the signature does not verify: forged or altered
    MALFORMED_ENVELOPE = "malformed_envelope"  # signed, but not an envelope this fleet reads
    WRONG_TASK = "wrong_task"  # signed for another command than the one it was sent to
    NOT_YET_VALID = "not_yet_valid"  # issued_at is ahead of the worker's clock
    EXPIRED = "expired"  # expires_at has passed
    LIFETIME_TOO_LONG = "lifetime_too_long"  # valid for longer than MAX_LIFETIME
    REPLAYED = "replayed"  # command_id already used by another message
    IDENTITY_IN_MESSAGE = "identity_in_message"  # names a tenant or actor
    NOT_PERMITTED = "not_permitted"  # the key's principal has no role for this command


FORBIDDEN_REFUSALS: Final = frozenset({Refusal.IDENTITY_IN_MESSAGE, Refusal.NOT_PERMITTED})
"""Refusals of a message that proved who sent it (kind FORBIDDEN); all others are
UNAUTHENTICATED."""


class CommandRefused(SagaError):
    """A signed-command check refused the message; ``refusal`` says which."""

    refusal: Refusal


class CommandUnauthenticated(CommandRefused, Unauthenticated):
    """The message does not prove that a live key of the fleet signed this command now."""

    hint = ("sign the command with sagafleet.agent.CommandSigner (or as docs/agents.md 'Signed"
            " commands' describes) using a live key, and send it before it expires")

    def __init__(self, refusal: Refusal, detail: str) -> None:
        self.refusal = refusal
        super().__init__(f"{refusal}: {detail}")


class CommandForbidden(CommandRefused, NotPermitted):
    """The message is proven, but asks for what its key's principal may not do."""

    def __init__(self, refusal: Refusal, detail: str) -> None:
        self.refusal = refusal
        super().__init__(f"{refusal}: {detail}")


def refused(refusal: Refusal, detail: str) -> CommandRefused:
    """The error for ``refusal`` (its kind decided by :data:`FORBIDDEN_REFUSALS`)."""
    if refusal in FORBIDDEN_REFUSALS:
        return CommandForbidden(refusal, detail)
    return CommandUnauthenticated(refusal, detail)


def refusal_kind(refusal: Refusal) -> ErrorKind:
    """The error kind a refusal is dead-lettered with."""
    return ErrorKind.FORBIDDEN if refusal in FORBIDDEN_REFUSALS else ErrorKind.UNAUTHENTICATED


@dataclass(frozen=True)
class SignedParts:
    """The three parts of a signed command's message, checked for layout only."""

    envelope: str
    kid: str
    signature: bytes

    @property
    def signed_bytes(self) -> bytes:
        """What the signature covers: the envelope text's UTF-8 bytes, exactly as sent."""
        return self.envelope.encode("utf-8")


@dataclass(frozen=True)
class CommandEnvelope:
    """A verified command's envelope: what was signed, for which task, valid when."""

    task: str
    command_id: str
    issued_at: datetime
    expires_at: datetime
    args: dict[str, Any]


def signed_parts(kwargs: Mapping[str, Any]) -> SignedParts:
    """The message's envelope, kid and signature, or :class:`CommandRefused`.

    A message naming a tenant or actor is refused first (``identity_in_message``) whatever
    else it holds; one without all three parts is ``unsigned``.
    """
    claimed = sorted(set(IDENTITY_FIELDS) & set(kwargs))
    if claimed:
        raise refused(Refusal.IDENTITY_IN_MESSAGE,
                      f"the message names {claimed}: a signed command acts as its key's "
                      "principal, and may not say who it is")
    missing = [name for name in SIGNED_FIELDS if name not in kwargs]
    if missing:
        raise refused(Refusal.UNSIGNED,
                      f"a command must be signed: missing {missing} "
                      "(docs/agents.md 'Signed commands')")
    extra = sorted(set(kwargs) - set(SIGNED_FIELDS))
    if extra:
        raise refused(Refusal.UNSIGNED,
                      f"unexpected arguments {extra}: a signed command carries only "
                      f"{list(SIGNED_FIELDS)}; its arguments go inside the envelope")
    envelope, kid, signature = (kwargs[name] for name in SIGNED_FIELDS)
    if not isinstance(envelope, str):
        raise refused(Refusal.UNSIGNED, "envelope must be the JSON text that was signed")
    if not isinstance(kid, str) or not KID_PATTERN.match(kid):
        raise refused(Refusal.MALFORMED_SIGNATURE, f"kid must match {KID_PATTERN.pattern}")
    if not isinstance(signature, str) or not SIGNATURE_PATTERN.match(signature):
        raise refused(Refusal.MALFORMED_SIGNATURE,
                      "signature must be 64 bytes in base64url without padding (86 characters)")
    try:
        raw = base64.urlsafe_b64decode(signature + "==")
    except (binascii.Error, ValueError):  # pragma: no cover - the pattern admits only valid text
        raise refused(Refusal.MALFORMED_SIGNATURE, "signature is not base64url") from None
    return SignedParts(envelope=envelope, kid=kid, signature=raw)


def parse_envelope(text: str, task: str) -> CommandEnvelope:
    """The envelope a verified signature covers, checked to be one this fleet reads and
    signed for ``task``; else :class:`CommandRefused` naming what is wrong.

    Call it only after the signature verified: nothing unsigned is ever parsed.
    """
    data = _json_object(text)
    unknown = sorted(set(data) - set(ENVELOPE_FIELDS))
    claimed = sorted(set(IDENTITY_FIELDS) & set(unknown))
    if claimed:
        raise refused(Refusal.IDENTITY_IN_MESSAGE,
                      f"the envelope names {claimed}: who acts is the signing key's principal")
    if unknown:
        raise refused(Refusal.MALFORMED_ENVELOPE, f"unexpected envelope fields {unknown}")
    missing = [name for name in ENVELOPE_FIELDS if name not in data]
    if missing:
        raise refused(Refusal.MALFORMED_ENVELOPE, f"missing envelope fields {missing}")
    if type(data["v"]) is not int or data["v"] != ENVELOPE_VERSION:
        raise refused(Refusal.MALFORMED_ENVELOPE,
                      f"v is {data['v']!r}; this fleet reads envelope version {ENVELOPE_VERSION}")
    if data["task"] != task:
        raise refused(Refusal.WRONG_TASK,
                      f"the envelope was signed for {data['task']!r}, not {task!r}")
    command_id = data["command_id"]
    if not isinstance(command_id, str) or not COMMAND_ID_PATTERN.match(command_id):
        raise refused(Refusal.MALFORMED_ENVELOPE,
                      f"command_id must match {COMMAND_ID_PATTERN.pattern}")
    args = data["args"]
    if not isinstance(args, dict):
        raise refused(Refusal.MALFORMED_ENVELOPE, "args must be a JSON object")
    claimed = sorted(set(IDENTITY_FIELDS) & set(args))
    if claimed:
        raise refused(Refusal.IDENTITY_IN_MESSAGE,
                      f"the envelope's args name {claimed}: who acts is the signing key's "
                      "principal")
    return CommandEnvelope(task=task, command_id=command_id,
                           issued_at=_unix_time("issued_at", data["issued_at"]),
                           expires_at=_unix_time("expires_at", data["expires_at"]), args=args)


def check_window(envelope: CommandEnvelope, now: datetime) -> None:
    """Refuse an envelope outside its time window at ``now`` (``CLOCK_SKEW`` either side),
    or one that claims a lifetime longer than ``MAX_LIFETIME``."""
    lifetime = envelope.expires_at - envelope.issued_at
    if lifetime <= timedelta(0) or lifetime > MAX_LIFETIME:
        raise refused(Refusal.LIFETIME_TOO_LONG if lifetime > MAX_LIFETIME
                      else Refusal.MALFORMED_ENVELOPE,
                      f"expires_at - issued_at is {lifetime.total_seconds():.0f} s; it must be "
                      f"above 0 and at most {MAX_LIFETIME.total_seconds():.0f} s")
    if now < envelope.issued_at - CLOCK_SKEW:
        raise refused(Refusal.NOT_YET_VALID,
                      f"issued at {envelope.issued_at:%Y-%m-%dT%H:%M:%SZ}, which is "
                      f"{(envelope.issued_at - now).total_seconds():.0f} s ahead of the "
                      f"worker's clock (at most {CLOCK_SKEW.total_seconds():.0f} s allowed)")
    if now > envelope.expires_at + CLOCK_SKEW:
        raise refused(Refusal.EXPIRED,
                      f"expired at {envelope.expires_at:%Y-%m-%dT%H:%M:%SZ} (the worker's "
                      f"clock reads {now:%Y-%m-%dT%H:%M:%SZ}); sign it again")


def nonce_kept_until(envelope: CommandEnvelope) -> datetime:
    """Until when the command's single-use record must be kept: after that, the window
    check alone refuses a copy of it."""
    return envelope.expires_at + CLOCK_SKEW


def _json_object(text: str) -> dict[str, Any]:
    try:
        json_text_depth("command envelope", text)
        data = json.loads(text, object_pairs_hook=_no_duplicate_keys,
                          parse_constant=_no_constant)
    except (ValueError, LimitExceeded) as exc:
        raise refused(Refusal.MALFORMED_ENVELOPE, f"the envelope is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise refused(Refusal.MALFORMED_ENVELOPE, "the envelope must be a JSON object")
    return data


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:  # one text, one meaning: a parser that keeps the first would differ
            raise ValueError(f"duplicate key {key!r}")
        seen[key] = value
    return seen


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _unix_time(name: str, value: Any) -> datetime:
    if type(value) is not int or not 0 <= value <= MAX_UNIX_SECONDS:
        raise refused(Refusal.MALFORMED_ENVELOPE,
                      f"{name} must be whole unix seconds (a JSON integer), got {value!r}")
    return datetime.fromtimestamp(value, UTC)
