"""Registering the example trip on a fleet: what the demo, ``sagafleet dev``, the sandbox's
command line and the tests do explicitly. A :class:`~workers.fleet.Fleet` registers nothing
by itself: a fleet runs what its operator registers."""

from __future__ import annotations

import logging
from typing import Protocol

from events.definition_store.port import DefinitionConflict, Definitions
from saga_core.definitions.catalogue import ToolCatalogue
from sagafleet.example_sagas import trip_definition

log = logging.getLogger(__name__)


class FleetWithDefinitions(Protocol):
    """What registering needs of a fleet: the tools it can run and where definitions live."""

    @property
    def catalogue(self) -> ToolCatalogue:
        """The allowlisted tools the fleet runs."""
        ...

    @property
    def definitions(self) -> Definitions:
        """The fleet's definition store."""
        ...


def register_trip(fleet: FleetWithDefinitions) -> list[str]:
    """Register the example trip in the shared, read-only set every tenant sees (idempotent)
    when ``fleet`` can run its tools; return the hashes registered (none otherwise).

    It is stored bound to the example trip catalogue it was validated against, not to this
    fleet's: every fleet that can run the trip (the sandbox's tools, in-memory tools, a
    command line with no tool set) registers the same content, so none of them meets
    another's ``trip`` as a conflict. A stored ``trip`` of the same version with other content
    (a changed example without a version bump) is kept, with a warning: running sagas need
    their stored definition, and a worker must not refuse to start over an example.
    """
    trip = trip_definition()
    needed = {(s.tool, s.version) for s in trip.steps} | {
        (s.compensation.tool, s.compensation.version) for s in trip.steps if s.compensation
    }
    if any(fleet.catalogue.get(name, version) is None for name, version in needed):
        return []  # a fleet running its own tool set has no use for the example trip
    try:
        return [fleet.definitions.register_shared(trip, registered_by="sagafleet")]
    except DefinitionConflict as exc:
        log.warning("example trip not registered: %s", exc)
        return []
