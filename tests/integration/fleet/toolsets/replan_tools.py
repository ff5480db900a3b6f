"""Tools for the replan tests, as a deployment would plug them into ``sagafleet worker``.

Every call of every tool is recorded in ``test_replan_calls`` (tool, operation key, args)
and **nothing is deduplicated by key**: a second call with the same key is a second row.
So a test counts exactly how many times each business action reached its tool.

``trips.book`` books a leg (compensable, undone by ``trips.cancel``); ``trips.pay`` pays
(compensable, undone by ``trips.refund``; over 100 it asks a person, which is where a plan
waits while its agent replans); ``trips.notify`` sends a notice (irreversible; its declared
correction is ``trips.notify_correction``) and ``trips.fail`` always refuses (a permanent
failure after the notice: what the correction tests need). A correction whose ``booking``
contains ``broken`` is refused too (a correction that fails).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import psycopg

from saga_core import ToolCatalogue
from saga_core.contracts import ErrorClass, Receipt
from workers.tools import Absent, LookupResult, ToolError, ToolRegistry, ToolSet


def _tool(name: str, semantics: str, args: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"name": name, "version": 1, "semantics": semantics, "dedupes_by_key": False,
            "commit_horizon_s": 1, "args": args, **more}


_UNDO = {"booking": {"type": "string"}}
CATALOGUE = ToolCatalogue.model_validate({"tools": [
    _tool("trips.book", "compensable", {"leg": {"type": "string"}},
          compensation={"tool": "trips.cancel", "version": 1,
                        "args": {"booking": "${receipt.resource_id}"}}),
    _tool("trips.cancel", "idempotent_by_key", _UNDO),
    _tool("trips.pay", "compensable", {"amount": {"type": "number", "minimum": 0}},
          compensation={"tool": "trips.refund", "version": 1,
                        "args": {"booking": "${receipt.resource_id}"}},
          gate={"risk_class": "money", "above": {"arg": "amount", "limit": 100},
                "role": "approver"}),
    _tool("trips.refund", "idempotent_by_key", _UNDO),
    _tool("trips.notify", "irreversible", {"to": {"type": "string"}},
          compensation={"tool": "trips.notify_correction", "version": 1,
                        "args": {"booking": "${receipt.resource_id}"}}),
    _tool("trips.notify_correction", "irreversible", _UNDO),
    _tool("trips.fail", "idempotent_by_key", {"why": {"type": "string"}}),
]})

TABLE = ("CREATE TABLE IF NOT EXISTS test_replan_calls (id bigserial PRIMARY KEY, "
         "tool text NOT NULL, key text NOT NULL, args jsonb NOT NULL)")


@dataclass(frozen=True)
class RecordingTool:
    """One tool: records the call, then answers (never replaying a key)."""

    name: str

    def execute(self, args: Mapping[str, Any], key: str) -> Receipt:
        with psycopg.connect(os.environ["SAGAFLEET_DATABASE_URL"], autocommit=True) as conn:
            conn.execute("INSERT INTO test_replan_calls (tool, key, args) VALUES (%s, %s, %s)",
                         (self.name, key, json.dumps(dict(args))))
        if self.name == "trips.notify_correction" and "broken" in str(args.get("booking")):
            raise ToolError(ErrorClass.PERMANENT, "the mail server refused the correction")
        if self.name == "trips.fail":
            raise ToolError(ErrorClass.PERMANENT, f"refused for good: {args.get('why')}")
        if self.name == "trips.notify":  # the recipient shows in the message's id
            return Receipt(resource_id=f"{args['to']}/{key}", status="done")
        return Receipt(resource_id=key, status="done")

    def lookup(self, key: str) -> LookupResult:
        with psycopg.connect(os.environ["SAGAFLEET_DATABASE_URL"], autocommit=True) as conn:
            row = conn.execute("SELECT 1 FROM test_replan_calls WHERE tool = %s AND key = %s",
                               (self.name, key)).fetchone()
        return Absent(f"no call under {key!r}") if row is None else Receipt(
            resource_id=key, status="done")


def tool_set() -> ToolSet:
    """The replan catalogue and its recording tools."""
    return ToolSet(CATALOGUE, ToolRegistry({
        (spec.name, spec.version): RecordingTool(spec.name) for spec in CATALOGUE.tools
    }))


def install(database: str) -> None:
    """Create the call log (before any worker runs a tool)."""
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(TABLE)


def calls(database: str) -> list[tuple[str, str, dict[str, Any]]]:
    """Every recorded call, in order: (tool, operation key, args)."""
    with psycopg.connect(database, autocommit=True) as conn:
        rows = conn.execute("SELECT tool, key, args FROM test_replan_calls ORDER BY id")
        return [(tool, key, args) for tool, key, args in rows.fetchall()]


def order_definition(to: str = "ada@example.com") -> dict[str, Any]:
    """book -> notify (the pivot; its correction: trips.notify_correction) -> fail."""
    return {
        "name": "order", "version": 1,
        "steps": [
            {"id": "book", "tool": "trips.book", "semantics": "compensable",
             "args": {"leg": "outbound LH1"},
             "compensation": {"tool": "trips.cancel",
                              "args": {"booking": "${receipt.resource_id}"}}},
            {"id": "notify", "tool": "trips.notify", "semantics": "irreversible",
             "pivot": True, "depends_on": ["book"], "args": {"to": "${input.to}"},
             "compensation": {"tool": "trips.notify_correction",
                              "args": {"booking": "${receipt.resource_id}"}}},
            {"id": "ship", "tool": "trips.fail", "semantics": "idempotent_by_key",
             "depends_on": ["notify"], "args": {"why": "out of stock"}},
        ],
        "input": {"to": {"type": "string"}},
    }
