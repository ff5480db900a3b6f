"""A user's own tool set, as a deployment would plug it into ``sagafleet worker --tools``.

``notes.write`` stores a note under the operation key in a PostgreSQL table of the fleet's
database (so the test can see each effect), deduplicating by key; ``notes.erase`` undoes it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import psycopg

from saga_core import SagaDefinition, ToolCatalogue
from saga_core.contracts import Receipt
from workers.tools import Absent, LookupResult, ToolRegistry, ToolSet

CATALOGUE = ToolCatalogue.model_validate({
    "tools": [
        {"name": "notes.write", "version": 1, "semantics": "compensable",
         "dedupes_by_key": True, "commit_horizon_s": 5, "receipt_fields": ["text"],
         "args": {"text": {"type": "string"}},
         "compensation": {"tool": "notes.erase", "version": 1,
                          "args": {"note_id": "${receipt.resource_id}"}}},
        {"name": "notes.erase", "version": 1, "semantics": "idempotent_by_key",
         "dedupes_by_key": True, "commit_horizon_s": 5,
         "args": {"note_id": {"type": "string"}}},
    ]
})

DEFINITION = SagaDefinition.model_validate({
    "name": "note", "version": 1,
    "input": {"text": {"type": "string", "min_length": 1}},
    "steps": [{"id": "write", "tool": "notes.write", "version": 1, "semantics": "compensable",
               "args": {"text": "${input.text}"},
               "retry": {"max_attempts": 3, "base_delay_s": 0.1, "max_delay_s": 1.0},
               "compensation": {"tool": "notes.erase", "version": 1,
                                "args": {"note_id": "${receipt.resource_id}"}}}],
})

TABLE = "CREATE TABLE IF NOT EXISTS test_notes (key text PRIMARY KEY, text text NOT NULL)"


@dataclass(frozen=True)
class NotesTool:
    """``notes.write`` or ``notes.erase`` against the ``test_notes`` table."""

    name: str

    def _connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(os.environ["SAGAFLEET_DATABASE_URL"], autocommit=True)

    def execute(self, args: Mapping[str, Any], key: str) -> Receipt:
        """Write (once per key) or erase the note."""
        with self._connect() as conn:
            if self.name == "notes.erase":
                conn.execute("DELETE FROM test_notes WHERE key = %s", (args["note_id"],))
                return Receipt(resource_id=str(args["note_id"]), status="erased")
            conn.execute(
                "INSERT INTO test_notes (key, text) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                (key, args["text"]),
            )
            return Receipt(resource_id=key, status="written", fields={"text": args["text"]})

    def lookup(self, key: str) -> LookupResult:
        """The note stored under ``key``, or Absent."""
        with self._connect() as conn:
            row = conn.execute("SELECT text FROM test_notes WHERE key = %s", (key,)).fetchone()
        if row is None:
            return Absent(f"no note under {key!r}")
        return Receipt(resource_id=key, status="written", fields={"text": row[0]})


def tool_set() -> ToolSet:
    """The notes catalogue and its two tools."""
    return ToolSet(CATALOGUE, ToolRegistry({
        ("notes.write", 1): NotesTool("notes.write"),
        ("notes.erase", 1): NotesTool("notes.erase"),
    }))


NOT_A_TOOL_SET = 42


HALF_A_TOOL_SET = ToolSet(CATALOGUE, ToolRegistry({("notes.write", 1): NotesTool("notes.write")}))
"""A catalogue of two tools with one implementation: a fleet must refuse to start on it."""
