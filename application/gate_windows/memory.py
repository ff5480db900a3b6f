"""The in-memory :class:`~application.gate_windows.port.GateWindows`, held to the PostgreSQL
ledger's contract by ``tests/contract``: a unit holds its window until it ends, as a row lock
would.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING

from events.eventstore.memory import MemoryUnit
from events.saga_log.port import Unit, unit_of
from saga_core.approval.risk_gates import MAX_WINDOW
from saga_core.approval.totals import WindowCall, WindowTotal


@dataclass
class _Reservation:
    """One operation's reservation in a tenant window."""

    tenant: str
    window: str
    amount: Decimal
    reserved_at: datetime
    released: bool = False


class MemoryGateWindows:
    """Tenant windows in this process: a unit that reserves in a window holds it until the
    unit ends (as PostgreSQL's row lock does), so another unit's reservation waits and then
    sees what the first one committed."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._kept: dict[str, _Reservation] = {}  # operation key -> its reservation
        self._held: dict[tuple[str, str], MemoryUnit] = {}  # window -> the unit holding it

    def reserve(self, tenant: str, call: WindowCall, now: datetime, unit: Unit) -> WindowTotal:
        """The window's total without this operation, and whether the call was reserved
        (only within the limit, or approved over it); the reservation applies with ``unit``."""
        mine = unit_of(MemoryUnit, unit)
        mine.live()
        window = (tenant, call.window)
        with self._changed:
            while (holder := self._held.get(window)) is not None and holder is not mine:
                self._changed.wait()
            if holder is None:
                self._held[window] = mine
                mine.on_end(lambda: self._let_go(window))
            before, calls = self._sum(tenant, call.window, call.period, now, call.operation_key)
        fits = call.approved_over or before + call.amount <= call.limit
        if fits:
            kept = _Reservation(tenant, call.window, call.amount, now)
            mine.on_commit(lambda: self._keep(call.operation_key, kept))
        return WindowTotal(before, calls, fits)

    def release(self, tenant: str, operation_keys: Sequence[str], now: datetime,
                unit: Unit) -> int:
        """Stop counting these operations' reservations when ``unit`` commits; how many
        are counted now."""
        mine = unit_of(MemoryUnit, unit)
        keys = set(operation_keys)
        with self._changed:
            counted = [k for k in keys if (r := self._kept.get(k)) is not None
                       and r.tenant == tenant and not r.released]
        mine.on_commit(lambda: self._release(tenant, keys))
        return len(counted)

    def total(self, tenant: str, window: str, period: timedelta, now: datetime) -> WindowTotal:
        """The window's committed total in ``(now - period, now]``."""
        with self._changed:
            before, calls = self._sum(tenant, window, period, now, None)
        return WindowTotal(before, calls, reserved=False)

    def _sum(self, tenant: str, window: str, period: timedelta, now: datetime,
             without: str | None) -> tuple[Decimal, int]:
        since = now - period
        amounts = [r.amount for key, r in self._kept.items()
                   if r.tenant == tenant and r.window == window and not r.released
                   and r.reserved_at > since and key != without]
        return sum(amounts, Decimal(0)), len(amounts)

    def _keep(self, operation_key: str, reservation: _Reservation) -> None:
        with self._changed:
            self._kept[operation_key] = reservation
            # What no window can reach any more is forgotten, as PostgreSQL deletes it.
            stale = reservation.reserved_at - MAX_WINDOW
            for key in [k for k, r in self._kept.items() if r.reserved_at < stale]:
                del self._kept[key]

    def _release(self, tenant: str, keys: set[str]) -> None:
        with self._changed:
            for key in keys:
                reservation = self._kept.get(key)
                if reservation is not None and reservation.tenant == tenant:
                    reservation.released = True

    def _let_go(self, window: tuple[str, str]) -> None:
        with self._changed:
            self._held.pop(window, None)
            self._changed.notify_all()


if TYPE_CHECKING:  # mypy checks that the class keeps its port's signatures
    from application.gate_windows.port import GateWindows

    def _conforms(windows: MemoryGateWindows) -> GateWindows:
        return windows
