"""Stored definitions: the port (by name, version and hash, per tenant), its records and
errors, and the PostgreSQL and in-memory adapters.

* :mod:`events.definition_store.memory` — The in-memory
  :class:`~events.definition_store.port.Definitions`, held to the PostgreSQL store's contract by
  ``tests/contract`` (thread-safe, one lock).
* :mod:`events.definition_store.port` — The definitions port: validated saga definitions by
  ``(name, version, hash)``, per tenant.
* :mod:`events.definition_store.postgres` — Saga definitions stored in PostgreSQL by ``(name,
  version, hash)``, each owned by a tenant or by the shared, read-only built-in set.
"""
