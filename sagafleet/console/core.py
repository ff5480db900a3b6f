"""The console's one explicit object: what every page is given (no globals).

A :class:`Console` holds the fleet (principal directory, the actions' client), the read side
(projections), the session store, the sign-in throttle, the live hub and the navigation;
:func:`sagafleet.console.app.create_app` builds the web app around it, and passes it to every
page module's ``routes(console)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from starlette.requests import Request
from starlette.responses import HTMLResponse

from application.client import SagaClient
from projections import ProjectionContext
from projections.alerts import AlertThresholds
from saga_core.errors import ErrorKind, SagaError
from sagafleet.console.gate import viewer_of
from sagafleet.console.layout import NavLink, fragment_response, page_response
from sagafleet.console.live import LiveHub
from sagafleet.console.markup import Markup
from sagafleet.console.sessions import SessionStore, Viewer
from sagafleet.console.sso.signin import SsoSignIn
from sagafleet.console.throttle import SignInThrottle
from sagafleet.security_log import EVENT_OF_KIND, note_refusal
from workers.fleet import Fleet

__all__ = ["STATUS_OF_KIND", "Console", "note_error", "status_of"]

STATUS_OF_KIND: Final = {
    ErrorKind.INVALID_INPUT: 400,
    ErrorKind.UNAUTHENTICATED: 401,
    ErrorKind.FORBIDDEN: 403,
    ErrorKind.NOT_FOUND: 404,
    ErrorKind.CONFLICT: 409,
    ErrorKind.UNAVAILABLE: 503,
}
"""The HTTP status of each error kind (others: 500)."""


def status_of(error: SagaError) -> int:
    """The HTTP status a page answers ``error`` with."""
    return STATUS_OF_KIND.get(error.kind, 500)


def note_error(request: Request, error: SagaError) -> None:
    """Tell the security log why a page refuses the request, when ``error`` is a refusal (a
    401 or 403): its message names the principal and what it lacks, never a credential."""
    event = EVENT_OF_KIND.get(error.kind)
    if event is not None:
        note_refusal(request.scope, event, str(error))


@dataclass
class Console:
    """Everything a page needs, built once per process."""

    fleet: Fleet
    """The fleet: its principal directory proves tokens; :meth:`client` acts through it."""
    read: ProjectionContext
    """The read side (projections' read models and the log), on the read replica when one
    is configured (it may lag); always pass ``viewer.tenant``."""
    fresh: ProjectionContext
    """The same reads on the primary, for a page that must show what an action just
    recorded (read-your-writes: the page an action redirects to)."""
    sessions: SessionStore
    live: LiveHub
    throttle: SignInThrottle
    """Slows sign-ins of an address or token prefix that failed too often."""
    nav: list[NavLink] = field(default_factory=list)
    """Filled by ``create_app`` from the page modules' ``NAV``."""
    alert_thresholds: AlertThresholds = field(default_factory=AlertThresholds)
    """The business alerts' thresholds, the exporter's (the metrics window's)."""
    sso: SsoSignIn | None = None
    """Single sign-on through the company's OpenID provider, when configured."""

    def read_after(self, request: Request) -> ProjectionContext:
        """Where a page reads: :attr:`fresh` right after an action (its redirect carries
        ``done``), else :attr:`read`."""
        return self.fresh if "done" in request.query_params else self.read

    def client(self, viewer: Viewer) -> SagaClient:
        """The client that acts as the signed-in principal: the same API and the same
        server-side role checks as the command line (``NotPermitted`` -> 403 page)."""
        return self.fleet.client_for(viewer.principal)

    def page(self, request: Request, title: str, body: Markup, *, current: str = "",
             status: int = 200) -> HTMLResponse:
        """A whole page for the request's viewer; ``current`` is the nav path to highlight."""
        return self._shown(page_response(viewer_of(request), self.nav, title, body,
                                         current=current, status=status))

    def fragment(self, body: Markup, *, status: int = 200) -> HTMLResponse:
        """A fragment (what ``data-live`` elements are refreshed with)."""
        return self._shown(fragment_response(body, status=status))

    def _shown(self, response: HTMLResponse) -> HTMLResponse:
        """The response with the secret values of every saga it names replaced (the last
        line of defence by value: a page shows what the read models hold, which the log's
        writers checked already; counted at the place ``page``)."""
        text = bytes(response.body).decode("utf-8")
        guard = self.fleet.secret_guard
        needles = guard.named_in(text)
        if not needles:
            return response
        # A page is a document: ids, keys and form tokens in it must stay as they are, so
        # the document's rule applies (saga_core.secret_scrub.MIN_IN_DOCUMENT).
        clean = guard.document(text, needles, "page")
        if clean == text:
            return response
        return HTMLResponse(clean, status_code=response.status_code)
