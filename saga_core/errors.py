"""The one error root of sagafleet and the domain's typed errors.

Every room raises subclasses of :class:`SagaError`; driver errors (psycopg, redis,
celery) are translated into these at each room's boundary, exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass


class SagaError(Exception):
    """Root of every error sagafleet raises on purpose."""


@dataclass(frozen=True)
class Problem:
    """One reason a definition, plan or input was rejected: where, which rule, why."""

    where: str
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: [{self.rule}] {self.message}"


class ProblemsError(SagaError):
    """An error that carries every problem found at once, not just the first."""

    def __init__(self, summary: str, problems: list[Problem]) -> None:
        self.problems = list(problems)
        detail = "; ".join(str(p) for p in self.problems)
        super().__init__(f"{summary}: {detail}" if detail else summary)
