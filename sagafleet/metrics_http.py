"""The metrics endpoints over HTTP: ``GET /metrics`` of the projector and of each worker,
answering only to the fleet role.

What they expose is the whole fleet's: the projector's saga figures of every tenant (labelled
``tenant``), the dead letters of every tenant and of none, each worker's work for everyone.
No tenant may read that, so a scrape must carry the API token of a principal whose roles
allow :attr:`~saga_core.access.roles.Action.FLEET` (the ``fleet_operator`` role):
``Authorization: Bearer sft_…`` (Prometheus: ``authorization: {credentials_file: …}``).
Without a valid token the answer is 401 (``WWW-Authenticate: Bearer``), with a token whose
principal lacks the role 403; the token is never echoed, and nothing is read before the
token is proven. A tenant reads its own figures with ``sagafleet stats`` and on the
console's Health page, both scoped to its token's tenant.

A token is checked against the principal directory at every scrape (a rotation or
revocation takes effect at the next one). While the directory cannot be reached (the
database is down), a token this process admitted before is still admitted — what a worker
did is most worth seeing during an outage — and any other is refused (503): a token is never
admitted for the first time without the directory's word.

:class:`MetricsHttpServer` serves any such app on a background thread (one thread per
scrape, so a slow read never blocks the next connection).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any, Final
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from application.principals.directory import PrincipalDirectory, token_digest
from saga_core.access.roles import Action, NotPermitted, Unauthenticated, check_permitted
from saga_core.errors import ErrorKind, SagaError

__all__ = ["FleetOnly", "MetricsHttpServer", "WsgiApp"]

log = logging.getLogger(__name__)

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
"""A WSGI application."""

REALM: Final = "sagafleet-metrics"
MAX_AUTHORIZATION_CHARS: Final = 4096
"""Longest Authorization header read (a bearer token is 47 characters)."""

NO_TOKEN: Final = ("unauthenticated: a scrape of the fleet's metrics carries the API token of a "
                   "principal with the fleet_operator role, as 'Authorization: Bearer <token>'")


def _bearer_token(environ: dict[str, Any]) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    header = environ.get("HTTP_AUTHORIZATION")
    if not isinstance(header, str) or len(header) > MAX_AUTHORIZATION_CHARS:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def _plain(start_response: Callable[..., Any], status: str, text: str,
           extra: list[tuple[str, str]] | None = None) -> list[bytes]:
    body = f"{text}\n".encode()
    start_response(status, [("Content-Type", "text/plain; charset=utf-8"),
                            ("Content-Length", str(len(body))),
                            ("Cache-Control", "no-store"), *(extra or [])])
    return [body]


class FleetOnly:
    """WSGI middleware: ``app`` answers only to a principal allowed :attr:`Action.FLEET`,
    proven by the bearer token of each request (see the module's docstring)."""

    def __init__(self, app: WsgiApp, directory: PrincipalDirectory) -> None:
        self._app = app
        self._directory = directory
        self._admitted: set[str] = set()  # digests the directory last said hold the role
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        """Serve ``app`` to the fleet role; 401, 403 or 503 to anyone else."""
        token = _bearer_token(environ)
        if token is None:
            return self._unauthenticated(start_response, NO_TOKEN)
        digest = token_digest(token)
        try:
            principal = self._directory.authenticate(token)
            check_permitted(principal, Action.FLEET, "the fleet's metrics")
        except Unauthenticated:
            self._forget(digest)
            return self._unauthenticated(start_response, NO_TOKEN)
        except NotPermitted as exc:
            self._forget(digest)
            return _plain(start_response, "403 Forbidden", f"forbidden: {exc}")
        except SagaError as exc:
            if exc.kind is not ErrorKind.UNAVAILABLE or not self._was_admitted(digest):
                return _plain(start_response, "503 Service Unavailable",
                              f"metrics unavailable: the token cannot be checked now ({exc})")
            log.warning("metrics: the principal directory is unavailable (%s); serving a "
                        "token admitted before", exc)
        else:
            with self._lock:
                self._admitted.add(digest)
        return self._app(environ, start_response)

    def _was_admitted(self, digest: str) -> bool:
        with self._lock:
            return digest in self._admitted

    def _forget(self, digest: str) -> None:
        with self._lock:
            self._admitted.discard(digest)

    @staticmethod
    def _unauthenticated(start_response: Callable[..., Any], text: str) -> list[bytes]:
        return _plain(start_response, "401 Unauthorized", text,
                      [("WWW-Authenticate", f'Bearer realm="{REALM}"')])


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        log.debug(format, *args)


class _ThreadingWSGIServer(WSGIServer):
    """One thread per scrape, so a slow query never blocks the next scrape's connect."""

    daemon_threads = True

    def process_request(self, request: Any, client_address: Any) -> None:
        threading.Thread(target=self._handle, args=(request, client_address),
                         daemon=True).start()

    def _handle(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:  # noqa: BLE001 - one failed connection must not stop the server
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)


class MetricsHttpServer:
    """Serves a WSGI app (a guarded metrics endpoint) until :meth:`close`."""

    def __init__(self, app: WsgiApp, host: str = "0.0.0.0",  # noqa: S104
                 port: int = 9464) -> None:
        self._server = make_server(host, port, app, _ThreadingWSGIServer,
                                   handler_class=_QuietHandler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._serving = False

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        return int(self._server.server_address[1])

    def start(self) -> MetricsHttpServer:
        """Start serving in the background."""
        self._thread.start()
        self._serving = True
        return self

    def serve_forever(self) -> None:
        """Serve in the calling thread."""
        self._serving = True
        self._server.serve_forever()

    def close(self) -> None:
        """Stop serving and free the port."""
        if self._serving:
            self._server.shutdown()
        self._server.server_close()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
