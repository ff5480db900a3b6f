"""Reconciliation by key: found, absent, unknown, and found only once visible."""

from __future__ import annotations

import time

import pytest

from saga_core.contracts import ErrorClass, Receipt
from sagafleet.sandbox import Boundary, TripSandbox, ledger_for_saga
from workers.tools import Absent, ToolError, Unknown

HOTEL = {"saga_id": "saga-l", "hotel_id": "H-ZURICH-1", "nights": 3}


def test_lookup_finds_the_receipt_of_a_committed_request(trip: TripSandbox) -> None:
    # given a hotel hold committed under key h1
    hold = trip.registry.get("hotels.hold", 1)
    receipt = hold.execute(HOTEL, "h1")
    # when it is looked up by key
    found = hold.lookup("h1")
    # then the very receipt comes back
    assert found == receipt
    assert isinstance(found, Receipt) and found.fields["nights"] == 3


def test_lookup_of_a_key_never_sent_is_absent(trip: TripSandbox) -> None:
    found = trip.registry.get("hotels.hold", 1).lookup("never-sent")
    assert isinstance(found, Absent)
    assert "never-sent" in found.reason


def test_lookup_under_the_wrong_tool_is_unknown_not_a_receipt(trip: TripSandbox) -> None:
    # given a hotel hold under h2
    trip.registry.get("hotels.hold", 1).execute(HOTEL, "h2")
    # when the release tool is asked about that key
    found = trip.registry.get("hotels.release", 1).lookup("h2")
    # then it does not pretend the release happened
    assert isinstance(found, Unknown)
    assert found.evidence["operation"] == "hold"


def test_lookup_while_the_provider_is_unavailable_is_unknown(trip: TripSandbox) -> None:
    # given a committed hold and a fault making lookups unavailable once
    hold = trip.registry.get("hotels.hold", 1)
    receipt = hold.execute(HOTEL, "h3")
    trip.faults.add("hotels", "hold", Boundary.LOOKUP_UNAVAILABLE, count=1)
    # when it is looked up
    first = hold.lookup("h3")
    # then the answer is Unknown with evidence, and the next lookup finds it
    assert isinstance(first, Unknown)
    assert first.evidence["status"] == 503
    assert hold.lookup("h3") == receipt


def test_slow_visibility_hides_a_committed_effect_from_lookup_for_a_while(
    trip: TripSandbox, sandbox_db: str
) -> None:
    # given a commit whose visibility to lookup lags by one second
    trip.faults.add("hotels", "hold", Boundary.SLOW_VISIBILITY, count=1, params={"delay_s": 1.0})
    hold = trip.registry.get("hotels.hold", 1)
    receipt = hold.execute(HOTEL, "h4")
    # when it is looked up at once, lookup says Absent although the effect exists
    assert isinstance(hold.lookup("h4"), Absent)
    assert ledger_for_saga(sandbox_db, "saga-l").hotel_holds == 1
    # and a retry with the same key is deduplicated: the stored receipt, no second hold
    assert hold.execute(HOTEL, "h4") == receipt
    assert ledger_for_saga(sandbox_db, "saga-l").hotel_holds == 1
    # then once the delay has passed lookup finds it
    time.sleep(1.1)
    assert hold.lookup("h4") == receipt
    # and the sandbox's catalogue declares a commit horizon past that delay
    assert trip.tools.catalogue.require("hotels.hold", 1).commit_horizon_s >= 1.0


def test_lookup_of_an_ambiguous_request_that_never_dispatched_is_absent(
    trip: TripSandbox,
) -> None:
    # given a timeout before dispatch
    trip.faults.add("hotels", "hold", Boundary.TIMEOUT_BEFORE_DISPATCH, count=1)
    hold = trip.registry.get("hotels.hold", 1)
    with pytest.raises(ToolError) as raised:
        hold.execute(HOTEL, "h5")
    assert raised.value.error_class is ErrorClass.AMBIGUOUS
    # then lookup confirms absence
    assert isinstance(hold.lookup("h5"), Absent)
