"""Fixtures of the reliability tests: a migrated database, a flushed Redis, real workers."""

from __future__ import annotations

from tests_shared_fixtures import broker, database, faults, fleet, workers  # noqa: F401
