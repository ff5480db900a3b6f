"""The console's web app: :func:`create_app` wires the gate, the security headers, the pages,
the static files and the live event stream around one :class:`~sagafleet.console.core.Console`.

Pages are discovered: every module of :mod:`sagafleet.console.pages` that defines
``routes(console) -> list[BaseRoute]`` is mounted (and its ``NAV``, when it has one, joins the
navigation), so a page is added by adding a module, without touching this one.

Errors a page raises become pages too: a :class:`~saga_core.errors.SagaError` is answered
with the status of its kind (403 not permitted, 404 not found, 409 conflict, ...) and its
message, escaped, in the frame; a 401 or 403 is a line of the security log.

Outermost runs :class:`~sagafleet.security_log.RequestLog` (the security log, and the access
log when it is on), then the security headers, then the gate.
"""

from __future__ import annotations

import asyncio
import importlib
import pkgutil
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from importlib.resources import files
from types import ModuleType
from typing import Any, Final

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from saga_core.errors import SagaError
from sagafleet.console import actions, signin, stream
from sagafleet.console import pages as pages_package
from sagafleet.console.core import Console, note_error, status_of
from sagafleet.console.gate import FRAGMENT_HEADER, VIEWER_KEY, Gate
from sagafleet.console.headers import SecurityHeaders, security_headers
from sagafleet.console.layout import NavLink, sign_in_frame
from sagafleet.console.markup import html
from sagafleet.console.sso import routes as sso_routes
from sagafleet.security_log import RequestLog

__all__ = ["HOME", "create_app", "page_modules"]

HOME: Final = "/queue"
"""Where ``/`` and a fresh sign-in lead."""



def page_modules() -> list[ModuleType]:
    """Every module of ``sagafleet.console.pages`` that defines ``routes``, by name."""
    found = []
    for info in sorted(pkgutil.iter_modules(pages_package.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{pages_package.__name__}.{info.name}")
        if callable(getattr(module, "routes", None)):
            found.append(module)
    return found


def create_app(console: Console, *, modules: Iterable[ModuleType] | None = None) -> Starlette:
    """The ASGI app serving ``console`` (``modules``: the page modules, default all)."""
    chosen = list(page_modules() if modules is None else modules)
    console.nav[:] = sorted(m.NAV for m in chosen if isinstance(getattr(m, "NAV", None),
                                                                NavLink))
    routes: list[BaseRoute] = [Route("/", _home, methods=["GET"]),
                               Route("/favicon.ico", _favicon, methods=["GET"])]
    routes += signin.routes(console)
    if console.sso is not None:
        routes += sso_routes.routes(console.sso, console.sessions)
    routes += stream.routes(console)
    routes += actions.routes(console)
    for module in chosen:
        routes += module.routes(console)
    routes.append(Mount("/static", app=StaticFiles(
        directory=str(files("sagafleet.console").joinpath("static"))), name="static"))

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        console.live.start(asyncio.get_running_loop())
        try:
            yield
        finally:
            console.live.stop()

    return Starlette(
        routes=routes,
        middleware=[Middleware(RequestLog), Middleware(SecurityHeaders),
                    Middleware(Gate, sessions=console.sessions)],
        # Exception: Starlette's outermost middleware answers a crash, outside SecurityHeaders.
        exception_handlers={SagaError: _error_page(console), Exception: _internal_error},
        lifespan=lifespan,
    )


def _home(request: Request) -> Response:
    return RedirectResponse(HOME, status_code=303)


def _favicon(request: Request) -> Response:
    """The icon a browser asks for by its old name (pages link the SVG itself)."""
    icon = files("sagafleet.console").joinpath("static", "favicon.svg").read_bytes()
    return Response(icon, media_type="image/svg+xml",
                    headers={"Cache-Control": "public, max-age=86400"})


def _internal_error(request: Request, exc: Exception) -> Response:
    """A crash's answer: no detail, and the headers every console response carries (the
    traceback still reaches the server's log: Starlette re-raises after answering)."""
    headers = {name.decode(): value.decode() for name, value in
               security_headers(static=False, https=request.url.scheme == "https")}
    return PlainTextResponse("internal error", status_code=500, headers=headers)


def _error_page(console: Console) -> Callable[[Request, Exception], Any]:
    def render(request: Request, exc: Exception) -> Response:
        if not isinstance(exc, SagaError):  # registered for SagaError only
            return PlainTextResponse("internal error", status_code=500)
        status = status_of(exc)
        note_error(request, exc)
        body = html('<section class="problem"><h1>{}</h1><p class="notice error" '
                    'role="alert">{}</p>{}</section>', _title(status), str(exc),
                    html('<p class="hint">{}</p>', exc.hint) if exc.hint else "")
        if FRAGMENT_HEADER in request.headers:
            return console.fragment(body, status=status)
        if VIEWER_KEY in request.scope:
            return console.page(request, _title(status), body, status=status)
        if status >= 500:
            return PlainTextResponse(str(exc), status_code=status)
        return sign_in_frame(_title(status), body, status=status)

    return render


def _title(status: int) -> str:
    return {400: "Not accepted", 401: "Not signed in", 403: "Not permitted",
            404: "Not found", 409: "Changed meanwhile", 503: "Unavailable"}.get(
                status, "Something went wrong")
