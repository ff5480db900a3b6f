"""A benchmark's server and its own databases on it: the given server or a throwaway embedded
PostgreSQL (stopped and its files removed when the benchmark ends), and databases created
empty, named for the benchmark, and dropped when it ends (scripts only)."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo


@contextmanager
def postgres_server(url: str | None) -> Iterator[str]:
    """The server of ``url``, or a throwaway embedded PostgreSQL: started in a temporary home
    (short, under /tmp: its unix socket path must fit), stopped and removed afterwards."""
    if url:
        yield url
        return
    from sagafleet.embedded import start_postgres, stop_postgres

    home = Path(tempfile.mkdtemp(prefix="sfb-", dir="/tmp"))
    try:
        yield start_postgres(home).url
    finally:
        stop_postgres(home)
        shutil.rmtree(home, ignore_errors=True)


def new_database(server_url: str, prefix: str) -> str:
    """Create ``<prefix>_<random>`` on the server of ``server_url``; its URL (not migrated)."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    params = conninfo_to_dict(server_url)
    params["dbname"] = name
    return make_conninfo("", **params)


def drop_database(server_url: str, url: str) -> None:
    """Drop the database of ``url`` (made by :func:`new_database`) on the server of
    ``server_url``, closing whatever connections are still open to it."""
    name = conninfo_to_dict(url)["dbname"]
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(str(name))))
