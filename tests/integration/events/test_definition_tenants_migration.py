"""Event-store migration 0007: definitions stored before it become the shared set.

Before 0007 a definition had no owner and every tenant saw it; after it, every tenant
still sees it (as part of the shared, read-only set), no tenant may take its name, and sagas
that named its hash still load it.
"""

from __future__ import annotations

import shutil
from importlib.resources import as_file, files
from pathlib import Path

import pytest

from events import EventStore, apply_migrations
from events.definition_store.port import SharedDefinitionName
from events.definition_store.postgres import DefinitionStore
from events.eventstore.postgres import MIGRATIONS_NAMESPACE
from saga_core import SagaDefinition
from sagafleet.example_sagas import trip_definition

pytestmark = pytest.mark.integration


def test_definitions_stored_before_0007_become_the_shared_set(
    fresh_database: str, tmp_path: Path
) -> None:
    # given a database migrated up to 0006, holding a definition (as a release before wrote it)
    before = tmp_path / "before_0007"
    before.mkdir()
    later: list[str] = []  # the release's own migrations, 0007 on
    with as_file(files("events").joinpath("migrations")) as shipped:
        for sql_file in sorted(Path(shipped).glob("*.sql")):
            if int(sql_file.name[:4]) < 7:
                shutil.copy(sql_file, before / sql_file.name)
            else:
                later.append(sql_file.stem)
    apply_migrations(fresh_database, MIGRATIONS_NAMESPACE, before)
    trip = trip_definition()
    with EventStore.connect(fresh_database, pool_size=1) as store:
        with store.connection() as conn:
            conn.execute(
                "INSERT INTO eventstore.definitions (name, version, hash, body, registered_by)"
                " VALUES (%s, %s, %s, %s::jsonb, 'old-release')",
                (trip.name, trip.version, trip.content_hash(), trip.to_json()))
        # when the release's migrations are applied
        assert store.migrate() == later
        assert later[0] == "0007_definition_tenants"
        # then every tenant sees it as shared, none may take its name, and its hash loads
        definitions = DefinitionStore(store)
        for tenant in ("acme", "globex"):
            (record,) = definitions.list(tenant=tenant)
            assert (record.name, record.shared, record.registered_by) == (
                "trip", True, "old-release")
            assert definitions.get("trip", tenant=tenant) == trip
        changed = SagaDefinition.model_validate(
            {**trip.model_dump(mode="json"), "description": "acme's own"})
        with pytest.raises(SharedDefinitionName):
            definitions.register(changed, tenant="acme")
        assert definitions.by_hash(trip.content_hash()) == trip
