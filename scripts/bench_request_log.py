"""Benchmark what the request log (sagafleet.security_log.RequestLog) adds to every request of
the console and of the MCP gateway.

The middleware runs outermost on every HTTP request: it wraps ``send`` to note the status,
and writes a line only for a refusal (always) or for any request while the access log is on.
Measured in process, without a server or a socket, so nothing else hides it: a bare ASGI app
answering 200, called directly and through ``RequestLog`` with the access log off (the
default) and on (its lines going to a handler that drops them), interleaved in rounds.
Printed: microseconds per request, median of the rounds, and the added cost of each.

Usage: python scripts/bench_request_log.py [--requests N] [--rounds R]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sagafleet.security_log import (  # noqa: E402
    ACCESS_LOGGER,
    RequestLog,
    configure_access_log,
)

SCOPE = {"type": "http", "method": "GET", "path": "/queue/fragment", "query_string": b"",
         "headers": [(b"accept", b"text/html")], "client": ("127.0.0.1", 50000),
         "scheme": "http"}


async def _bare(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/html")]})
    await send({"type": "http.response.body", "body": b"<p>ok</p>"})


async def _receive() -> dict[str, Any]:
    return {"type": "http.request", "body": b"", "more_body": False}


async def _send(message: Any) -> None:
    return None


async def _per_request_us(app: Any, requests: int) -> float:
    started = time.perf_counter()
    for _ in range(requests):
        await app(dict(SCOPE), _receive, _send)
    return (time.perf_counter() - started) / requests * 1e6


def main() -> None:
    """Run the rounds and print the medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    access = logging.getLogger(ACCESS_LOGGER)
    access.addHandler(logging.NullHandler())
    access.propagate = False  # the lines are formatted and dropped: their cost, no output
    logged = RequestLog(_bare)
    times: dict[str, list[float]] = {"bare app": [], "RequestLog, access log off": [],
                                     "RequestLog, access log on": []}
    for _ in range(args.rounds):
        times["bare app"].append(asyncio.run(_per_request_us(_bare, args.requests)))
        configure_access_log(False)
        times["RequestLog, access log off"].append(
            asyncio.run(_per_request_us(logged, args.requests)))
        configure_access_log(True)
        times["RequestLog, access log on"].append(
            asyncio.run(_per_request_us(logged, args.requests)))
    base = statistics.median(times["bare app"])
    print(f"{args.requests} requests x {args.rounds} rounds (median per request):")
    for name, samples in times.items():
        median = statistics.median(samples)
        print(f"  {name:28} {median:7.2f} us  (+{median - base:5.2f} us)")


if __name__ == "__main__":
    main()
