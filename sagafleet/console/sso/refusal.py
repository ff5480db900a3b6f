"""Why a single sign-on is refused: :class:`SsoRefused`, with a code and a sentence.

The code is what the security log records (``sso_refused`` with ``code: sentence``); the
sentence is what the person reads on the refusal page. Neither ever carries a token, a code,
a state or a nonce.
"""

from __future__ import annotations

from saga_core.errors import ErrorKind, SagaError

__all__ = ["ProviderUnavailable", "SsoRefused"]


class SsoRefused(SagaError):
    """A single sign-on that cannot sign anyone in; ``code`` names the check that failed."""

    kind = ErrorKind.UNAUTHENTICATED

    def __init__(self, code: str, message: str, *, status: int = 401) -> None:
        self.code = code
        self.status = status
        super().__init__(message)


class ProviderUnavailable(SsoRefused):
    """The provider could not be reached, or answered with something that is not OpenID
    Connect; signing in may work later."""

    kind = ErrorKind.UNAVAILABLE

    def __init__(self, message: str) -> None:
        super().__init__("provider_unavailable", message, status=502)
