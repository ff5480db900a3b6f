"""Tenant windows of cumulative gates: the ledger port of reservations and its adapters.

* :mod:`application.gate_windows.memory` — The in-memory
  :class:`~application.gate_windows.port.GateWindows`, held to the PostgreSQL ledger's contract
  by ``tests/contract``: a unit holds its window until it ends, as a row lock would.
* :mod:`application.gate_windows.port` — The gate windows port: a tenant window's ledger of
  reservations (``saga_core.approval.totals``).
* :mod:`application.gate_windows.postgres` — The PostgreSQL
  :class:`~application.gate_windows.port.GateWindows`: tenant windows in ``fleet.gate_windows``.
"""
