"""A person's action bound to the saga version they saw (``seen_version``), on a TestFleet.

``seen_version`` is what the person was shown; the append's own precondition
(``expected_version``) stays the orchestrator's. Acting on a saga that moved since is
SagaMoved and records nothing; the same click again is a quiet no-op; a refusal of the
person's roles stays that refusal. The old keyword ``expected_version=`` is still accepted.
"""

from __future__ import annotations

from contextlib import nullcontext

import pytest

from application.client import InvalidRequest
from saga_core.access.roles import NotPermitted
from saga_core.engine.events import ApprovalGranted, CancelRequested
from saga_core.errors import SagaMoved
from sagafleet.testing import TestFleet

BIG_TRIP = {  # the capture needs an approval
    "customer_email": "ada@example.com", "flight_id": "FL1", "hotel_id": "HT1", "nights": 1,
    "amount": 250_000, "currency": "EUR", "card_token": "tok_4242",
}


def _waiting_capture(fleet: TestFleet) -> str:
    saga_id = fleet.client(actor="booking-bot").start("trip", BIG_TRIP).saga_id
    fleet.run_until_idle()
    return str(saga_id)


def test_an_approval_from_the_version_seen_is_recorded() -> None:
    # given a capture waiting for approval, seen at its current version
    fleet = TestFleet()
    saga_id = _waiting_capture(fleet)
    seen = fleet.state(saga_id).version
    # when ada approves from that version
    view = fleet.person("ada").approve(saga_id, "capture_payment", seen_version=seen)
    # then the grant is recorded right after it
    assert view.version > seen
    [grant] = [e for e in fleet.events(saga_id) if isinstance(e, ApprovalGranted)]
    assert grant.approver == "ada"


def test_a_refusal_the_move_caused_is_saga_moved_naming_both_versions() -> None:
    # given a capture that olivia and bea both saw at the same version
    fleet = TestFleet()
    saga_id = _waiting_capture(fleet)
    seen = fleet.state(saga_id).version
    bea = fleet.person("bea")
    # when olivia approves first, and bea then approves from the version she saw
    fleet.person("olivia").approve(saga_id, "capture_payment", seen_version=seen)
    after = fleet.state(saga_id).version
    with pytest.raises(SagaMoved) as moved:
        bea.approve(saga_id, "capture_payment", seen_version=seen)
    # then bea is told the saga moved from her version, and nothing more was recorded
    assert (moved.value.seen, moved.value.current) == (seen, after)
    assert "already approved by olivia" in str(moved.value)
    assert fleet.state(saga_id).version == after


def test_something_to_record_on_a_moved_saga_is_saga_moved_and_records_nothing() -> None:
    # given a saga that moved on after the operator looked at it
    fleet = TestFleet()
    saga_id = _waiting_capture(fleet)
    seen = fleet.state(saga_id).version
    fleet.person("olivia").approve(saga_id, "capture_payment")
    after = fleet.state(saga_id).version
    # when the operator cancels from the version they saw, then it is refused
    operator = fleet.person("otto", roles={"operator"})
    with pytest.raises(SagaMoved):
        operator.cancel(saga_id, reason="customer called", seen_version=seen)
    # and no cancel was recorded
    assert fleet.state(saga_id).version == after
    assert not any(isinstance(e, CancelRequested) for e in fleet.events(saga_id))


def test_the_same_click_again_on_a_moved_saga_is_a_quiet_no_op() -> None:
    # given ada's approval from the version she saw
    fleet = TestFleet()
    saga_id = _waiting_capture(fleet)
    seen = fleet.state(saga_id).version
    ada = fleet.person("ada")
    ada.approve(saga_id, "capture_payment", seen_version=seen)
    after = fleet.state(saga_id).version
    # when she clicks again from the same page, then nothing is recorded and nothing raised
    ada.approve(saga_id, "capture_payment", seen_version=seen)
    assert fleet.state(saga_id).version == after


def test_a_refusal_of_the_persons_roles_stays_that_refusal_on_a_moved_saga() -> None:
    # given a saga that moved after an auditor looked at it
    fleet = TestFleet()
    saga_id = _waiting_capture(fleet)
    seen = fleet.state(saga_id).version
    fleet.person("olivia").approve(saga_id, "capture_payment")
    # when the auditor tries to approve from the version seen, then the roles refuse it
    with pytest.raises(NotPermitted):
        fleet.person("audrey", roles={"auditor"}).approve(saga_id, "capture_payment",
                                                           seen_version=seen)


def test_the_old_keyword_still_binds_with_a_deprecation_warning() -> None:
    # given a saga that moved after the operator looked at it
    fleet = TestFleet()
    saga_id = _waiting_capture(fleet)
    seen = fleet.state(saga_id).version
    fleet.person("olivia").approve(saga_id, "capture_payment")
    operator = fleet.person("otto", roles={"operator"})
    # when the old name is given, then it warns and binds all the same
    with pytest.warns(DeprecationWarning, match="seen_version"), pytest.raises(SagaMoved):
        operator.cancel(saga_id, reason="customer called", expected_version=seen)


@pytest.mark.parametrize(("given", "message"), [
    ({"seen_version": 3, "expected_version": 4}, "disagree"),
    ({"seen_version": -1}, "seen_version must be a saga version"),
    ({"seen_version": True}, "seen_version must be a saga version"),
    ({"seen_version": "3"}, "seen_version must be a saga version"),
])
def test_a_seen_version_that_is_no_version_is_refused_by_name(given, message) -> None:
    fleet = TestFleet()
    saga_id = _waiting_capture(fleet)
    before = fleet.state(saga_id).version
    with (pytest.raises(InvalidRequest, match=message),
          pytest.warns(DeprecationWarning) if "expected_version" in given else nullcontext()):
        fleet.person("ada").approve(saga_id, "capture_payment", **given)
    assert fleet.state(saga_id).version == before

