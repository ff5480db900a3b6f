"""Starting a single sign-on and finishing it at the callback (no HTTP here: the routes call
these from a worker thread).

:meth:`SsoSignIn.start` makes the sign-in's three secrets: the ``state`` (the browser keeps
it in a cookie; it comes back in the callback's query, binding the callback to the browser
that started), the ``nonce`` (comes back inside the ID token, binding the token to this
sign-in) and the PKCE ``code_verifier`` (its S256 challenge goes to the provider; the verifier
only with the code exchange, so an intercepted code is useless). The nonce and verifier wait
in ``fleet.oidc_sign_ins`` under the state's digest for :data:`PENDING_FOR`.

:meth:`SsoSignIn.finish` checks, in order: the provider reported no error; the callback's
state is the cookie's; the pending sign-in exists and is taken (deleted: a state works once,
so a replayed callback is refused before the provider is asked) and has not expired; the
provider trades the code for tokens (a code used twice is refused there); the ID token passes
every check (:mod:`~sagafleet.console.sso.id_token`, the key set read again once for an
unknown key id); the claims map to a person with a role (:mod:`~sagafleet.console.sso.person`);
the directory binds the identity to a person principal
(:mod:`application.principals.identities`). Then a console session opens for that principal,
as a token's would. Anything else is :class:`~sagafleet.console.sso.refusal.SsoRefused`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Final
from urllib.parse import urlencode

from application.principals.identities import (
    ExternalIdentity,
    IdentityRefused,
    PostgresIdentities,
    SignInOutcome,
)
from events import EventStore
from events.eventstore.model import Clock, utc_now
from sagafleet.console.sessions import OpenedSession, SessionStore
from sagafleet.console.sso.id_token import (
    Expected,
    UnknownSigningKey,
    VerifiedIdToken,
    verify_id_token,
)
from sagafleet.console.sso.person import SsoPerson, person_of
from sagafleet.console.sso.provider import OidcProvider
from sagafleet.console.sso.refusal import SsoRefused
from sagafleet.sso_settings import OidcSettings

__all__ = ["PENDING_FOR", "FinishedSignIn", "SsoSignIn", "StartedSignIn", "code_challenge"]

PENDING_FOR: Final = timedelta(minutes=10)
"""How long a person has at the provider between leaving the console and coming back."""
_PARAM_CHARS: Final = 4096


def code_challenge(verifier: str) -> str:
    """The PKCE S256 challenge of a verifier (RFC 7636 4.2)."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _digest(state: str) -> str:
    return hashlib.sha256(state.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class StartedSignIn:
    """Where to send the browser, and the state for its cookie."""

    authorization_url: str
    state: str = field(repr=False)


@dataclass(frozen=True)
class FinishedSignIn:
    """A person signed in: their session, where they were going, and what the directory did."""

    opened: OpenedSession
    next_path: str
    person: SsoPerson
    outcome: SignInOutcome


@dataclass(frozen=True)
class _Pending:
    nonce: str = field(repr=False)
    code_verifier: str = field(repr=False)
    next_path: str


class SsoSignIn:
    """Single sign-on through one provider, opening sessions in the console's store."""

    def __init__(self, settings: OidcSettings, store: EventStore, sessions: SessionStore, *,
                 provider: OidcProvider | None = None, clock: Clock = utc_now) -> None:
        self.settings = settings
        self.provider = provider or OidcProvider(settings)
        self._store = store
        self._sessions = sessions
        self._identities = PostgresIdentities(store, clock)
        self._clock = clock

    def start(self, next_path: str) -> StartedSignIn:
        """A new sign-in's authorization URL (``ProviderUnavailable`` when the provider's
        discovery document cannot be read)."""
        endpoint = self.provider.metadata().authorization_endpoint
        state, nonce = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        verifier = secrets.token_urlsafe(48)  # 64 characters of the unreserved set
        now = self._clock()
        with self._store.connection() as conn:
            conn.execute("DELETE FROM fleet.oidc_sign_ins WHERE expires_at <= %s", (now,))
            conn.execute(
                "INSERT INTO fleet.oidc_sign_ins (state_digest, nonce, code_verifier,"
                " next_path, created_at, expires_at) VALUES (%s, %s, %s, %s, %s, %s)",
                (_digest(state), nonce, verifier, next_path, now, now + PENDING_FOR))
        query = urlencode({
            "response_type": "code", "client_id": self.settings.client_id,
            "redirect_uri": self.settings.redirect_url,
            "scope": " ".join(self.settings.scopes), "state": state, "nonce": nonce,
            "code_challenge": code_challenge(verifier), "code_challenge_method": "S256"})
        separator = "&" if "?" in endpoint else "?"
        return StartedSignIn(f"{endpoint}{separator}{query}", state)

    def finish(self, *, cookie_state: str, state: str, code: str,
               error: str = "") -> FinishedSignIn:
        """Finish the sign-in the callback's query reports (see the module docstring)."""
        if error:
            raise SsoRefused("provider_refused", f"the provider did not sign you in "
                             f"({error[:64]})", status=403)
        if not state or not cookie_state or len(state) > _PARAM_CHARS or not \
                hmac.compare_digest(state.encode(), cookie_state.encode()):
            raise SsoRefused("bad_state", "this sign-in did not start in this browser (its "
                             "state is missing or another's): sign in again", status=403)
        pending = self._take(state)
        if not code or len(code) > _PARAM_CHARS:
            raise SsoRefused("no_code", "the provider sent no sign-in code", status=400)
        id_token = self.provider.exchange_code(code, pending.code_verifier)
        verified = self._verified(id_token, pending.nonce)
        person = person_of(verified, self.settings)
        try:
            signed_in = self._identities.sign_in(ExternalIdentity(
                person.issuer, person.subject, person.tenant, person.name, person.roles,
                person.groups))
        except IdentityRefused as exc:
            raise SsoRefused("identity_refused", str(exc), status=403) from None
        opened = self._sessions.open_proven(signed_in.principal, signed_in.token_issued_at)
        return FinishedSignIn(opened, pending.next_path, person, signed_in.outcome)

    def _take(self, state: str) -> _Pending:
        """The pending sign-in of ``state``, deleted as it is read (a state works once)."""
        with self._store.connection() as conn:
            row = conn.execute(
                "DELETE FROM fleet.oidc_sign_ins WHERE state_digest = %s"
                " RETURNING nonce, code_verifier, next_path, expires_at",
                (_digest(state),)).fetchone()
        if row is None:
            raise SsoRefused("bad_state", "this sign-in was finished already or never started "
                             "(a callback works once): sign in again", status=403)
        nonce, verifier, next_path, expires_at = row
        if self._clock() >= expires_at:
            raise SsoRefused("expired_state", "this sign-in took longer than "
                             f"{int(PENDING_FOR.total_seconds() // 60)} minutes at the "
                             "provider: sign in again", status=403)
        return _Pending(nonce, verifier, next_path)

    def _verified(self, id_token: str, nonce: str) -> VerifiedIdToken:
        expected = Expected(self.settings.issuer, self.settings.client_id, nonce,
                            self._clock().timestamp(), self.settings.clock_skew_s)
        try:
            return verify_id_token(id_token, self.provider.jwks(), expected)
        except UnknownSigningKey:
            refreshed = self.provider.refreshed_jwks()  # the provider may have rotated keys
            if refreshed is None:
                raise
            return verify_id_token(id_token, refreshed, expected)
