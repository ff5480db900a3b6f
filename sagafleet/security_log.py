"""The security log and the access log of the console and the gateway: one JSON object a line.

**Security log** (logger :data:`SECURITY_LOGGER`, level WARNING): one line per refusal at the
edge: a refused, throttled or slowed sign-in, a CSRF refusal, every 401 and 403, a live
stream over its bound, a caller that tried to choose its tenant or actor. Each line's message
is a JSON object (:class:`SecurityEvent`): ``event``, ``reason``, and where known ``status``,
``method``, ``path``, ``client`` (the address the server heard, a trusted proxy's
``X-Forwarded-For`` when uvicorn is told to believe it), ``tenant``, ``principal``, ``tool``
and ``delay_s``. Never a token, a session id, a cookie, a query string or a form field: a
line may be shipped to people who must not be able to sign in with it.

**Access log** (logger :data:`ACCESS_LOGGER`, level INFO): one line per HTTP request
(method, path without its query, status, milliseconds to the answer's start, client, tenant,
principal) when that logger is enabled for INFO; ``SAGAFLEET_ACCESS_LOG=true`` enables it in
``sagafleet console`` and ``sagafleet mcp --http`` (:func:`configure_access_log`). Off, a
request costs one level check (``scripts/bench_request_log.py``: a few microseconds in all).

:class:`RequestLog` is the ASGI middleware that writes both, outermost, so it sees the status
the client got. Whoever refuses a request says why with :func:`note_refusal` (the event and a
reason in the request's scope); a 401, 403 or 429 that nobody explained is logged all the
same, its event named after its status.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import asdict, dataclass
from typing import Any, Final

from saga_core.access.roles import Principal
from saga_core.errors import ErrorKind

__all__ = [
    "ACCESS_LOGGER",
    "EVENT_OF_KIND",
    "PRINCIPAL_SCOPE_KEY",
    "SECURITY_LOGGER",
    "RequestLog",
    "SecurityEvent",
    "client_address",
    "configure_access_log",
    "note_refusal",
    "record",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

SECURITY_LOGGER: Final = "sagafleet.security"
ACCESS_LOGGER: Final = "sagafleet.access"
PRINCIPAL_SCOPE_KEY: Final = "sagafleet.principal"
"""Where the console's gate and the gateway's bearer check leave the proven principal."""
REFUSAL_SCOPE_KEY: Final = "sagafleet.refusal"
"""Where a refusal's event and reason wait for :class:`RequestLog`."""
EVENT_OF_STATUS: Final = {401: "unauthenticated", 403: "forbidden", 429: "throttled"}
"""The event of a refusal nobody explained, by its status (each of these is always logged)."""
EVENT_OF_KIND: Final = {ErrorKind.UNAUTHENTICATED: "unauthenticated",
                        ErrorKind.FORBIDDEN: "forbidden"}
"""The event of an error that is a refusal (a page's 401 or 403, a tool's error), by kind."""
TEXT_CHARS: Final = 300
"""The longest reason or path a line carries (a caller chooses the path: it is cut, never
trusted to be short)."""

_security = logging.getLogger(SECURITY_LOGGER)
_access = logging.getLogger(ACCESS_LOGGER)


@dataclass(frozen=True)
class SecurityEvent:
    """One line of the security log (fields left None are left out of the line)."""

    event: str
    reason: str = ""
    status: int | None = None
    method: str | None = None
    path: str | None = None
    client: str | None = None
    tenant: str | None = None
    principal: str | None = None
    tool: str | None = None
    delay_s: float | None = None
    """How long the request was slowed before its answer (a throttled sign-in)."""

    def line(self) -> str:
        """The JSON object this event is logged as (sorted keys, on one line)."""
        fields = {name: _cut(value) if isinstance(value, str) else value
                  for name, value in asdict(self).items() if value is not None}
        return json.dumps(fields, sort_keys=True, ensure_ascii=False)


def record(event: SecurityEvent) -> None:
    """Write ``event`` to the security log."""
    _security.warning(event.line())


def note_refusal(scope: Scope, event: str, reason: str, *,
                 delay_s: float | None = None) -> None:
    """Say why this request is refused (or was slowed: ``delay_s``); :class:`RequestLog`
    logs it with the response."""
    scope[REFUSAL_SCOPE_KEY] = (event, reason, delay_s)


def client_address(scope: Scope) -> str | None:
    """The client's address as the server heard it (None: not a network connection)."""
    client = scope.get("client")
    return str(client[0]) if client else None


def configure_access_log(enabled: bool) -> None:
    """Turn the access log on (INFO) or off (WARNING) for this process."""
    _access.setLevel(logging.INFO if enabled else logging.WARNING)


def _cut(text: str) -> str:
    return text if len(text) <= TEXT_CHARS else text[:TEXT_CHARS] + "…"


def _who(scope: Scope) -> tuple[str | None, str | None]:
    principal = scope.get(PRINCIPAL_SCOPE_KEY)
    if isinstance(principal, Principal):
        return principal.tenant, principal.name
    return None, None


class RequestLog:
    """ASGI middleware: a security line for each refused request, an access line for each
    request while the access log is on. Outermost, so the status is the one sent."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Call the app, noting the status it answers with; log once the answer started."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0

        async def noting_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                self._log(scope, status, started)
            await send(message)

        await self.app(scope, receive, noting_status)
        if status == 0:  # the app ended without answering (the server answers 500)
            self._log(scope, 500, started)

    @staticmethod
    def _log(scope: Scope, status: int, started: float) -> None:
        refusal = scope.get(REFUSAL_SCOPE_KEY)
        if refusal is not None or status in EVENT_OF_STATUS:
            event, reason, delay_s = (refusal if refusal is not None
                                      else (EVENT_OF_STATUS[status], "", None))
            tenant, principal = _who(scope)
            record(SecurityEvent(event, reason, status, scope.get("method"), scope["path"],
                                 client_address(scope), tenant, principal, delay_s=delay_s))
        if _access.isEnabledFor(logging.INFO):
            tenant, principal = _who(scope)
            line = {"method": scope.get("method"), "path": _cut(scope["path"]),
                    "status": status, "ms": round((time.perf_counter() - started) * 1000, 1),
                    "client": client_address(scope), "tenant": tenant,
                    "principal": principal}
            _access.info(json.dumps({k: v for k, v in line.items() if v is not None},
                                    sort_keys=True, ensure_ascii=False))
