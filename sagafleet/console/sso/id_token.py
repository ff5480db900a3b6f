"""The ID token's checks (OpenID Connect Core 3.1.3.7), with ``now`` passed in.

:func:`verify_id_token` takes the token, the provider's key set (a JWKS document) and what
the sign-in expects (:class:`Expected`), and returns the :class:`VerifiedIdToken` or raises
:class:`~sagafleet.console.sso.refusal.SsoRefused` naming the first check that failed:

1. the header: an asymmetric algorithm the console accepts (never ``none``, never an HMAC
   keyed with the client secret), and a key id found in the key set
   (:class:`UnknownSigningKey` otherwise: the caller fetches the key set once more, since a
   provider rotates keys, and asks again);
2. the signature, under that key;
3. ``iss`` is the configured issuer, exactly;
4. ``aud`` names the client; with other audiences beside it, ``azp`` must be the client, and
   an ``azp`` given must be the client;
5. ``exp`` has not passed, ``iat`` is not in the future and ``nbf`` (when given) has come,
   each give or take the clock skew;
6. ``nonce`` is the one this sign-in sent (binding the token to this browser's sign-in);
7. ``sub`` is a non-empty text.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import jwt
from jwt.exceptions import InvalidKeyError, InvalidSignatureError, PyJWKError, PyJWTError

from sagafleet.console.sso.refusal import SsoRefused

__all__ = ["ACCEPTED_ALGORITHMS", "Expected", "UnknownSigningKey", "VerifiedIdToken",
           "verify_id_token"]

ACCEPTED_ALGORITHMS: Final = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512",
                                        "ES256", "ES384", "ES512", "EdDSA"})
"""Signature algorithms of an ID token the console accepts: public-key ones only."""
ID_TOKEN_CHARS: Final = 16 * 1024


class UnknownSigningKey(SsoRefused):
    """The token names a key the key set does not hold (maybe rotated in since it was read)."""

    def __init__(self, kid: str | None) -> None:
        self.kid = kid
        super().__init__("unknown_key", f"the ID token is signed with a key the provider "
                         f"does not publish (key id {kid!r})")


@dataclass(frozen=True)
class Expected:
    """What this sign-in's ID token must say."""

    issuer: str
    client_id: str
    nonce: str = field(repr=False)
    now: float
    """Seconds since the epoch, when the token is checked."""
    clock_skew_s: float = 60.0


@dataclass(frozen=True)
class VerifiedIdToken:
    """An ID token whose every check passed: who (issuer, subject) and all its claims."""

    issuer: str
    subject: str
    claims: Mapping[str, Any]


def _refused(code: str, message: str) -> SsoRefused:
    return SsoRefused(code, message)


def _header(token: str) -> dict[str, Any]:
    if not isinstance(token, str) or not token or len(token) > ID_TOKEN_CHARS:
        raise _refused("malformed_token", "the provider's ID token is missing or too long")
    try:
        header = jwt.get_unverified_header(token)
    except PyJWTError:
        raise _refused("malformed_token", "the provider's ID token is not a signed JWT") from None
    return header


def _signing_key(jwks: Mapping[str, Any], kid: str | None, alg: str) -> Any:
    """The key of ``kid`` in the key set (with no kid: the set's only signing key)."""
    candidates = []
    for entry in jwks.get("keys", []) if isinstance(jwks.get("keys"), list) else []:
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
            continue
        if kid is not None and entry.get("kid") != kid:
            continue
        if entry.get("alg") not in (None, alg):
            continue
        try:
            candidates.append(jwt.PyJWK.from_dict(entry, algorithm=alg))
        except (PyJWKError, InvalidKeyError):
            continue  # a key of another type (or unusable): not this token's
    if len(candidates) != 1:  # none, or (no kid) several that could be meant
        raise UnknownSigningKey(kid)
    return candidates[0]


def _number(claims: Mapping[str, Any], name: str) -> float:
    value = claims.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _refused("malformed_token", f"the ID token's {name} claim is missing or not a "
                       "number")
    return float(value)


def verify_id_token(token: str, jwks: Mapping[str, Any], expected: Expected) -> VerifiedIdToken:
    """Every check of the module docstring, in order; the verified token or ``SsoRefused``."""
    header = _header(token)
    alg = header.get("alg")
    if alg not in ACCEPTED_ALGORITHMS:
        raise _refused("bad_algorithm", f"the ID token's algorithm {alg!r} is not accepted "
                       f"(one of {sorted(ACCEPTED_ALGORITHMS)})")
    kid = header.get("kid")
    if kid is not None and not isinstance(kid, str):
        raise _refused("malformed_token", "the ID token's key id is not a text")
    key = _signing_key(jwks, kid, alg)
    try:
        claims = jwt.decode(token, key, algorithms=[alg], options={
            "verify_signature": True, "verify_exp": False, "verify_nbf": False,
            "verify_iat": False, "verify_aud": False, "verify_iss": False})
    except InvalidSignatureError:
        raise _refused("bad_signature", "the ID token's signature does not verify under the "
                       "provider's key") from None
    except PyJWTError as exc:
        raise _refused("malformed_token", f"the ID token cannot be read: {exc}") from None
    _check_claims(claims, expected)
    return VerifiedIdToken(claims["iss"], claims["sub"], claims)


def _check_claims(claims: Mapping[str, Any], expected: Expected) -> None:
    if claims.get("iss") != expected.issuer:
        raise _refused("wrong_issuer", f"the ID token was issued by {claims.get('iss')!r}, "
                       f"not by {expected.issuer!r}")
    audience = claims.get("aud")
    audiences = [audience] if isinstance(audience, str) else audience
    if not isinstance(audiences, list) or expected.client_id not in audiences:
        raise _refused("wrong_audience", "the ID token is meant for another client "
                       f"(aud {json.dumps(audience)}), not for {expected.client_id!r}")
    azp = claims.get("azp")
    if (len(audiences) > 1 or azp is not None) and azp != expected.client_id:
        raise _refused("wrong_audience", f"the ID token's authorized party {azp!r} is not "
                       f"{expected.client_id!r}")
    now, skew = expected.now, expected.clock_skew_s
    exp, iat = _number(claims, "exp"), _number(claims, "iat")
    nbf = _number(claims, "nbf") if "nbf" in claims else None
    if now >= exp + skew:
        raise _refused("expired_token", f"the ID token expired {now - exp:.0f} s ago (clock "
                       f"skew allowed: {skew:.0f} s)")
    if iat > now + skew:
        raise _refused("token_from_future", f"the ID token is issued {iat - now:.0f} s in the "
                       f"future (clock skew allowed: {skew:.0f} s)")
    if nbf is not None and nbf > now + skew:
        raise _refused("token_not_yet_valid", f"the ID token is not valid for another "
                       f"{nbf - now:.0f} s")
    nonce = claims.get("nonce")
    if not isinstance(nonce, str) or not hmac.compare_digest(nonce.encode(),
                                                             expected.nonce.encode()):
        raise _refused("wrong_nonce", "the ID token's nonce is not this sign-in's (a replayed "
                       "or someone else's token)")
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject or len(subject) > 255:
        raise _refused("malformed_token", "the ID token's subject (sub) is missing")
