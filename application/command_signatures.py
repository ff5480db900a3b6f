"""Verifying a signed agent command: the key, the signature, the window, single use.

The layout and the envelope's pure checks are :mod:`saga_core.access.signed_envelopes`; this
module adds what needs a key or the database:

1. :func:`verify_signed_command` — the kid is looked up in the principal directory (an
   unknown or revoked one is ``unknown_key``), and the Ed25519 signature is verified over
   the envelope's raw UTF-8 bytes *before* the envelope is parsed. The answer names the
   key's principal: the tenant and actor every effect of the command is recorded under.
2. :meth:`CommandNonces.accept` — the command's ``command_id`` is single-use per key
   through the primary key of ``fleet.command_nonces``. The first message to claim it
   records its Celery task id (after the time-window check); the same task id again is a
   redelivery of that message and proceeds, whatever the clock says by then (the command
   was accepted in its window, and every command is idempotent under redelivery); another
   task id is a replay (``replayed``). The sweeper forgets a nonce once a copy of its
   command would fail the window check anyway (:meth:`CommandNonces.purge_expired`).

Ed25519 (not an HMAC): workers hold only public keys, so a worker — or anyone reading the
principal directory — can verify commands but never mint one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from application.principals.directory import SigningKey
from events import EventStore
from saga_core.access.roles import Principal
from saga_core.access.signed_envelopes import (
    CommandEnvelope,
    Refusal,
    SignedParts,
    check_window,
    nonce_kept_until,
    parse_envelope,
    refused,
    signed_parts,
)


class SigningKeys(Protocol):
    """Where live signing keys are found by kid (``application.principals.directory``)."""

    def signing_key(self, kid: str) -> SigningKey | None:
        """The live key with this id; None when unknown or revoked."""


@dataclass(frozen=True)
class VerifiedCommand:
    """A command whose signature verified: its key, the principal it acts as, its envelope."""

    kid: str
    principal: Principal
    envelope: CommandEnvelope


def verify_signed_command(task: str, kwargs: dict[str, object],
                          keys: SigningKeys) -> VerifiedCommand:
    """The command ``kwargs`` carries for ``task`` once its signature holds, or
    ``CommandRefused`` (the time window and single use are :class:`CommandNonces`')."""
    parts = signed_parts(kwargs)
    key = _signing_key(parts, keys)
    # Only now is anything the sender wrote parsed.
    return VerifiedCommand(kid=parts.kid, principal=key.principal,
                           envelope=parse_envelope(parts.envelope, task))


def signer_of(kwargs: dict[str, object], keys: SigningKeys) -> Principal:
    """The principal whose live key signed ``kwargs``, once the signature holds — whatever the
    envelope then says (a dead letter's tenant is its signer's, even when the command was
    refused after its signature verified); ``CommandRefused`` when it does not hold."""
    return _signing_key(signed_parts(kwargs), keys).principal


def _signing_key(parts: SignedParts, keys: SigningKeys) -> SigningKey:
    """The live key the parts name, once their signature verifies with it."""
    key = keys.signing_key(parts.kid)
    if key is None:
        raise refused(Refusal.UNKNOWN_KEY,
                      f"no live signing key {parts.kid!r} (unknown, or revoked)")
    if not _signature_holds(key.public_key, parts.signature, parts.signed_bytes):
        raise refused(Refusal.BAD_SIGNATURE,
                      f"the signature does not verify with key {parts.kid!r}: the envelope "
                      "was altered, or another key signed it")
    return key


def _signature_holds(public_key: bytes, signature: bytes, data: bytes) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, data)
    except InvalidSignature:
        return False
    return True


class CommandNonces:
    """``fleet.command_nonces``: each (kid, command_id) claimed by one Celery message."""

    def __init__(self, store: EventStore) -> None:
        self._store = store

    def accept(self, command: VerifiedCommand, task_id: str, now: datetime) -> None:
        """Let the message ``task_id`` carry ``command`` (its first delivery inside its
        window, or a redelivery of the message that did), else ``CommandRefused``:
        expired, not yet valid, or replayed."""
        envelope = command.envelope
        holder = self._holder(command.kid, envelope.command_id)
        if holder is None:
            check_window(envelope, now)
            holder = self._claim(command.kid, envelope, task_id)
        if holder != task_id:
            raise refused(Refusal.REPLAYED,
                          f"command_id {envelope.command_id!r} of key {command.kid!r} was "
                          f"already used by message {holder}; sign a new command to act again")

    def _holder(self, kid: str, command_id: str) -> str | None:
        with self._store.connection() as conn:
            row = conn.execute(
                "SELECT task_id FROM fleet.command_nonces WHERE kid = %s AND command_id = %s",
                (kid, command_id)).fetchone()
        return None if row is None else str(row[0])

    def _claim(self, kid: str, envelope: CommandEnvelope, task_id: str) -> str:
        """Record ``task_id`` as the command's message; the task id that holds it (another
        one when a copy claimed it between our look and this insert)."""
        with self._store.connection() as conn:
            row = conn.execute(
                "INSERT INTO fleet.command_nonces (kid, command_id, task_id, task, kept_until)"
                " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (kid, command_id) DO NOTHING"
                " RETURNING task_id",
                (kid, envelope.command_id, task_id, envelope.task, nonce_kept_until(envelope)),
            ).fetchone()
            if row is None:  # a copy won the insert: read its holder (a statement of its own,
                # so its snapshot sees the row that copy committed)
                row = conn.execute(
                    "SELECT task_id FROM fleet.command_nonces"
                    " WHERE kid = %s AND command_id = %s", (kid, envelope.command_id)).fetchone()
        if row is None:  # pragma: no cover - the sweeper purged it in between: refuse safely
            raise refused(Refusal.EXPIRED, f"command_id {envelope.command_id!r} is no longer "
                          "held: sign a new command")
        return str(row[0])

    def purge_expired(self, now: datetime) -> int:
        """Forget every nonce whose command a copy could no longer pass the window with."""
        with self._store.connection() as conn:
            return conn.execute("DELETE FROM fleet.command_nonces WHERE kept_until < %s",
                                (now,)).rowcount
