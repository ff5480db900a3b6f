"""The secrets port: a saga's secret inputs, kept beside the log and never in it.

Keep a saga's secret inputs (in the unit that starts it), reveal them into a tool call's
arguments, purge them when the saga ends; hold a value deposited ahead of a start under a
single-use ref (:mod:`application.secrets.placeholders`), redeem it in the unit that starts
the saga, forget refs that expired. Adapters beside it: :mod:`application.secrets.postgres`
(``SecretVault``) and :mod:`application.secrets.memory` (``MemorySecrets``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from events.saga_log.port import Unit

if TYPE_CHECKING:
    pass


class Secrets(Protocol):
    """Secret saga inputs: kept outside the log, revealed only into tool arguments."""

    def keep(self, saga_id: str, secrets: Mapping[str, Any], unit: Unit) -> None:
        """Store values for a saga in the unit that starts it; the first write wins."""
        ...

    def reveal(self, saga_id: str, args: Any) -> tuple[Any, dict[str, Any]]:
        """``args`` with every placeholder replaced, and the revealed values by name."""
        ...

    def purge(self, saga_id: str) -> None:
        """Forget a finished saga's secrets."""
        ...

    def kept(self, saga_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The values kept for each of ``saga_ids``, by saga id and field (a saga with none,
        or purged, is absent): what the last line of defence looks for by value."""
        ...

    def deposit(self, tenant: str, value: Any, expires_at: datetime) -> str:
        """Hold ``value`` for ``tenant`` until ``expires_at``; return a new unguessable ref
        (``application.secrets.placeholders.new_ref``). Only the ref's digest is stored with it."""
        ...

    def redeem(
        self, tenant: str, refs: Mapping[str, str], saga_id: str, now: datetime, unit: Unit
    ) -> dict[str, Any]:
        """Inside the unit that starts ``saga_id``: the value behind each ref (field -> ref)
        by field, each ref spent when the unit commits (and not at all otherwise).
        ``SecretRefRejected`` names every field whose ref is unknown to ``tenant`` (or
        another tenant's), expired at ``now``, or spent by another unit."""
        ...

    def purge_expired(self, now: datetime) -> int:
        """Forget every ref that expired by ``now``, spent or not; return how many."""
        ...
