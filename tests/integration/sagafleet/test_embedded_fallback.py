"""Where no embedded package has a wheel, the embedded default runs the machine's own
PostgreSQL and Redis binaries, or says in one line what to install.

scripts/check_installs.sh proves the same through ``pip install .`` and ``sagafleet demo``
on CPython 3.13 with the packages uninstalled; these tests hold the pieces in-process.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis

from saga_core.errors import MissingExtra
from sagafleet import embedded, extras, system_postgres
from sagafleet.errors import exit_code_for
from sagafleet.exit_codes import ExitCode

SYSTEM_BIN = system_postgres.find_bin_dir()
SYSTEM_REDIS = embedded.find_redis_on_path()
needs_system_servers = pytest.mark.skipif(
    SYSTEM_BIN is None or SYSTEM_REDIS is None,
    reason="no PostgreSQL server binaries or redis-server on this machine")


@pytest.fixture
def home() -> Iterator[Path]:
    """A short SAGAFLEET_HOME (unix socket paths are short), stopped and removed after."""
    path = Path(tempfile.mkdtemp(prefix="sff-", dir="/tmp"))
    yield path
    if SYSTEM_BIN is not None and (path / "pg" / "postmaster.pid").exists():
        system_postgres.Control(SYSTEM_BIN, path.resolve() / "pg",
                                system_postgres.run_as_user()).stop()
    embedded.stop_redis(path)
    shutil.rmtree(path, ignore_errors=True)


@needs_system_servers
def test_the_system_binaries_run_a_cluster_and_a_broker_under_sagafleet_home(home) -> None:
    # given PostgreSQL and Redis binaries the machine has (no embedded package used)
    assert SYSTEM_BIN is not None and SYSTEM_REDIS is not None

    # when the fallback starts both, twice
    first = embedded.start_system_postgres(home, SYSTEM_BIN)
    again = embedded.start_system_postgres(home, SYSTEM_BIN)
    broker = embedded.start_redis_with(home, SYSTEM_REDIS)

    # then one cluster answers on a socket in its own data directory, reused the second time
    assert first.url == again.url
    assert first.data_dir == home.resolve() / "pg"
    with psycopg.connect(first.url) as conn:
        version = conn.execute("SHOW server_version_num").fetchone()
        socket_dir = conn.execute("SHOW unix_socket_directories").fetchone()
        listen = conn.execute("SHOW listen_addresses").fetchone()
    assert version is not None and int(version[0]) // 10000 == int(
        (first.data_dir / "PG_VERSION").read_text())
    assert socket_dir == (str(first.data_dir),)
    assert listen == ("",)  # no TCP port: the socket is the only way in
    client = redis.Redis(unix_socket_path=str(broker.socket))
    assert client.ping()
    client.close()

    # and the same pg_ctl stops the cluster
    control = system_postgres.Control(SYSTEM_BIN, first.data_dir, system_postgres.run_as_user())
    assert control.is_running()
    assert control.stop()
    assert not control.is_running()


def test_without_postgres_anywhere_the_error_says_in_one_line_what_to_install(home) -> None:
    # given no initdb on the search path and no versioned install directory
    found = system_postgres.find_bin_dir(search_path="", versioned_root=home / "none")
    assert found is None

    # when the fallback is asked for a cluster with nothing to run it
    with pytest.raises(embedded.EmbeddedServerMissing) as raised:
        embedded.start_system_postgres(home, found)

    # then one line names what to install and the URL to set instead; the CLI exits 2
    message = str(raised.value)
    assert "\n" not in message
    assert "apt install postgresql" in message and "SAGAFLEET_DATABASE_URL" in message
    assert exit_code_for(raised.value) is ExitCode.USAGE


def test_without_redis_anywhere_the_error_says_in_one_line_what_to_install(home) -> None:
    # given no redis-server or valkey-server on the search path
    found = embedded.find_redis_on_path("")
    assert found is None

    # when the embedded broker is asked for with nothing to run it
    with pytest.raises(embedded.EmbeddedServerMissing) as raised:
        embedded.start_redis_with(home, found)

    # then the refusal is one line naming what to install, exit 2
    error = raised.value
    assert "\n" not in str(error)
    assert "apt install redis-server" in str(error) and "SAGAFLEET_BROKER_URL" in str(error)
    assert exit_code_for(error) is ExitCode.USAGE


def test_the_newest_complete_versioned_directory_is_chosen(tmp_path) -> None:
    # given Debian's layout with 15 and 16 installed, and a 17 missing its server binary
    for version, names in (("15", ("initdb", "pg_ctl", "postgres")),
                           ("16", ("initdb", "pg_ctl", "postgres")),
                           ("17", ("initdb", "pg_ctl"))):
        bin_dir = tmp_path / version / "bin"
        bin_dir.mkdir(parents=True)
        for name in names:
            (bin_dir / name).write_text("#!/bin/sh\n")

    # when nothing is on the search path
    found = system_postgres.find_bin_dir(search_path="", versioned_root=tmp_path)

    # then the newest complete one is used (pg_ctl runs the postgres next to it)
    assert found == tmp_path / "16" / "bin"


def test_a_missing_extra_is_named_with_the_install_command() -> None:
    # when a feature needs a module no extra of this install provides
    with pytest.raises(MissingExtra) as raised:
        extras.require("sagafleet_no_such_module", feature="sagafleet mcp", extra=extras.MCP)

    # then the message names the feature and the pip command, and the CLI exits 2
    assert str(raised.value) == ("sagafleet mcp needs the 'mcp' extra, which is not installed: "
                                 "pip install 'sagafleet[mcp]'")
    assert exit_code_for(raised.value) is ExitCode.USAGE
