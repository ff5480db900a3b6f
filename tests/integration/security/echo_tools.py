"""The trip sandbox's tools, each behind a provider that echoes what it was called with: into
its receipt, its errors, the receipt a lookup finds, and its log lines — the worst provider a
secret can meet. A real ``sagafleet worker`` runs it as
``SAGAFLEET_TOOLS=echo_tools:echoing_trip_tool_set`` (this directory on PYTHONPATH)."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from typing import Any

from saga_core.contracts import Receipt
from sagafleet.sandbox import trip_tool_set
from workers.tools import LookupResult, Tool, ToolError, ToolRegistry, ToolSet

log = logging.getLogger("echoing.provider")


class EchoingTool:
    """A sandbox tool whose provider repeats its arguments wherever it answers."""

    def __init__(self, name: str, inner: Tool) -> None:
        self.name = name
        self.inner = inner
        self._called: dict[str, dict[str, Any]] = {}  # what each key was called with
        self._lock = threading.Lock()

    def execute(self, args: Mapping[str, Any], key: str) -> Receipt:
        """The sandbox's effect, its answer echoing ``args``."""
        called = dict(args)
        log.info("%s called with %s", self.name, json.dumps(called))
        with self._lock:
            self._called[key] = called
        try:
            receipt = self.inner.execute(args, key)
        except ToolError as exc:
            raise ToolError(exc.error_class, f"{exc.message} (called with "
                            f"{json.dumps(called)})", exc.details) from None
        return _echoing(receipt, called)

    def lookup(self, key: str) -> LookupResult:
        """The sandbox's lookup; a receipt found echoes what the key was called with."""
        found = self.inner.lookup(key)
        with self._lock:
            called = self._called.get(key)
        if isinstance(found, Receipt) and called is not None:
            log.info("%s found %s, called with %s", self.name, key, json.dumps(called))
            return _echoing(found, called)
        return found


def _echoing(receipt: Receipt, called: dict[str, Any]) -> Receipt:
    return receipt.model_copy(update={"fields": {**receipt.fields, "echo": called}})


def echoing_trip_tool_set() -> ToolSet:
    """The sandbox's trip tool set with every tool echoing (same catalogue)."""
    base = trip_tool_set()
    registry = ToolRegistry({ref: EchoingTool(ref[0], base.registry.get(*ref))
                             for ref in base.registry.refs()})
    return ToolSet(base.catalogue, registry, base.resources)
