"""Server-side sign-in sessions of the console (table ``fleet.console_sessions``).

Signing in proves an API token once (:meth:`SessionStore.open`); the browser then holds only a
random session id (256 bits) in an HttpOnly cookie, and the table keeps that id's sha256
digest, so neither a copy of the table nor a log line can sign anyone in. Every request
(:meth:`SessionStore.resume`) checks, in this order:

1. the digest names a session whose absolute expiry (``expires_at``) has not passed and that
   was seen within the idle timeout;
2. its principal is still live in the principal directory, with the same token it signed in
   with (a revoked principal or a rotated token ends every session of it at once: no cache);

and then, for a person's own request (:meth:`SessionStore.resume`; not for what a page does
by itself, :meth:`SessionStore.look`), refreshes ``last_seen_at``. A session that fails a
check is deleted; so is every expired one at the next sign-in. Sign-out
(:meth:`SessionStore.close`) deletes the row.

The CSRF token of a session is derived from the session id (HMAC-SHA256 of a fixed label under
the id): it is tied to the session, stored nowhere, and only the cookie's holder can compute it.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final

from application.principals.directory import PrincipalDirectory, PrincipalNotFound
from events import EventStore
from events.eventstore.model import Clock, utc_now
from saga_core.access.roles import Principal

__all__ = ["OpenedSession", "SessionPolicy", "SessionStore", "Viewer", "csrf_token_for"]

SESSION_ID_BYTES: Final = 32
_CSRF_LABEL: Final = b"sagafleet-console-csrf"
_LAST_SEEN_GRANULARITY: Final = timedelta(seconds=15)
"""``last_seen_at`` is written at most this often per session (a page of requests writes once);
the idle timeout is therefore exact to within this much."""


@dataclass(frozen=True)
class SessionPolicy:
    """How long a session lives: ``idle`` since the last request, ``absolute`` since sign-in."""

    idle: timedelta = timedelta(minutes=30)
    absolute: timedelta = timedelta(hours=12)

    def __post_init__(self) -> None:
        if self.idle <= timedelta(0) or self.absolute <= timedelta(0):
            raise ValueError("session idle and absolute lifetimes must be positive")


@dataclass(frozen=True)
class Viewer:
    """Who is looking at a page: the signed-in principal and its session's CSRF token.

    Pages read ``viewer.principal`` (tenant, name, roles) and ``viewer.tenant``; forms carry
    ``viewer.csrf`` (see :func:`sagafleet.console.markup.csrf_field`).
    """

    principal: Principal
    csrf: str = field(repr=False)
    session_digest: str = field(repr=False)
    expires_at: datetime

    @property
    def tenant(self) -> str:
        """The only tenant this viewer may see."""
        return self.principal.tenant


@dataclass(frozen=True)
class OpenedSession:
    """A new session: the id to put in the cookie (shown only here) and its viewer."""

    session_id: str = field(repr=False)
    viewer: Viewer


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()


def csrf_token_for(session_id: str) -> str:
    """The synchronizer token of a session (a pure function of its secret id)."""
    return hmac.new(session_id.encode("utf-8", "surrogatepass"), _CSRF_LABEL,
                    hashlib.sha256).hexdigest()


def _well_formed(session_id: str) -> bool:
    return 20 <= len(session_id) <= 100 and all(
        ch.isascii() and (ch.isalnum() or ch in "-_") for ch in session_id)


class SessionStore:
    """The console's sessions in the fleet database; the principal directory is asked on every
    resume."""

    def __init__(self, store: EventStore, principals: PrincipalDirectory,
                 policy: SessionPolicy, clock: Clock = utc_now) -> None:
        self._store = store
        self._principals = principals
        self.policy = policy
        self._clock = clock

    def open(self, token: str) -> OpenedSession:
        """Prove ``token`` and open a session for its principal (``Unauthenticated`` when the
        token proves nobody)."""
        principal = self._principals.authenticate(token)
        record = self._principals.get(principal.tenant, principal.name)
        return self.open_proven(principal, record.token_issued_at)

    def open_proven(self, principal: Principal, token_issued_at: datetime | None) -> OpenedSession:
        """Open a session for a principal proven another way (single sign-on): bound, as a
        token's session is, to the principal's live token at sign-in (None: it has none), so
        a revoke or a token issued later ends it."""
        session_id = secrets.token_urlsafe(SESSION_ID_BYTES)
        self.purge_expired()  # rows of browsers that never came back go at the next sign-in
        now = self._clock()
        expires = now + self.policy.absolute
        with self._store.connection() as conn:
            conn.execute(
                "INSERT INTO fleet.console_sessions (id_digest, tenant, name, token_issued_at,"
                " created_at, last_seen_at, expires_at) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                (_digest(session_id), principal.tenant, principal.name,
                 token_issued_at, now, now, expires))
        return OpenedSession(session_id, Viewer(principal, csrf_token_for(session_id),
                                                _digest(session_id), expires))

    def resume(self, session_id: str) -> Viewer | None:
        """The viewer of a live session, or None (unknown, expired, or its principal revoked
        or its token rotated since sign-in; such a session is deleted). A person's request:
        it counts as activity (``last_seen_at`` moves)."""
        checked = self._checked(session_id)
        if checked is None:
            return None
        viewer, last_seen = checked
        now = self._clock()
        if now - last_seen >= _LAST_SEEN_GRANULARITY:
            with self._store.connection() as conn:
                conn.execute("UPDATE fleet.console_sessions SET last_seen_at = %s"
                             " WHERE id_digest = %s", (now, viewer.session_digest))
        return viewer

    def look(self, session_id: str) -> Viewer | None:
        """As :meth:`resume`, for what a page does on its own (a live refresh, the event
        stream's heartbeat): it is not activity, so an open tab does not keep a session
        alive past its idle timeout."""
        checked = self._checked(session_id)
        return None if checked is None else checked[0]

    def _checked(self, session_id: str) -> tuple[Viewer, datetime] | None:
        """The live session's viewer and when its person was last seen, or None."""
        if not _well_formed(session_id):
            return None
        digest = _digest(session_id)
        now = self._clock()
        with self._store.connection() as conn:
            row = conn.execute(
                "SELECT tenant, name, token_issued_at, last_seen_at, expires_at"
                " FROM fleet.console_sessions WHERE id_digest = %s", (digest,)).fetchone()
        if row is None:
            return None
        tenant, name, issued_at, last_seen, expires = row
        if now >= expires or now >= last_seen + self.policy.idle:
            self._delete(digest)
            return None
        try:
            record = self._principals.get(tenant, name)
        except PrincipalNotFound:
            record = None
        if record is None or record.revoked or record.token_issued_at != issued_at:
            self._delete(digest)
            return None
        return Viewer(record.principal(), csrf_token_for(session_id), digest, expires), last_seen

    def close(self, session_id: str) -> None:
        """Sign out: delete the session (nothing happens for an unknown id)."""
        if _well_formed(session_id):
            self._delete(_digest(session_id))

    def purge_expired(self) -> int:
        """Delete every session past its absolute or idle expiry; returns how many."""
        now = self._clock()
        with self._store.connection() as conn:
            cur = conn.execute(
                "DELETE FROM fleet.console_sessions WHERE expires_at <= %s"
                " OR last_seen_at <= %s", (now, now - self.policy.idle))
            return cur.rowcount

    def _delete(self, digest: str) -> None:
        with self._store.connection() as conn:
            conn.execute("DELETE FROM fleet.console_sessions WHERE id_digest = %s", (digest,))
