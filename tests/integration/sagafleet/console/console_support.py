"""What the console tests share: signing a test client in through the sign-in form, and a
saga that waits for a person."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from principal_support import token_for
from starlette.testclient import TestClient

from saga_core.access.roles import PrincipalKind
from saga_core.errors import ErrorKind, SagaError
from sagafleet.console.sessions import SessionPolicy

POLICY = SessionPolicy(idle=timedelta(minutes=30), absolute=timedelta(hours=12))
CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def csrf_of(page: str) -> str:
    """The CSRF token of the first form on a page."""
    found = CSRF.search(page)
    assert found, "the page carries no form with a CSRF token"
    return found.group(1)


def sign_in(client: TestClient, token: str) -> None:
    """Sign ``client`` in with ``token`` through the sign-in form."""
    form = client.get("/sign-in")
    response = client.post("/sign-in", data={"csrf": csrf_of(form.text), "token": token,
                                             "next": "/queue"})
    assert response.status_code == 303, response.text


# -- a saga that waits for a person as soon as it starts (no worker needed) ----------------

CAPTURE_DEFINITION = {
    "name": "console_capture",
    "version": 1,
    "description": "Charge a customer's card for a quoted order.",
    "max_approval_requests": 1,
    "input": {
        "amount": {"type": "number", "exclusive_minimum": 0},
        "currency": {"type": "string"},
        "card_token": {"type": "string", "secret": True},
        "note": {"type": "string"},
    },
    "steps": [{
        "id": "capture_payment",
        "tool": "payments.capture",
        "version": 1,
        "semantics": "offsettable",
        "description": "Captures over 1000.00 need a person",
        "args": {"amount": "${input.amount}", "currency": "${input.currency}",
                 "card_token": "${input.card_token}", "reference": "${input.note}"},
        "approval": {"required": True, "scope": "payments.capture of the quoted amount"},
        "compensation": {"tool": "payments.refund", "version": 1,
                         "args": {"capture_id": "${receipt.resource_id}",
                                  "amount": "${receipt.amount}",
                                  "currency": "${receipt.currency}"}},
    }],
}
CARD = "tok_visa_4242_secret_card"


def start_waiting_capture(fleet: Any, *, tenant: str = "default", key: str = "order-1",
                          note: str = "order 1", amount: float = 250_000) -> str:
    """Register the capture definition for ``tenant`` (as its admin) and start one saga (as its
    agent) that waits for an approval at once; returns the saga id."""
    admin = fleet.client_for(fleet.authenticate(token_for(fleet, f"admin-{tenant}", ["admin"],
                                                          tenant=tenant)))
    try:
        admin.register_definition(CAPTURE_DEFINITION)
    except SagaError as exc:  # registered by an earlier call of this test
        if exc.kind is not ErrorKind.CONFLICT:
            raise
    agent = fleet.client_for(fleet.authenticate(token_for(
        fleet, f"bot-{tenant}", ["agent"], tenant=tenant, kind=PrincipalKind.AGENT)))
    card = agent.put_secret(CARD).as_input()
    started = agent.start("console_capture", {"amount": amount, "currency": "EUR",
                                              "card_token": card, "note": note},
                          key=key, reason="the customer confirmed the quote")
    return str(started.saga_id)


def events_of(fleet: Any, saga_id: str) -> list[str]:
    """The saga's event types, in order."""
    return [type(event).__name__ for event in fleet.repo.load_history(saga_id).events]
