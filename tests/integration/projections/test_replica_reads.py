"""The projector and verify reading the log from a hot standby, writing only on the primary;
read commands routed there by SAGAFLEET_READ_DATABASE_URL, read-your-writes on the primary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from principal_support import issue_token
from projection_support import TripScript
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr
from standby_cluster import StandbyPair, standby_pair, wait_for_replay

from events.definition_store.postgres import DefinitionStore
from events.errors import ReadOnlyStore
from events.eventstore.read_only import ReadOnlyEventStore
from events.saga_log.postgres import PostgresSagaLog
from projections import ProjectionContext, ProjectionRunner
from projections.prometheus import scrape
from projections.store import read_rows
from projections.verify import verify
from sagafleet import runtime
from sagafleet.example_sagas import trip_definition
from sagafleet.exit_codes import ExitCode
from sagafleet.migrate import migrate_all
from sagafleet.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def pair() -> Iterator[StandbyPair]:
    """A migrated primary with the trip definition, and a hot standby of it."""
    with standby_pair() as started:
        migrate_all(started.primary)
        with ProjectionContext.connect(started.primary) as ctx:
            ctx.definitions.register_shared(trip_definition())
        wait_for_replay(started.primary, started.standby)
        yield started


def settings_for(pair: StandbyPair, home: Path) -> Settings:
    return Settings(home=home, database_url=SecretStr(pair.primary),
                    read_database_url=SecretStr(pair.standby))


def write(pair: StandbyPair, script: TripScript) -> None:
    with ProjectionContext.connect(pair.primary) as ctx:
        script.write(PostgresSagaLog(ctx.store, DefinitionStore(ctx.store)))


def projected(pair: StandbyPair) -> set[str]:
    """The saga ids in the primary's read model (table set 1)."""
    with psycopg.connect(pair.primary) as conn:
        return set(read_rows(conn, 1))


def set_replay(pair: StandbyPair, *, paused: bool) -> None:
    with psycopg.connect(pair.standby, autocommit=True) as conn:
        conn.execute("SELECT pg_wal_replay_pause()" if paused else "SELECT pg_wal_replay_resume()")


def test_the_projector_follows_the_log_on_the_standby_and_writes_on_the_primary(
    pair: StandbyPair, tmp_path: Path
) -> None:
    # given a projector built as `sagafleet projector` builds it with a read replica set
    first, second = TripScript().completed(), TripScript().compensated()
    write(pair, first)
    wait_for_replay(pair.primary, pair.standby)
    with runtime.projector_side(settings_for(pair, tmp_path)) as ctx:
        assert isinstance(ctx.log_reads, ReadOnlyEventStore)
        runner = ProjectionRunner(ctx)
        runner.catch_up()
        assert first.saga_id in projected(pair)

        # when the standby stops replaying and a saga is written on the primary
        set_replay(pair, paused=True)
        try:
            write(pair, second)
            runner.catch_up()
            # then the projector has not seen it: its log comes from the standby
            assert second.saga_id not in projected(pair)
        finally:
            set_replay(pair, paused=False)

        # and once the standby replays it, the same projector applies it on the primary
        wait_for_replay(pair.primary, pair.standby)
        runner.catch_up()
        runner.close()
        # and its metrics say how far the replica's replay is behind (seconds, 0: caught up)
        lag = next(family for family in text_string_to_metric_families(scrape(ctx))
                   if family.name == "sagafleet_read_replica_lag_seconds")
        (sample,) = lag.samples
        assert sample.value >= 0
    assert {first.saga_id, second.saga_id} <= projected(pair)


def test_verify_and_read_commands_read_from_the_standby_and_refuse_writes(
    pair: StandbyPair, tmp_path: Path
) -> None:
    # given a projected log, replayed on the standby
    write(pair, TripScript().completed())
    with ProjectionContext.connect(pair.primary) as primary:
        ProjectionRunner(primary).catch_up()
    wait_for_replay(pair.primary, pair.standby)
    settings = settings_for(pair, tmp_path)

    # when verify runs on the read side, then it reads the standby and finds nothing wrong
    with runtime.read_side(settings) as ctx:
        with ctx.connection() as conn:
            row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
        assert row is not None and row[0] is True
        report = verify(ctx)
        assert report.ok, report
        assert report.sagas_checked >= 1
        # and a write sent there by mistake is refused, naming the setting
        with pytest.raises(ReadOnlyStore, match="SAGAFLEET_READ_DATABASE_URL"):
            ctx.definitions.register_shared(trip_definition())


def test_a_fresh_read_sees_a_write_the_lagging_standby_has_not_replayed(
    pair: StandbyPair, tmp_path: Path
) -> None:
    # given a standby that has stopped replaying
    settings = settings_for(pair, tmp_path)
    script = TripScript().completed()
    set_replay(pair, paused=True)
    try:
        # when a saga is written on the primary
        write(pair, script)
        stream = f"saga-{script.saga_id}"
        # then the read side (the standby) does not have it yet, the primary side does
        with runtime.read_side(settings) as lagging:
            assert lagging.store.read_stream(stream) == []
        with runtime.primary_side(settings) as fresh:
            assert len(fresh.store.read_stream(stream)) == len(script.events)
    finally:
        set_replay(pair, paused=False)



def test_status_reads_the_standby_and_status_fresh_reads_the_primary(
    pair: StandbyPair, tmp_path: Path
) -> None:
    # given a reader's token, replayed on the standby, and a standby that stops replaying
    token = issue_token(pair.primary, "replica-reader", ["auditor"])
    wait_for_replay(pair.primary, pair.standby)
    env = {**os.environ, "SAGAFLEET_HOME": str(tmp_path), "SAGAFLEET_TOKEN": token,
           "SAGAFLEET_DATABASE_URL": pair.primary, "SAGAFLEET_READ_DATABASE_URL": pair.standby}
    script = TripScript().completed()
    set_replay(pair, paused=True)
    try:
        # when a saga is written on the primary
        write(pair, script)

        def status(*flags: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "sagafleet", "status", script.saga_id, "--json", *flags],
                env=env, capture_output=True, text=True, timeout=120, check=False)

        # then `status` reads the lagging standby and does not find it yet (exit 4)
        lagging = status()
        assert lagging.returncode == ExitCode.NOT_FOUND, lagging.stderr
        # while `status --fresh` reads the primary and shows it
        fresh = status("--fresh")
        assert fresh.returncode == ExitCode.OK, fresh.stderr
        assert json.loads(fresh.stdout)["saga_id"] == script.saga_id
    finally:
        set_replay(pair, paused=False)
