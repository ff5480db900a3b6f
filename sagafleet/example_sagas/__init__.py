"""Shipped example definitions: the trip saga and its tool catalogue, the payout saga (an
invariant, a postcondition, timeouts, a compensation deadline and a forward precondition)
and its catalogue, and a catalogue whose gates cover every class of risk, as YAML data;
:mod:`sagafleet.example_sagas.ledger`, the trip's net effects read back from its providers."""

from __future__ import annotations

from importlib.resources import files

from saga_core.definitions.catalogue import ToolCatalogue
from saga_core.definitions.definition import SagaDefinition
from saga_core.definitions.validation import validate_definition


def _read(name: str) -> str:
    return files(__package__).joinpath(name).read_text(encoding="utf-8")


def trip_tool_catalogue() -> ToolCatalogue:
    """The allowlisted tools of the trip saga (flights, hotels, payments, email; version 1)."""
    return ToolCatalogue.from_yaml(_read("trip_tools.yaml"))


def trip_definition() -> SagaDefinition:
    """The trip saga, validated and bound to :func:`trip_tool_catalogue`."""
    return validate_definition(SagaDefinition.from_yaml(_read("trip.yaml")), trip_tool_catalogue())


def gated_tool_catalogue() -> ToolCatalogue:
    """An example catalogue gating money, deletion, infrastructure and external
    communication (each tool's ``gate``; see ``saga_core.approval.risk_gates``)."""
    return ToolCatalogue.from_yaml(_read("gated_tools.yaml"))


def payout_tool_catalogue() -> ToolCatalogue:
    """The payout saga's tools: debit and credit, undone by refund and reverse."""
    return ToolCatalogue.from_yaml(_read("payout_tools.yaml"))


def payout_definition() -> SagaDefinition:
    """The payout saga, validated and bound to :func:`payout_tool_catalogue`."""
    return validate_definition(SagaDefinition.from_yaml(_read("payout.yaml")),
                               payout_tool_catalogue())
