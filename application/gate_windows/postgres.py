"""The PostgreSQL :class:`~application.gate_windows.port.GateWindows`: tenant windows in
``fleet.gate_windows``.

A reservation is made in the claim's own transaction (the caller's unit): the window's row is
locked ``FOR UPDATE`` (created first if need be), then its sliding total is summed and the
reservation inserted only if it fits. In READ COMMITTED, which the store's units run in, each
statement sees what committed before it started, so a second claimer that waited for the
lock sums after the first committed: two sagas of a tenant never both slip under the limit
(``tests/integration/application/gate_windows/test_gate_window_race.py`` races real claims
to show it).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING

from application.gate_windows.port import GateWindows
from events import EventStore, UnitOfWork
from events.saga_log.port import Unit, unit_of
from saga_core.approval.risk_gates import MAX_WINDOW
from saga_core.approval.totals import WindowCall, WindowTotal

_SUM = (
    "SELECT coalesce(sum(amount), 0), count(*) FROM fleet.gate_window_reservations"
    " WHERE tenant = %s AND window_key = %s AND released_at IS NULL AND reserved_at > %s"
    " AND operation_key IS DISTINCT FROM %s"
)


class PostgresGateWindows:
    """Tenant windows in PostgreSQL, reserved inside the caller's unit of work."""

    def __init__(self, store: EventStore) -> None:
        self._store = store

    def reserve(self, tenant: str, call: WindowCall, now: datetime, unit: Unit) -> WindowTotal:
        """Lock the window, sum it without this operation, and reserve the call if it fits
        (or was approved over the limit); the row commits or not with ``unit``."""
        conn = unit_of(UnitOfWork, unit).connection
        conn.execute(
            "INSERT INTO fleet.gate_windows (tenant, window_key) VALUES (%s, %s)"
            " ON CONFLICT DO NOTHING", (tenant, call.window))
        conn.execute(
            "SELECT 1 FROM fleet.gate_windows WHERE tenant = %s AND window_key = %s FOR UPDATE",
            (tenant, call.window)).fetchone()
        row = conn.execute(_SUM, (tenant, call.window, now - call.period,
                                  call.operation_key)).fetchone()
        before, calls = (Decimal(row[0]), int(row[1])) if row else (Decimal(0), 0)
        fits = call.approved_over or before + call.amount <= call.limit
        if fits:
            conn.execute(
                "INSERT INTO fleet.gate_window_reservations"
                " (operation_key, tenant, window_key, amount, reserved_at)"
                " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (operation_key) DO UPDATE"
                " SET amount = excluded.amount, reserved_at = excluded.reserved_at,"
                " released_at = NULL",
                (call.operation_key, tenant, call.window, call.amount, now))
            conn.execute(
                "DELETE FROM fleet.gate_window_reservations"
                " WHERE tenant = %s AND window_key = %s AND reserved_at < %s",
                (tenant, call.window, now - MAX_WINDOW))
        return WindowTotal(before, calls, fits)

    def release(self, tenant: str, operation_keys: Sequence[str], now: datetime,
                unit: Unit) -> int:
        """Stop counting these operations' reservations, with ``unit``; how many were."""
        conn = unit_of(UnitOfWork, unit).connection
        released = conn.execute(
            "UPDATE fleet.gate_window_reservations SET released_at = %s"
            " WHERE operation_key = ANY(%s) AND tenant = %s AND released_at IS NULL"
            " RETURNING operation_key",
            (now, list(operation_keys), tenant)).fetchall()
        return len(released)

    def total(self, tenant: str, window: str, period: timedelta, now: datetime) -> WindowTotal:
        """The window's committed total in ``(now - period, now]``."""
        with self._store.connection() as conn:
            row = conn.execute(_SUM, (tenant, window, now - period, None)).fetchone()
        before, calls = (Decimal(row[0]), int(row[1])) if row else (Decimal(0), 0)
        return WindowTotal(before, calls, reserved=False)


if TYPE_CHECKING:  # mypy checks that the class keeps its port's signatures

    def _conforms(windows: PostgresGateWindows) -> GateWindows:
        return windows
