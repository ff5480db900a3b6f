"""The saga log: the port the engine reads and writes sagas through, the codec and stream
rules both adapters share, the PostgreSQL and in-memory adapters, and snapshots.

* :mod:`events.saga_log.memory` — The in-memory :class:`~events.saga_log.port.SagaLog`
  (``sagafleet.testing``'s), held to the PostgreSQL log's contract by ``tests/contract``.
  Thread-safe (one lock each). Build the in-memory ports together::
* :mod:`events.saga_log.port` — The saga log port: the one contract the saga engine reads and
  writes sagas through.
* :mod:`events.saga_log.postgres` — The PostgreSQL :class:`~events.saga_log.port.SagaLog`: saga
  streams in the event store, snapshots beside them, wake-ups by LISTEN/NOTIFY.
* :mod:`events.saga_log.snapshots` — Snapshots of saga state beside the log: where a load starts
  folding, never the truth.
* :mod:`events.saga_log.streams` — Saga streams: the registry of saga event types, the codec
  every SagaLog folds with, and ``SagaStreams``, what both adapters
  (:mod:`events.saga_log.postgres`, :mod:`events.saga_log.memory`) share.
"""
