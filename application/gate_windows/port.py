"""The gate windows port: a tenant window's ledger of reservations (``saga_core.approval.totals``).

Reserve what claiming an operation adds, inside the claim's unit, only if the window's total
in its period stays within the limit (or a person approved going over it), atomically against
every other saga of the tenant; release reservations of operations that turned out to have
had no effect; read a window's total. Adapters beside it:
:mod:`application.gate_windows.postgres` and :mod:`application.gate_windows.memory`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Protocol

from events.saga_log.port import Unit
from saga_core.approval.totals import WindowCall, WindowTotal

if TYPE_CHECKING:
    pass


class GateWindows(Protocol):
    """Tenant windows of gated amounts, shared by every saga of a tenant (sliding periods)."""

    def reserve(self, tenant: str, call: WindowCall, now: datetime, unit: Unit) -> WindowTotal:
        """Inside ``unit``: the window's total in ``(now - call.period, now]`` without this
        operation, and whether the call was reserved: only if that total plus its amount
        stays within ``call.limit``, or ``call.approved_over``. Another unit reserving in
        the same window waits for this one to end, so two sagas never both slip under."""
        ...

    def release(self, tenant: str, operation_keys: Sequence[str], now: datetime,
                unit: Unit) -> int:
        """Inside ``unit``: stop counting these operations' reservations; how many were."""
        ...

    def total(self, tenant: str, window: str, period: timedelta, now: datetime) -> WindowTotal:
        """The window's total in ``(now - period, now]`` as committed (``reserved`` False)."""
        ...
