"""The health, dead-letter and worker pages over HTTP (the browser tests drive them too; here
the edges): a fleet with remote control off says so, a requeue publishes the letter's message
again once, a discard needs a reason, and the health page falls back to its default window."""

from __future__ import annotations

from typing import Any

from console_support import POLICY, csrf_of, sign_in
from fleet_harness import SandboxFleet
from principal_support import token_for
from starlette.testclient import TestClient

from saga_core.errors import ErrorKind
from sagafleet.console.app import create_app
from sagafleet.console.service import console_for
from workers.celery_app import QUEUE_COMMANDS, broker_redis
from workers.dead_letters.store import dead_letter_body
from workers.fleet import Fleet, FleetConfig

START = "sagafleet.commands.start_saga"


def _letter(fleet: Fleet, tenant: str | None = "default") -> int:
    """A dead letter of ``tenant`` (the signed-in principals' own, unless said otherwise)."""
    body = dead_letter_body(START, [], {"envelope": '{"args": {"definition": "nope"}}'})
    assert fleet.dead_letters.record(START, "task-1", body, "unsigned command",
                                     ErrorKind.UNAUTHENTICATED, tenant=tenant,
                                     refusal="unsigned")
    return _stored(fleet, "max(id)")[0]


def _stored(fleet: Fleet, columns: str, letter: int | None = None) -> tuple[Any, ...]:
    """Columns of a letter as the table holds them (whoever may see it)."""
    where = "" if letter is None else f" WHERE id = {int(letter)}"
    with fleet.store.connection() as conn:
        row = conn.execute(f"SELECT {columns} FROM fleet.dead_letters{where}").fetchone()  # noqa: S608
    assert row is not None
    return tuple(row)


def test_an_operator_requeues_a_dead_letter_once_with_a_reason(fleet, browser, signed_in,
                                                               broker):
    letter = _letter(fleet)
    signed_in("olga", ("operator",))
    page = browser.get(f"/dead-letters/{letter}")
    assert page.status_code == 200 and "unauthenticated: unsigned" in page.text
    csrf = csrf_of(page.text)

    # a requeue without a reason is refused, and nothing is published
    refused = browser.post(f"/dead-letters/{letter}/requeue", data={"csrf": csrf, "reason": " "})
    assert refused.status_code == 400 and "say why" in refused.text
    queue = broker_redis(broker)
    assert queue.llen(QUEUE_COMMANDS) == 0

    # with a reason, the message goes back to its task under its task id, once
    done = browser.post(f"/dead-letters/{letter}/requeue",
                        data={"csrf": csrf, "reason": "key registered"})
    assert done.status_code == 200 and f"Dead letter #{letter} requeued by you" in done.text
    assert queue.llen(QUEUE_COMMANDS) == 1
    again = browser.post(f"/dead-letters/{letter}/requeue",
                         data={"csrf": csrf, "reason": "key registered"})
    assert "nothing was done again" in again.text
    assert queue.llen(QUEUE_COMMANDS) == 1
    assert _stored(fleet, "status, resolved_by, resolution", letter) == (
        "requeued", "olga", "key registered")
    # and the other action on a resolved letter is a conflict, shown as such
    conflict = browser.post(f"/dead-letters/{letter}/discard",
                            data={"csrf": csrf, "reason": "no"})
    assert conflict.status_code == 409
    assert browser.get("/dead-letters/abc").status_code == 400  # an id is a number


def test_a_reader_without_the_operator_role_is_refused_the_letters(fleet, browser, signed_in):
    letter = _letter(fleet)
    signed_in("aude", ("auditor",))
    listing = browser.get("/dead-letters")
    assert "1 open dead letter(s) of tenant default" in listing.text
    assert "task-1" not in listing.text
    assert browser.get(f"/dead-letters/{letter}").status_code == 403
    csrf = csrf_of(listing.text)
    posted = browser.post(f"/dead-letters/{letter}/discard", data={"csrf": csrf, "reason": "x"})
    assert posted.status_code == 403
    assert _stored(fleet, "status", letter) == ("open",)


def test_with_remote_control_off_the_workers_page_says_why_it_lists_nobody(database, broker):
    quiet = SandboxFleet(FleetConfig(database_url=database, broker_url=broker,
                                     remote_control=False))
    try:
        with TestClient(create_app(console_for(quiet, POLICY)), base_url="http://testserver",
                        follow_redirects=False) as client:
            sign_in(client, token_for(quiet, "wendy", ("auditor",)))
            page = client.get("/workers")
    finally:
        quiet.close()
    assert page.status_code == 200
    assert 'data-outcome="remote_control_off"' in page.text
    assert "SAGAFLEET_CELERY_REMOTE_CONTROL=false" in page.text


def test_the_health_page_and_its_fragment_for_any_reader(browser, signed_in):
    signed_in("aude", ("auditor",))
    page = browser.get("/health?window=nonsense")
    assert page.status_code == 200
    assert 'class="current" aria-current="true">1h<' in page.text  # the default window
    assert page.text.count('<svg class="chart"') == 7
    assert "<strong>0</strong> waiting for a person" in page.text
    fragment = browser.get("/health/fragment?window=7d",
                           headers={"x-sagafleet-fragment": "1"})
    assert fragment.status_code == 200 and "28 buckets of 6.0 h" in fragment.text
    assert "<html" not in fragment.text
