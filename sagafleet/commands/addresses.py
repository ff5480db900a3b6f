"""The listening address of a served command (``--http HOST:PORT``), and the warning for
plain http that other machines can reach."""

from __future__ import annotations

import ipaddress

from sagafleet.errors import UsageError


def host_port(value: str, command: str) -> tuple[str, int]:
    """``HOST:PORT`` split (an IPv6 host may be bracketed); ``UsageError`` naming the
    command and the value otherwise."""
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"{command}: --http wants HOST:PORT, not {value!r}")
    return host.strip("[]"), int(port)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only (``localhost``, 127.0.0.0/8,
    ``::1``); a name other than ``localhost``, and ``0.0.0.0``/``::`` (every interface), is
    not."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to any interface
        return False


def plain_http_warning(command: str, host: str, port: int, what: str) -> str | None:
    """The warning for serving plain http on an address other machines can reach (None on
    a loopback address): ``what`` (the credentials at stake) crosses the network in clear."""
    if is_loopback(host):
        return None
    return (f"{command}: WARNING: serving plain http on {host}:{port}, which other machines "
            f"can reach: {what} cross the network in clear. Serve https, or put a TLS proxy "
            "in front, or listen on 127.0.0.1.")
