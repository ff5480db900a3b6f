"""``sagafleet db drop-snapshots``: every snapshot of saga state goes, the sagas stay."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from test_cli_behaves import bare_env, sagafleet

from events.definition_store.postgres import DefinitionStore
from events.eventstore.model import NO_STREAM
from events.eventstore.postgres import EventStore
from events.saga_log.postgres import PostgresSagaLog
from events.saga_log.streams import saga_registry, saga_stream
from saga_core import CancelRequested, SagaStarted
from saga_core.engine.state_codec import DEFAULT_SNAPSHOT_EVERY, SCHEMA
from sagafleet.example_sagas import trip_definition

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def long_saga(log: PostgresSagaLog, definitions: DefinitionStore, saga_id: str) -> None:
    """A started trip saga with more events than a load folds before it keeps a snapshot."""
    definition = trip_definition()
    definitions.register_shared(definition, registered_by="test")
    log.append(saga_id, "t", [SagaStarted(
        at=T0, saga_id=saga_id, tenant="t", definition_name=definition.name,
        definition_version=definition.version, definition_hash=definition.content_hash(),
        input={}, input_hash="h" * 64, retry_budget=definition.retry_budget)], NO_STREAM)
    notes = [CancelRequested(at=T0 + timedelta(minutes=n), actor="op", reason=str(n))
             for n in range(DEFAULT_SNAPSHOT_EVERY + 1)]
    log.append(saga_id, "t", notes, 1)


def test_drop_snapshots_deletes_every_snapshot_and_loads_fold_the_log_again(
    database: str, tmp_path: Path
) -> None:
    with EventStore.connect(database, pool_size=2, registry=saga_registry()) as store:
        definitions = DefinitionStore(store)
        log = PostgresSagaLog(store, definitions)
        for saga_id in ("a", "b"):
            long_saga(log, definitions, saga_id)
        before = {saga_id: log.load(saga_id).state for saga_id in ("a", "b")}  # writes two
        # when an operator drops the snapshots
        done = sagafleet("db", "drop-snapshots", "--json",
                         env=bare_env(tmp_path, SAGAFLEET_DATABASE_URL=database))
        # then both are gone, and the sagas load as before (from their logs)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == {"dropped": 2}
        reads = log.snapshots.read_from_snapshots([saga_stream("a"), saga_stream("b")], SCHEMA)
        assert all(read.snapshot is None for read in reads.values())
        assert {saga_id: log.load_history(saga_id).state for saga_id in ("a", "b")} == before
