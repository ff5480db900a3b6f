"""The optional parts of the distribution (its extras), checked where a feature needs one.

The base install runs the fleet (worker, sweeper, projector, demo); the agent gateway
(``mcp``) and Sentry (``sentry``) are extras. A command that needs a missing one stops with
:class:`~saga_core.errors.MissingExtra`, a one-line message naming the ``pip install`` to
run, instead of an ImportError from deep inside.
"""

from __future__ import annotations

import importlib.util

from saga_core.errors import MissingExtra

MCP = "mcp"
"""The agent gateway: ``sagafleet mcp``, ``sagafleet tools export`` (the MCP SDK)."""

SENTRY = "sentry"
"""Errors and traces to Sentry (sentry-sdk), when ``SAGAFLEET_SENTRY_DSN`` is set."""


def require(module: str, *, feature: str, extra: str) -> None:
    """Raise :class:`MissingExtra` unless ``module`` (which ``extra`` installs) is importable."""
    if importlib.util.find_spec(module) is None:
        raise MissingExtra(feature, extra)


__all__ = ["MCP", "SENTRY", "MissingExtra", "require"]
