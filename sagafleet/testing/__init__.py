"""``sagafleet.testing``: run your sagas on the real engine in one process, no servers.

::

    from sagafleet.testing import TestFleet
    fleet = TestFleet()                       # the trip definition + in-memory trip tools
    client = fleet.client(tenant="t", actor="agent")
    saga = client.start("trip", trip_input, key="k1")
    fleet.run_until_idle()
    assert client.status(saga.saga_id).status == "COMPLETED"

docs/testing.md documents the whole kit.
"""

from application.principals.memory import MemoryPrincipals
from sagafleet.testing.clock import TestClock
from sagafleet.testing.fleet import FleetMisconfigured, NeverIdle, TestFleet
from sagafleet.testing.payout import PayoutBooks, PayoutTools
from sagafleet.testing.publisher import RecordingPublisher
from sagafleet.testing.tools import (
    ANY_TOOL,
    CommittedEffect,
    Fault,
    InMemoryTool,
    InMemoryTools,
    ToolCall,
    UnknownFault,
    WorkerCrashed,
)
from sagafleet.testing.trip import TripLedger, TripTools

__all__ = [
    "ANY_TOOL",
    "CommittedEffect",
    "Fault",
    "FleetMisconfigured",
    "InMemoryTool",
    "InMemoryTools",
    "MemoryPrincipals",
    "NeverIdle",
    "PayoutBooks",
    "PayoutTools",
    "RecordingPublisher",
    "TestClock",
    "TestFleet",
    "ToolCall",
    "TripLedger",
    "TripTools",
    "UnknownFault",
    "WorkerCrashed",
]
