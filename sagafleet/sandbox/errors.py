"""What a sandbox provider raises: the shape of a real API's failures, not sagafleet errors.

These deliberately do not derive from :class:`~saga_core.errors.SagaError`: they play the
part of an HTTP client's exceptions, and the tool adapters translate them into
:class:`~workers.tools.ToolError` exactly once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class ProviderError(Exception):
    """The provider answered with an error status (like an HTTP 4xx/5xx with a code)."""

    def __init__(
        self, status: int, code: str, message: str, details: Mapping[str, Any] | None = None
    ) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.details: dict[str, Any] = dict(details or {})
        super().__init__(f"{status} {code}: {message}")


class ProviderTimeout(Exception):
    """The caller gave up waiting: the request may or may not have committed."""

    def __init__(self, provider: str, operation: str, key: str) -> None:
        self.provider = provider
        self.operation = operation
        self.key = key
        super().__init__(f"{provider}.{operation} timed out for key {key!r}")


def invalid_request(message: str, **details: Any) -> ProviderError:
    """400: the request is malformed; retrying it cannot help."""
    return ProviderError(400, "invalid_request", message, details)


def not_found(what: str, ident: str) -> ProviderError:
    """404: the resource a compensation targets does not exist."""
    return ProviderError(404, "not_found", f"{what} {ident!r} does not exist", {what: ident})


def precondition_failed(what: str, ident: str, expected: int, actual: int) -> ProviderError:
    """412: the target changed since the forward step (version differs)."""
    return ProviderError(
        412,
        "precondition_failed",
        f"{what} {ident!r} is at version {actual}, expected {expected}",
        {what: ident, "expected_version": expected, "actual_version": actual},
    )
