"""What every projection needs: the event store (saga registry) and the definitions."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.resources import files
from types import TracebackType
from typing import Any

import psycopg

from events import EventStore, apply_migrations
from events.definition_store.postgres import DefinitionStore
from events.eventstore.read_only import ReadOnlyEventStore
from events.saga_log.streams import saga_registry


def migrate(url: str) -> list[str]:
    """Apply the projections' SQL migrations (idempotent); return those newly applied."""
    return apply_migrations(url, "projections", files("projections").joinpath("migrations"))


@dataclass
class ProjectionContext:
    """One explicit object per process: the store to read from, definitions to fold with.

    ``log_reads`` is where the projector reads the log's pages from: a hot standby's
    read-only store, while its rows and checkpoints are written through ``store`` (the
    primary); None reads the log from ``store`` too.
    """

    store: EventStore
    definitions: DefinitionStore
    log_reads: ReadOnlyEventStore | None = None

    @classmethod
    def connect(
        cls, url: str, *, pool_size: int = 4, log_reads: ReadOnlyEventStore | None = None
    ) -> ProjectionContext:
        """Open a store with the saga registry on ``url`` (no DDL; see :func:`migrate`);
        the context closes ``log_reads`` with its own store."""
        try:
            store = EventStore.connect(url, pool_size=pool_size, registry=saga_registry())
        except BaseException:
            if log_reads is not None:  # handed over to this context: closed if it never opens
                log_reads.close()
            raise
        return cls(store, DefinitionStore(store), log_reads=log_reads)

    @classmethod
    def connect_read_only(cls, url: str, *, source: str, pool_size: int = 4) -> ProjectionContext:
        """A context that only reads, from ``url`` (a hot standby, or the primary): writes
        raise ReadOnlyStore naming ``source``, the setting that routed the reads there."""
        store = ReadOnlyEventStore.open(url, source=source, pool_size=pool_size,
                                        registry=saga_registry())
        return cls(store, DefinitionStore(store))

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled autocommit connection for read-model queries."""
        with self.store.connection() as conn:
            yield conn

    def close(self) -> None:
        """Close the stores' pools."""
        self.store.close()
        if self.log_reads is not None:
            self.log_reads.close()

    def __enter__(self) -> ProjectionContext:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
