"""Where secrets live: the secrets port and its adapters (a vault beside the log, never in
it), the placeholders and refs a start carries, and the guard that looks for secret values
wherever the fleet writes or shows something.

* :mod:`application.secrets.guard` — Where the fleet writes or shows something, a saga's secret
  values are looked for by value.
* :mod:`application.secrets.inputs` — Secret inputs at a start: which fields are secret, what
  crosses the broker (refs only), and what the log holds instead of a value.
* :mod:`application.secrets.memory` — The in-memory :class:`~application.secrets.port.Secrets`,
  held to the PostgreSQL vault's contract by ``tests/contract``; it writes with a
  ``MemorySagaLog``'s units of work.
* :mod:`application.secrets.placeholders` — Secret input placeholders and refs, shared by every
  :class:`application.secrets.port.Secrets` (``application.secrets.postgres.SecretVault``,
  ``application.secrets.memory.MemorySecrets``), so both behave alike.
* :mod:`application.secrets.port` — The secrets port: a saga's secret inputs, kept beside the
  log and never in it.
* :mod:`application.secrets.postgres` — The PostgreSQL
  :class:`~application.secrets.port.Secrets`: values in ``fleet.secrets`` (purged when the saga
  finishes) and single-use refs in ``fleet.secret_refs`` (kept only as digests, per tenant,
  until they expire).
"""
