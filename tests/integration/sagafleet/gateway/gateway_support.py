"""Shared data and helpers of the gateway tests (imported by file name: tests are not a package)."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from typing import Any

import psycopg
from mcp import ClientSession
from principal_support import token_for
from trip_inputs import TRIP_INPUT as FLEET_TRIP_INPUT

from saga_core.access.roles import PrincipalKind
from workers.fleet import Fleet

# The trip input of every fleet test, with a token easy to search for in outputs.
TRIP_INPUT = {**FLEET_TRIP_INPUT, "card_token": "tok_visa_4242_secret"}


async def call(session: ClientSession, tool: str, **arguments: Any) -> tuple[bool, dict[str, Any]]:
    """(is_error, the one JSON document) of a tool call."""
    result = await session.call_tool(tool, arguments)
    text = result.content[0].text  # type: ignore[union-attr]
    document = json.loads(text)
    assert result.structured_content in (None, document)
    return bool(result.is_error), document


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_listening(port: int, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """Wait until a spawned server accepts connections on ``port``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"nothing listens on port {port}")


def principal_token(fleet: Fleet, tenant: str, name: str, *roles: str,
                kind: PrincipalKind = PrincipalKind.AGENT) -> str:
    """A live token of ``name`` of ``tenant`` in the fleet's directory: an agent with the
    ``agent`` role unless told otherwise."""
    return token_for(fleet, name, roles or ("agent",), tenant=tenant, kind=kind)


def recorded(database: str) -> tuple[int, ...]:
    """How many events, definitions and deposited secrets are recorded so far: a refused
    call must leave all three as they were."""
    with psycopg.connect(database) as conn:
        return tuple(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]  # type: ignore[index]
                     for table in ("eventstore.events", "eventstore.definitions",
                                   "fleet.secret_refs"))
