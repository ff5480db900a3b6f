"""What the console refuses: forms without their CSRF token or from another site, actions the
principal's roles do not allow (an agent, an auditor), another tenant's sagas; and the
security headers every response carries."""

from __future__ import annotations

import re
from types import ModuleType
from typing import NoReturn

import pytest
from console_support import csrf_of, events_of, sign_in, start_waiting_capture
from principal_support import token_for
from read_model_support import project_all
from starlette.routing import Route
from starlette.testclient import TestClient

from saga_core.access.roles import PrincipalKind
from sagafleet.console.app import create_app
from sagafleet.console.core import Console
from sagafleet.console.headers import CONTENT_SECURITY_POLICY

pytestmark = pytest.mark.integration


def _form_fields(page: str, saga_id: str, action: str) -> dict[str, str]:
    card = page[page.index(f'data-saga="{saga_id}"'):]
    form = card[card.index(f'action="/actions/{action}"'):]
    return dict(re.findall(r'name="(\w+)" value="([^"]*)"', form[:form.index("</form>")]))


@pytest.fixture
def waiting(fleet, console: Console) -> str:
    """A capture of tenant default waiting for an approver, in the read model."""
    saga_id = start_waiting_capture(fleet)
    project_all(console.read)
    return saga_id


def test_every_response_carries_a_strict_content_security_policy(browser, signed_in) -> None:
    answers = [browser.get("/sign-in"), browser.get("/static/console.js"),
               browser.get("/queue", headers={"accept": "text/html"})]
    signed_in("olivia", ("operator",))
    answers += [browser.get("/queue"), browser.get("/queue/fragment"),
                browser.get("/no-such-page")]
    for response in answers:
        policy = response.headers["content-security-policy"]
        assert policy == CONTENT_SECURITY_POLICY, response.url
        assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy
        assert "form-action 'self'" in policy and "unsafe-inline" not in policy
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "same-origin"
    page = answers[3].text
    assert "<script>" not in page and " style=" not in page and " onclick=" not in page


def test_a_crash_is_answered_with_the_same_headers_and_no_detail(fleet, console: Console
                                                                 ) -> None:
    """Starlette answers an unhandled exception outside the console's middleware."""

    def crash(request: object) -> NoReturn:
        raise RuntimeError("secret detail of the crash")

    crashing = ModuleType("crashing")
    crashing.routes = lambda console: [Route("/crash", crash)]  # type: ignore[attr-defined]
    with TestClient(create_app(console, modules=[crashing]),
                    raise_server_exceptions=False, follow_redirects=False) as client:
        sign_in(client, token_for(fleet, "olivia", ("operator",)))
        response = client.get("/crash")
    assert response.status_code == 500
    assert response.text == "internal error"
    assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["cache-control"] == "no-store"


def test_a_form_without_its_csrf_token_is_refused(fleet, browser, signed_in, waiting) -> None:
    signed_in("olivia", ("approver", "operator"))
    fields = _form_fields(browser.get("/queue").text, waiting, "approve") | {"reason": "ok"}
    before = events_of(fleet, waiting)
    missing = browser.post("/actions/approve", data={k: v for k, v in fields.items()
                                                     if k != "csrf"})
    wrong = browser.post("/actions/approve", data=fields | {"csrf": "0" * 64})
    elsewhere = browser.post("/actions/approve", data=fields,
                             headers={"origin": "https://evil.example"})
    not_a_form = browser.post("/actions/approve", json=fields)
    too_many = browser.post("/actions/approve",
                            data=fields | {f"f{i}": "x" for i in range(200)})
    assert too_many.status_code == 400
    assert missing.status_code == wrong.status_code == elsewhere.status_code == 403
    assert "CSRF token is missing or wrong" in missing.text
    assert "another site" in elsewhere.text
    assert not_a_form.status_code == 415
    assert events_of(fleet, waiting) == before
    # another session's token does not fit this session either
    other = TestClient(browser.app, follow_redirects=False)
    sign_in(other, token_for(fleet, "oscar", ("approver",)))
    theirs = csrf_of(other.get("/queue").text)
    assert browser.post("/actions/approve", data=fields | {"csrf": theirs}).status_code == 403
    assert events_of(fleet, waiting) == before


def test_an_agent_signed_in_may_not_approve(fleet, browser, signed_in, waiting) -> None:
    # an approver's form, posted with an agent's session (the page would show it no button)
    approver = TestClient(browser.app, follow_redirects=False)
    sign_in(approver, token_for(fleet, "olivia", ("approver",)))
    fields = _form_fields(approver.get("/queue").text, waiting, "approve") | {"reason": "x"}
    sign_in(browser, token_for(fleet, "robo", ("agent", "approver"),
                               kind=PrincipalKind.AGENT))
    page = browser.get("/queue").text
    assert 'action="/actions/approve"' not in page
    refused = browser.post("/actions/approve", data=fields | {"csrf": csrf_of(page)})
    assert refused.status_code == 403
    assert "only a person answers an approval request" in refused.text
    assert "ApprovalGranted" not in events_of(fleet, waiting)


def test_an_auditor_sees_everything_and_can_act_on_nothing(fleet, browser, signed_in,
                                                           waiting) -> None:
    signed_in("audrey", ("auditor",))
    page = browser.get("/queue").text
    # sees the entry and its evidence, with no action rendered
    assert f'data-saga="{waiting}"' in page and "payments.capture@1" in page
    assert "/actions/" not in page and "Read-only" in page
    csrf = csrf_of(page)
    before = events_of(fleet, waiting)
    base = {"csrf": csrf, "saga_id": waiting, "expected_version": "2", "reason": "x",
            "step": "capture_payment", "kind": "forward"}
    for action, extra in (("approve", {}), ("deny", {}), ("cancel", {}),
                          ("resolve", {"action": "skip"})):
        refused = browser.post(f"/actions/{action}", data=base | extra)
        assert refused.status_code == 403, (action, refused.text)
        assert "audrey" in refused.text and "auditor" in refused.text
    assert events_of(fleet, waiting) == before


def test_another_tenants_saga_is_invisible_and_untouchable(fleet, console, browser,
                                                           signed_in) -> None:
    theirs = start_waiting_capture(fleet, tenant="globex", key="g-1")
    ours = start_waiting_capture(fleet, tenant="acme", key="a-1")
    project_all(console.read)
    signed_in("ada", ("approver", "operator"), tenant="acme")
    page = browser.get("/queue").text
    assert f'data-saga="{ours}"' in page and theirs not in page
    before = events_of(fleet, theirs)
    fields = _form_fields(page, ours, "approve") | {"saga_id": theirs, "reason": "x"}
    refused = browser.post("/actions/approve", data=fields)
    assert refused.status_code == 404 and "no saga" in refused.text.lower()
    cancel = browser.post("/actions/cancel", data=fields)
    assert cancel.status_code == 404
    assert events_of(fleet, theirs) == before


def test_a_console_without_pages_still_guards_its_own_routes(console: Console) -> None:
    with TestClient(create_app(console, modules=[]), follow_redirects=False) as client:
        assert client.post("/actions/approve", data={"x": "1"}).status_code == 401
