"""Claim verdicts and due work pinned where scripts/mutation.py found them loose (issue 36):
why a claim is refused, that only a refusal for want of a grant asks a person again, and
that neither a verdict nor a due item can be changed once given."""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from datetime import timedelta

import pytest
from core_harness import C, F, Saga
from test_boundaries import _definition, _hold, _started

from saga_core.engine.claims import ClaimVerdict, check_claim, due_work


def test_a_verdict_cannot_be_changed_once_given() -> None:
    verdict = ClaimVerdict(False, "cancel requested")
    with pytest.raises(FrozenInstanceError):
        verdict.ok = True  # type: ignore[misc]


def test_a_due_work_item_cannot_be_changed_once_listed() -> None:
    saga = _started(_definition(_hold()))
    lease = saga.claim("hold", lease_s=30).lease_expires_at
    (item,) = due_work(saga.state, lease, timedelta(0))
    with pytest.raises(FrozenInstanceError):
        item.attempt = 2  # type: ignore[misc]


def test_only_a_refusal_for_want_of_a_grant_asks_a_person_again() -> None:
    # given a saga whose hold is scheduled: a stale attempt and a held claim are refused
    saga = _started(_definition(_hold()))
    stale = check_claim(saga.state, "hold", F, 2, saga.now)
    assert not stale and "stale attempt" in stale.reason and stale.ask_again is False
    saga.claim("hold")
    held = check_claim(saga.state, "hold", F, 1, saga.now)
    assert not held and "claimed by" in held.reason and held.ask_again is False


def test_an_undo_is_not_claimed_while_the_saga_goes_forward() -> None:
    # given a hold that succeeded and a saga still going forward
    saga: Saga = _started(_definition(_hold()))
    saga.run_ok("hold")
    # then its (pending) compensation is refused for that reason first, whatever its attempt
    refused = check_claim(saga.state, "hold", C, 0, saga.now)
    assert not refused and refused.reason == "saga is not compensating"


def test_an_operation_the_saga_does_not_have_is_refused_by_name() -> None:
    saga = _started(_definition(_hold()))
    unknown = check_claim(saga.state, "nope", F, 1, saga.now)
    assert not unknown and unknown.reason == "no forward operation for step 'nope'"
