"""The OpenID provider as the console sees it: discovery, signing keys, the code exchange.

:class:`OidcProvider` reads the discovery document
(``<issuer>/.well-known/openid-configuration``) once and keeps it; its ``issuer`` must be the
configured one exactly, and a provider that lists its PKCE methods must list ``S256``. The
key set (JWKS) is kept too, and read again when a token names a key id it does not hold (a
provider rotated its keys), at most once per :data:`JWKS_REFRESH_S`, so a stream of forged
key ids cannot make the console hammer the provider.

HTTP is the standard library's (``urllib``), in the caller's thread: the console calls these
from a worker thread. Every failure to reach the provider, or an answer that is not the JSON
it should be, is :class:`~sagafleet.console.sso.refusal.ProviderUnavailable`; a token endpoint
that refuses the code (``invalid_grant``: used twice, expired) is ``SsoRefused`` with code
``code_refused``.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote, urlencode, urlsplit

from sagafleet.console.sso.refusal import ProviderUnavailable, SsoRefused
from sagafleet.sso_settings import OidcSettings

__all__ = ["JWKS_REFRESH_S", "OidcProvider", "ProviderMetadata"]

JWKS_REFRESH_S: Final = 30.0
"""The least time between two reads of the key set prompted by unknown key ids."""
HTTP_TIMEOUT_S: Final = 10.0
ANSWER_BYTES: Final = 1024 * 1024
"""The largest answer read from the provider (a discovery document, a key set, tokens)."""

Monotonic = Callable[[], float]


@dataclass(frozen=True)
class ProviderMetadata:
    """The parts of the discovery document the console uses."""

    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    end_session_endpoint: str | None = None


def _endpoint(document: Mapping[str, Any], name: str, issuer: str) -> str:
    value = document.get(name)
    if not isinstance(value, str):
        raise ProviderUnavailable(f"the provider's discovery document has no {name}")
    parts = urlsplit(value)
    loopback_issuer = urlsplit(issuer).scheme == "http"
    if parts.scheme != "https" and not (loopback_issuer and parts.scheme == "http"):
        raise ProviderUnavailable(f"the provider's {name} is not an https URL")
    return value


def metadata_of(document: Mapping[str, Any], issuer: str) -> ProviderMetadata:
    """The checked metadata of a discovery document for ``issuer``."""
    if document.get("issuer") != issuer:
        raise ProviderUnavailable(
            f"the discovery document names issuer {document.get('issuer')!r}, not the "
            f"configured {issuer!r} (SAGAFLEET_OIDC_ISSUER must be the provider's issuer)")
    methods = document.get("code_challenge_methods_supported")
    if isinstance(methods, list) and "S256" not in methods:
        raise ProviderUnavailable("the provider does not support PKCE with S256")
    end_session = document.get("end_session_endpoint")
    return ProviderMetadata(
        issuer=issuer,
        authorization_endpoint=_endpoint(document, "authorization_endpoint", issuer),
        token_endpoint=_endpoint(document, "token_endpoint", issuer),
        jwks_uri=_endpoint(document, "jwks_uri", issuer),
        end_session_endpoint=end_session if isinstance(end_session, str) else None)


def _read_json(request: urllib.request.Request, what: str) -> tuple[int, Any]:
    """The status and JSON body of one request (error statuses too: a token endpoint says
    why in its body)."""
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as answer:  # noqa: S310
            status, raw = answer.status, answer.read(ANSWER_BYTES + 1)
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read(ANSWER_BYTES + 1)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ProviderUnavailable(f"the provider's {what} cannot be reached: {reason}") from None
    if len(raw) > ANSWER_BYTES:
        raise ProviderUnavailable(f"the provider's {what} answered more than {ANSWER_BYTES} "
                                  "bytes")
    try:
        return status, json.loads(raw)
    except ValueError:
        raise ProviderUnavailable(f"the provider's {what} did not answer JSON "
                                  f"(HTTP {status})") from None


class OidcProvider:
    """One provider of the settings: its metadata and keys, read lazily and kept."""

    def __init__(self, settings: OidcSettings, monotonic: Monotonic = time.monotonic) -> None:
        self.settings = settings
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._metadata: ProviderMetadata | None = None
        self._jwks: Mapping[str, Any] | None = None
        self._jwks_read_at: float | None = None

    def metadata(self) -> ProviderMetadata:
        """The discovery document's metadata (read on first use; a failed read is tried
        again next time)."""
        with self._lock:
            if self._metadata is None:
                url = self.settings.issuer.rstrip("/") + "/.well-known/openid-configuration"
                status, document = _read_json(_get(url), "discovery document")
                if status != 200 or not isinstance(document, dict):
                    raise ProviderUnavailable(
                        f"the provider's discovery document answered HTTP {status}")
                self._metadata = metadata_of(document, self.settings.issuer)
            return self._metadata

    def jwks(self) -> Mapping[str, Any]:
        """The key set as last read (read now on first use)."""
        with self._lock:
            cached = self._jwks
        return cached if cached is not None else self._read_jwks()

    def refreshed_jwks(self) -> Mapping[str, Any] | None:
        """The key set read again, for a token naming a key id the kept set lacks; None when
        it was read less than :data:`JWKS_REFRESH_S` ago (the kept set is current)."""
        with self._lock:
            read_at = self._jwks_read_at
        if read_at is not None and self._monotonic() - read_at < JWKS_REFRESH_S:
            return None
        return self._read_jwks()

    def _read_jwks(self) -> Mapping[str, Any]:
        status, document = _read_json(_get(self.metadata().jwks_uri), "key set (JWKS)")
        if status != 200 or not isinstance(document, dict) or not isinstance(
                document.get("keys"), list):
            raise ProviderUnavailable(f"the provider's key set answered HTTP {status} without "
                                      "a list of keys")
        with self._lock:
            self._jwks, self._jwks_read_at = document, self._monotonic()
        return document

    def exchange_code(self, code: str, code_verifier: str) -> str:
        """Trade the authorization code (with this sign-in's PKCE verifier) for tokens; the
        ID token. The client authenticates with HTTP Basic (client_secret_basic)."""
        settings = self.settings
        body = urlencode({"grant_type": "authorization_code", "code": code,
                          "redirect_uri": settings.redirect_url,
                          "code_verifier": code_verifier}).encode()
        credentials = f"{quote(settings.client_id, safe='')}:" \
                      f"{quote(settings.client_secret, safe='')}"
        request = urllib.request.Request(
            self.metadata().token_endpoint, data=body, method="POST", headers={
                "Content-Type": "application/x-www-form-urlencoded",
                "Accept": "application/json",
                "Authorization": "Basic " + base64.b64encode(credentials.encode()).decode()})
        status, answer = _read_json(request, "token endpoint")
        if not isinstance(answer, dict):
            raise ProviderUnavailable(f"the provider's token endpoint answered HTTP {status} "
                                      "without a JSON object")
        if status == 400 and answer.get("error") == "invalid_grant":
            raise SsoRefused("code_refused", "the provider refused this sign-in's code (used "
                             "already, or expired): sign in again")
        if status != 200:
            error = answer.get("error", "?")
            raise ProviderUnavailable(f"the provider's token endpoint refused the exchange "
                                      f"(HTTP {status}, {str(error)[:64]})")
        id_token = answer.get("id_token")
        if not isinstance(id_token, str):
            raise SsoRefused("malformed_token", "the provider's token answer carries no ID "
                             "token (is openid among SAGAFLEET_OIDC_SCOPES?)")
        return id_token


def _get(url: str) -> urllib.request.Request:
    return urllib.request.Request(url, headers={"Accept": "application/json"})
