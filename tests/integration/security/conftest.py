"""Fixtures of the security tests: the reliability harness's real fleet."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reliability"))

from tests_shared_fixtures import broker, database, faults, fleet, workers  # noqa: E402,F401
