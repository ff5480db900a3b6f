"""The tool contract and the allowlist: registry lookups, errors that name the tool."""

from __future__ import annotations

import pickle

import pytest

from saga_core.contracts import ErrorClass
from saga_core.errors import SagaError
from sagafleet.sandbox import COMMIT_HORIZON_S, SandboxTool, TripSandbox, classify_provider_error
from workers.tools import DuplicateToolError, Tool, ToolError, ToolRegistry, UnknownToolError

TRIP_TOOLS = [
    ("email.send_correction", 1),
    ("email.send_itinerary", 1),
    ("flights.hold", 1),
    ("flights.release", 1),
    ("hotels.hold", 1),
    ("hotels.release", 1),
    ("payments.capture", 1),
    ("payments.refund", 1),
]


def test_trip_registry_allowlists_the_eight_tools_at_version_1(trip: TripSandbox) -> None:
    # given the trip registry
    registry = trip.registry
    # then exactly the eight trip tools are allowlisted, each honouring the Tool protocol
    assert registry.refs() == TRIP_TOOLS
    assert len(registry) == 8
    for tool in registry:
        assert isinstance(tool, Tool)
    assert registry.has("flights.hold", 1)
    assert ("flights.hold", 2) not in registry
    # and what each tool is comes from the sandbox's catalogue, which names the same tools
    trip.tools.check()
    assert all(spec.commit_horizon_s == COMMIT_HORIZON_S for spec in trip.tools.catalogue.tools)


def test_unknown_name_or_version_is_a_typed_error_naming_it(trip: TripSandbox) -> None:
    # when an unknown version of a known tool is asked for
    with pytest.raises(UnknownToolError) as wrong_version:
        trip.registry.get("flights.hold", 2)
    # then the error names the tool, the version and the versions that exist
    assert isinstance(wrong_version.value, SagaError)
    assert "flights.hold@2" in str(wrong_version.value)
    assert wrong_version.value.known_versions == (1,)

    # when an unknown name is asked for, the error names it too
    with pytest.raises(UnknownToolError, match=r"trains\.book@1"):
        trip.registry.get("trains.book", 1)


def test_registering_the_same_name_and_version_twice_is_refused(trip: TripSandbox) -> None:
    # given a registry holding flights.hold@1
    hold = trip.registry.get("flights.hold", 1)
    registry = ToolRegistry({("flights.hold", 1): hold})
    # when it is registered again
    with pytest.raises(DuplicateToolError, match=r"flights\.hold@1"):
        registry.register("flights.hold", 1, hold)
    # then a new version of the same tool is still welcome
    assert isinstance(hold, SandboxTool)
    registry.register("flights.hold", 2, SandboxTool(hold.provider, "hold"))
    assert registry.refs() == [("flights.hold", 1), ("flights.hold", 2)]


def test_tool_error_carries_its_class_and_survives_pickling() -> None:
    # given an ambiguous tool error with details
    error = ToolError(ErrorClass.AMBIGUOUS, "timed out", {"key": "k1"})
    # when it crosses a process boundary (Celery pickles exceptions)
    copy = pickle.loads(pickle.dumps(error))
    # then class, message and details are intact
    assert isinstance(copy, ToolError)
    assert copy.error_class is ErrorClass.AMBIGUOUS
    assert copy.details == {"key": "k1"}
    assert copy.may_have_committed
    assert not ToolError(ErrorClass.TRANSIENT, "503").may_have_committed


@pytest.mark.parametrize(
    ("status", "code", "expected"),
    [
        (503, "unavailable", ErrorClass.TRANSIENT),
        (429, "rate_limited", ErrorClass.TRANSIENT),
        (401, "token_expired", ErrorClass.AUTH_EXPIRED),
        (412, "precondition_failed", ErrorClass.PRECONDITION_FAILED),
        (402, "card_declined", ErrorClass.BUSINESS_REJECTION),
        (409, "sold_out", ErrorClass.BUSINESS_REJECTION),
        (409, "compensation_rejected", ErrorClass.PERMANENT),
        (422, "idempotency_key_reused", ErrorClass.PERMANENT),
        (404, "not_found", ErrorClass.PERMANENT),
        (400, "invalid_request", ErrorClass.PERMANENT),
    ],
)
def test_provider_statuses_map_to_error_classes(
    status: int, code: str, expected: ErrorClass
) -> None:
    assert classify_provider_error(status, code) is expected
