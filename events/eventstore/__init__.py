"""The event store: the envelope, the PostgreSQL store (append with an expected version,
gap-safe reads, subscriptions) and the in-memory one that keeps its promises.

* :mod:`events.eventstore.appending` — The append: one of two statements, by whether the client
  knows where the chain starts.
* :mod:`events.eventstore.driver` — The one boundary where psycopg errors become the store's
  typed errors, and row mapping.
* :mod:`events.eventstore.hashing` — Canonical JSON and the per-stream hash chain.
* :mod:`events.eventstore.lending` — The store's connections: lent from its pool, kept at hand
  between loans.
* :mod:`events.eventstore.memory` — An in-memory event store that keeps
  :class:`events.eventstore.postgres.EventStore`'s promises.
* :mod:`events.eventstore.model` — The envelope: events to append, events as recorded, global
  positions, append results.
* :mod:`events.eventstore.postgres` — The PostgreSQL event store: append with optimistic
  concurrency, read, subscribe.
* :mod:`events.eventstore.prepare` — Validation and normalisation of events before any write:
  bad input fails here, typed.
* :mod:`events.eventstore.read_only` — An event store opened for reading only: on a PostgreSQL
  hot standby, or on the primary by a command that must not write.
* :mod:`events.eventstore.reading` — Read queries shared by the store and subscriptions: one
  stream, and the gap-safe log.
* :mod:`events.eventstore.registry` — Event schemas: pydantic models by type name, schema
  versions, and chained upcasters.
* :mod:`events.eventstore.rules` — The event store's rules that hold whatever the storage, as
  pure functions: what an expected version means, how models become envelopes, what a retried
  append repeats, which stream ids a multi-stream read takes.
* :mod:`events.eventstore.subscription` — Checkpointed, gap-safe followers of the global log,
  and the per-stream version gate.
* :mod:`events.eventstore.traces` — A trace's events: every event a tenant's sagas recorded
  under one lineage trace id.
* :mod:`events.eventstore.waking` — Wake-ups sent after commits: one NOTIFY for every append
  committed since the last one.
"""
