"""Where the key that signs the log's checkpoints comes from: the settings, never the database;
and where the checkpoint high-water mark is kept (never the database either).

``SAGAFLEET_ANCHOR_KEY`` (the secret itself), else ``SAGAFLEET_ANCHOR_KEY_FILE`` (a file
holding it, e.g. a mounted secret), else, with the embedded database only,
``SAGAFLEET_HOME/anchor.key``: made on first use by whoever takes a checkpoint, readable by
its owner alone. A real deployment without either setting has no key: its checkpoints are
chained but unsigned, and ``verify`` says so.

The high-water mark (events.integrity.anchor_witness) is ``SAGAFLEET_ANCHOR_WITNESS_FILE``, else
``SAGAFLEET_HOME/anchor.witness``: each process that takes checkpoints or verifies keeps its
own record there (point several at one shared file to make it one record).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from datetime import timedelta
from pathlib import Path
from typing import Final

from events.eventstore.model import utc_now
from events.integrity.anchor_audit import AnchorAge
from events.integrity.anchor_witness import WITNESS_FILE, AnchorWitness
from events.integrity.anchors import MIN_KEY_BYTES, AnchorKey
from projections.integrity import IntegrityChecks
from sagafleet.settings import ConfigurationError, Settings

EMBEDDED_KEY_FILE: Final = "anchor.key"
"""The key file's name under SAGAFLEET_HOME when the database is the embedded one."""


def anchor_key(settings: Settings, *, create: bool) -> AnchorKey | None:
    """The configured anchor key, or None. ``create`` makes the embedded default's key file
    when it does not exist yet (for the process that takes checkpoints, not for verify)."""
    if settings.anchor_key is not None:
        return _key(settings.anchor_key.get_secret_value().encode("utf-8"), "SAGAFLEET_ANCHOR_KEY")
    if settings.anchor_key_file is not None:
        return _key(_read(settings.anchor_key_file), "SAGAFLEET_ANCHOR_KEY_FILE")
    if not settings.embedded_database:
        return None
    path = settings.home / EMBEDDED_KEY_FILE
    if not path.exists():
        if not create:
            return None
        _create(path)
    return _key(_read(path), str(path))


def anchor_witness(settings: Settings) -> AnchorWitness:
    """The file that keeps the checkpoint high-water mark outside the database."""
    return AnchorWitness(settings.anchor_witness_file or settings.home / WITNESS_FILE)


def integrity_checks(
    settings: Settings, *, expect: tuple[int, str] | None = None
) -> IntegrityChecks:
    """What verify and audit hold the log to, as configured: the key (never made here),
    the high-water mark, and the age past which a final event must be anchored (as of now)."""
    return IntegrityChecks(
        key=anchor_key(settings, create=False), expect=expect, witness=anchor_witness(settings),
        age=AnchorAge(timedelta(seconds=settings.anchor_max_age_seconds), utc_now()))


def _key(secret: bytes, source: str) -> AnchorKey:
    if len(secret) < MIN_KEY_BYTES:
        raise ConfigurationError(f"{source} is invalid: the anchor key needs at least"
                                 f" {MIN_KEY_BYTES} bytes, it has {len(secret)}")
    return AnchorKey(secret)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes().strip()
    except OSError as exc:
        raise ConfigurationError(f"the anchor key file {path} cannot be read: {exc}") from None


def _create(path: Path) -> None:
    """Write a fresh random key, owner-only from the first byte, and publish it whole: a
    private temporary file linked into place (two processes starting at once cannot both
    publish one; the loser keeps the winner's)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    draft = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(secrets.token_hex(32) + "\n")
        with contextlib.suppress(FileExistsError):
            os.link(draft, path)
    finally:
        draft.unlink(missing_ok=True)
