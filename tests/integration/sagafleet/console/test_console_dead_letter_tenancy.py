"""The console's dead-letter pages answer only to the signed-in principal's tenant: an
operator lists, opens and resolves its own tenant's letters; another tenant's letter, or one
whose tenant is unknown, is "not found" (404) whether it is opened, requeued or discarded —
nothing of it shows, nothing is published, it stays open — and only the fleet_operator role
lists the letters no tenant is proven to own (a real fleet: PostgreSQL and Redis; the browser
test drives the same pages in Chromium)."""

from __future__ import annotations

import re

from console_support import csrf_of

from saga_core.errors import ErrorKind
from workers.celery_app import QUEUE_COMMANDS, broker_redis
from workers.dead_letters.store import dead_letter_body
from workers.fleet import Fleet

START = "sagafleet.commands.start_saga"
LISTED = re.compile(r'<tr class="dead-letter" data-letter="(\d+)"')


def _letters(fleet: Fleet) -> dict[str | None, int]:
    """One open letter of tenant default, one of globex and one of no proven tenant, each
    naming a definition only its own owner should ever read: tenant -> id."""
    for n, tenant in enumerate(("default", "globex", None)):
        body = dead_letter_body(START, [], {"envelope": f'{{"args": {{"definition": '
                                                        f'"plan-of-{tenant}"}}}}'})
        assert fleet.dead_letters.record(START, f"task-{n}", body, f"why {tenant}",
                                         ErrorKind.NOT_FOUND, tenant=tenant)
    with fleet.store.connection() as conn:
        return {tenant: letter_id for letter_id, tenant in conn.execute(
            "SELECT id, tenant FROM fleet.dead_letters")}


def _state(fleet: Fleet, letter: int) -> tuple[str, str | None]:
    with fleet.store.connection() as conn:
        row = conn.execute("SELECT status, resolved_by FROM fleet.dead_letters WHERE id = %s",
                           (letter,)).fetchone()
    assert row is not None
    return row[0], row[1]


def test_an_operator_reaches_only_its_own_tenants_letters(fleet, browser, signed_in, broker):
    # given a letter of default, one of globex and one of unknown tenant
    ids = _letters(fleet)
    # when an operator of default opens the list
    signed_in("olga", ("operator",))
    listing = browser.get("/dead-letters")
    # then it lists its tenant's letter alone
    assert listing.status_code == 200
    assert LISTED.findall(listing.text) == [str(ids["default"])]
    assert "plan-of-globex" not in listing.text and "plan-of-None" not in listing.text
    csrf = csrf_of(listing.text)
    queue = broker_redis(broker)

    for other in (ids["globex"], ids[None]):
        # when it opens, requeues or discards another tenant's letter, or the unknown one's
        opened = browser.get(f"/dead-letters/{other}")
        requeued = browser.post(f"/dead-letters/{other}/requeue",
                                data={"csrf": csrf, "reason": "mine now"})
        discarded = browser.post(f"/dead-letters/{other}/discard",
                                 data={"csrf": csrf, "reason": "mine now"})
        # then each is "not found", as a letter that never existed, and shows nothing of it
        never = browser.get("/dead-letters/987654")
        for answer in (opened, requeued, discarded):
            assert answer.status_code == never.status_code == 404
            assert "plan-of" not in answer.text and "why " not in answer.text
        # and nothing was published or recorded
        assert queue.llen(QUEUE_COMMANDS) == 0
        assert _state(fleet, other) == ("open", None)

    # and its own tenant's letter opens, with its tenant, and resolves as before
    own = browser.get(f"/dead-letters/{ids['default']}")
    assert own.status_code == 200 and "plan-of-default" in own.text
    assert '<code class="tenant">default</code>' in own.text
    done = browser.post(f"/dead-letters/{ids['default']}/discard",
                        data={"csrf": csrf, "reason": "tested"})
    assert done.status_code == 200 and "discarded by you" in done.text
    assert _state(fleet, ids["default"]) == ("discarded", "olga")


def test_another_tenants_operator_and_readers_count_only_their_own(fleet, browser, signed_in):
    # given the three letters
    ids = _letters(fleet)
    # when an auditor of globex opens the list and the health page
    signed_in("gabe", ("auditor",), tenant="globex")
    listing = browser.get("/dead-letters")
    health = browser.get("/health")
    # then it is told how many of its own tenant's letters are open (one), never the others'
    assert "1 open dead letter(s) of tenant globex" in listing.text
    assert "<strong>1</strong> open dead letter(s)" in health.text
    assert not LISTED.findall(listing.text)
    # when globex's operator opens the list, it sees globex's letter and not default's
    signed_in("gus", ("operator",), tenant="globex")
    assert LISTED.findall(browser.get("/dead-letters").text) == [str(ids["globex"])]
    assert browser.get(f"/dead-letters/{ids['default']}").status_code == 404


def test_only_the_fleet_operator_lists_the_letters_no_tenant_owns(fleet, browser, signed_in):
    # given the three letters
    ids = _letters(fleet)
    # when a fleet operator (of the platform's own tenant) opens the list
    signed_in("fiona", ("fleet_operator",), tenant="fleet")
    listing = browser.get("/dead-letters")
    # then it lists the letter of unknown tenant, marked so, and no tenant's
    assert LISTED.findall(listing.text) == [str(ids[None])]
    assert 'class="badge unknown-tenant"' in listing.text
    assert "<strong>1</strong> open dead letter(s)" in browser.get("/health").text
    for tenant in ("default", "globex"):
        assert browser.get(f"/dead-letters/{ids[tenant]}").status_code == 404
    # and it opens and discards the unknown one
    page = browser.get(f"/dead-letters/{ids[None]}")
    assert page.status_code == 200 and "plan-of-None" in page.text
    done = browser.post(f"/dead-letters/{ids[None]}/discard",
                        data={"csrf": csrf_of(page.text), "reason": "forged"})
    assert done.status_code == 200
    assert _state(fleet, ids[None]) == ("discarded", "fiona")
