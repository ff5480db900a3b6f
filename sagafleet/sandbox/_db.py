"""Where sandbox providers get a PostgreSQL connection: a conninfo string or a pool.

Every statement the sandbox runs sits inside an explicit ``conn.transaction()`` block, so
the code behaves the same on autocommit connections and on a caller's pool.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

ConnectionSource = str | ConnectionPool
"""A conninfo/URL (one short connection per call) or a caller-owned connection pool."""


@contextmanager
def connect(source: ConnectionSource) -> Iterator[psycopg.Connection[Any]]:
    """A connection from ``source``: fresh for a conninfo string, borrowed from a pool."""
    if isinstance(source, str):
        with psycopg.connect(source, autocommit=True) as conn:
            yield conn
    else:
        with source.connection() as conn:
            yield conn


def open_pool(conninfo: str, *, max_size: int = 8) -> ConnectionPool:
    """An opened pool of autocommit connections; the caller closes it."""
    return ConnectionPool(
        conninfo,
        min_size=1,
        max_size=max_size,
        kwargs={"autocommit": True},
        open=True,
    )
