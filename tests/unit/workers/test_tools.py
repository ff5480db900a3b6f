"""A fleet starts only when its implementations and its catalogue name the same tools."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from saga_core import ToolCatalogue
from saga_core.contracts import Receipt
from saga_core.errors import SagaError
from sagafleet.example_sagas import trip_tool_catalogue
from workers.fleet import Fleet, FleetConfig, NoToolSet
from workers.tools import Absent, LookupResult, Tool, ToolRegistry, ToolSet, ToolSetMismatch

CONFIG = FleetConfig(database_url="postgresql://unused", broker_url="redis://unused")


class Echo:
    """A tool that answers without any outside world (only its registration matters here)."""

    def execute(self, args: Mapping[str, Any], key: str) -> Receipt:
        return Receipt(resource_id=key, status="done")

    def lookup(self, key: str) -> LookupResult:
        return Absent("never stored")


def trip_registry(*, without: tuple[str, ...] = (), extra: tuple[str, ...] = ()) -> ToolRegistry:
    names = [spec.name for spec in trip_tool_catalogue().tools if spec.name not in without]
    return ToolRegistry({(name, 1): Echo() for name in [*names, *extra]})


def test_a_tool_is_only_execute_and_lookup() -> None:
    assert isinstance(Echo(), Tool)
    assert not {"name", "version", "dedupes_by_key", "commit_horizon_s"} & set(dir(Tool))


def test_a_fleet_starts_on_a_tool_set_that_matches_its_catalogue() -> None:
    tools = ToolSet(trip_tool_catalogue(), trip_registry())
    fleet = Fleet(CONFIG, tools)
    assert fleet.catalogue is tools.catalogue
    assert fleet.registry is tools.registry


def test_a_catalogue_tool_without_an_implementation_stops_the_fleet_by_name() -> None:
    # given a tool set whose registry lacks the refund the catalogue lists
    tools = ToolSet(trip_tool_catalogue(), trip_registry(without=("payments.refund",)))
    # when a fleet is started on it, then it refuses and names the missing tool
    with pytest.raises(ToolSetMismatch, match=r"without an implementation: payments\.refund@1"):
        Fleet(CONFIG, tools)


def test_an_implementation_the_catalogue_does_not_list_stops_the_fleet_by_name() -> None:
    # given an implementation of a tool nobody declared (nothing could validate its use)
    tools = ToolSet(trip_tool_catalogue(), trip_registry(extra=("trains.book",)))
    # when a fleet is started on it, then it refuses and names the unlisted tool
    with pytest.raises(ToolSetMismatch, match=r"not in the catalogue: trains\.book@1") as raised:
        Fleet(CONFIG, tools)
    assert isinstance(raised.value, SagaError)
    assert raised.value.unlisted == ("trains.book@1",) and raised.value.missing == ()


def test_both_directions_are_named_at_once() -> None:
    # given an implementation registered under a version the catalogue does not have
    registry = trip_registry(without=("flights.hold",))
    registry.register("flights.hold", 2, Echo())
    # then the check names the version missing and the version unlisted
    with pytest.raises(ToolSetMismatch) as raised:
        ToolSet(trip_tool_catalogue(), registry).check()
    assert raised.value.missing == ("flights.hold@1",)
    assert raised.value.unlisted == ("flights.hold@2",)


def test_a_fleet_given_only_a_catalogue_records_but_runs_no_tool() -> None:
    fleet = Fleet(CONFIG, ToolCatalogue())
    with pytest.raises(NoToolSet, match="needs a ToolSet"):
        _ = fleet.registry
