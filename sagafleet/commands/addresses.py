"""The listening address of a served command (``--http HOST:PORT``)."""

from __future__ import annotations

from sagafleet.errors import UsageError


def host_port(value: str, command: str) -> tuple[str, int]:
    """``HOST:PORT`` split (an IPv6 host may be bracketed); ``UsageError`` naming the
    command and the value otherwise."""
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"{command}: --http wants HOST:PORT, not {value!r}")
    return host.strip("[]"), int(port)
