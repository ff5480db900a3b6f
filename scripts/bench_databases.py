"""A benchmark's own databases on its server: created empty, named for the benchmark, and
dropped when it ends (scripts only)."""

from __future__ import annotations

import uuid

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo


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
