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


class DefinitionError(ProblemsError):
    """A saga definition was rejected at registration; ``problems`` names every step and rule."""

    def __init__(self, definition: str, problems: list[Problem]) -> None:
        self.definition = definition
        super().__init__(f"saga definition {definition!r} is invalid", problems)


class PlanRejected(ProblemsError):
    """An agent's proposed plan was rejected; ``problems`` lists every reason at once."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("agent plan rejected", problems)


class InputValidationError(ProblemsError):
    """A saga input does not match its definition; ``problems`` names every bad field."""

    def __init__(self, definition: str, problems: list[Problem]) -> None:
        self.definition = definition
        super().__init__(f"input for saga {definition!r} is invalid", problems)


class TemplateError(SagaError):
    """An argument template is malformed or references something that does not exist."""

    def __init__(self, template: str, message: str) -> None:
        self.template = template
        super().__init__(f"template {template!r}: {message}")


class KeyReuseError(SagaError):
    """An operation key was reused with a different payload: one key must mean one call."""

    def __init__(self, key: str, recorded_hash: str, new_hash: str) -> None:
        self.key = key
        self.recorded_hash = recorded_hash
        self.new_hash = new_hash
        super().__init__(
            f"operation key {key} was recorded with payload {recorded_hash} "
            f"and is now reused with payload {new_hash}"
        )


class UnknownToolError(SagaError):
    """A tool name and version is not in the allowlisted catalogue."""

    def __init__(self, name: str, version: int) -> None:
        self.name = name
        self.version = version
        super().__init__(f"tool {name}@{version} is not in the catalogue")


class DefinitionMismatchError(SagaError):
    """A saga's log names a different definition (hash) than the one it is being folded with."""


class EventRejected(SagaError):
    """An event cannot apply to the saga state it is folded into (unknown step, after finish)."""


class ApprovalError(SagaError):
    """An approval cannot be accepted for the pending request; subclasses say why."""

    def __init__(self, step_id: str, kind: str, message: str) -> None:
        self.step_id = step_id
        self.kind = kind
        super().__init__(f"approval for {step_id} ({kind}): {message}")


class ApprovalNotPending(ApprovalError):
    """No approval was ever requested for this step and kind."""


class ApprovalAltered(ApprovalError):
    """The approval's action hash differs from the requested action: the payload changed."""


class ApprovalExpired(ApprovalError):
    """The approval request expired before the grant arrived; a new request is needed."""


class ApprovalReplayed(ApprovalError):
    """The grant answers a request that is no longer open (denied or superseded)."""
