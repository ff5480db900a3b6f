"""The ports under contract: every test here runs once on the in-memory implementations
and once on the PostgreSQL ones (a fresh migrated database, marked ``integration``).

Tests reach the ports only through :class:`Ports`, so the same inputs meet the same
promises (and the same exception classes) on both.
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib.resources import files

import pytest
from contract_support import Ports

from application.gate_windows.memory import MemoryGateWindows
from application.gate_windows.postgres import PostgresGateWindows
from application.secrets.memory import MemorySecrets
from application.secrets.postgres import SecretVault
from events import EventStore, apply_migrations
from events.definition_store.memory import MemoryDefinitions
from events.definition_store.postgres import DefinitionStore
from events.saga_log.memory import MemorySagaLog
from events.saga_log.postgres import PostgresSagaLog
from events.saga_log.streams import saga_registry


def _memory() -> Iterator[Ports]:
    definitions = MemoryDefinitions()
    log = MemorySagaLog(definitions)
    yield Ports("memory", log, definitions, MemorySecrets(), log.store, MemoryGateWindows())


def _postgres(url: str) -> Iterator[Ports]:
    with EventStore.connect(url, pool_size=4, registry=saga_registry()) as store:
        store.migrate()
        apply_migrations(url, "fleet", files("workers").joinpath("migrations"))
        definitions = DefinitionStore(store)
        log = PostgresSagaLog(store, definitions)
        yield Ports("postgres", log, definitions, SecretVault(store), store,
                    PostgresGateWindows(store))


@pytest.fixture(
    params=["memory", pytest.param("postgres", marks=pytest.mark.integration)]
)
def ports(request: pytest.FixtureRequest) -> Iterator[Ports]:
    """The ports of one implementation, empty."""
    if request.param == "memory":
        yield from _memory()
    else:
        yield from _postgres(request.getfixturevalue("fresh_database"))
