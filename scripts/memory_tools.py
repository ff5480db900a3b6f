"""Zero-cost trip tools for measuring the fleet's own overhead (``bench_fleet --providers memory``).

The sandbox providers keep real ledgers in PostgreSQL, on the same machine and server as
the fleet, so a benchmark run with them also pays for the simulated providers' own
transactions. These tools answer from process memory instead: idempotent by key within one
worker process, ``lookup`` by key, receipts shaped like the sandbox's. They are a
measuring instrument, not providers: no ledger outlives the process and nothing is shared
between workers. A worker runs them with::

    sagafleet worker --tools memory_tools:trip_tools      # scripts/ on PYTHONPATH
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from saga_core.contracts import Receipt
from sagafleet.example_sagas import trip_tool_catalogue
from workers.tools import Absent, LookupResult, ToolRegistry, ToolSet

# (tool, status, receipt fields copied from the arguments) for the eight trip tools.
_TRIP: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("flights.hold", "held", ("flight_id",)),
    ("flights.release", "released", ("hold_id",)),
    ("hotels.hold", "held", ("hotel_id", "nights")),
    ("hotels.release", "released", ("hold_id",)),
    ("payments.capture", "captured", ("amount", "currency")),
    ("payments.refund", "refunded", ("capture_id", "amount", "currency")),
    ("email.send_itinerary", "sent", ("to",)),
    ("email.send_correction", "sent", ("to",)),
)


@dataclass
class MemoryTool:
    """One trip tool answering from a per-process dict, deduplicated by operation key."""

    name: str
    status: str
    copied: tuple[str, ...]
    _done: dict[str, Receipt] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def execute(self, args: Mapping[str, Any], key: str) -> Receipt:
        """The stored receipt for ``key``, or a new one (the effect happens once per key)."""
        with self._lock:
            receipt = self._done.get(key)
            if receipt is None:
                digest = hashlib.sha256(key.encode()).hexdigest()[:16]
                fields = {name: args[name] for name in self.copied if name in args}
                if self.name == "flights.hold":
                    fields["seat"] = f"{int(digest[:2], 16) % 30 + 1}A"
                receipt = Receipt(
                    resource_id=f"{self.name.split('.')[0]}_{digest}",
                    version=1,
                    status=self.status,
                    fields=fields,
                )
                self._done[key] = receipt
            return receipt

    def lookup(self, key: str) -> LookupResult:
        """The receipt stored under ``key``, or Absent."""
        with self._lock:
            receipt = self._done.get(key)
        return receipt if receipt is not None else Absent(f"{self.name}: no request {key!r}")


def trip_tools() -> ToolSet:
    """The trip catalogue with in-memory implementations of its eight tools (version 1)."""
    registry = ToolRegistry({
        (name, 1): MemoryTool(name, status, copied) for name, status, copied in _TRIP
    })
    return ToolSet(trip_tool_catalogue(), registry)
