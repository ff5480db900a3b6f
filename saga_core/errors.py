"""The one error root of sagafleet and the domain's typed errors.

Every room raises subclasses of :class:`SagaError`; driver errors (psycopg, redis,
celery) are translated into these at each room's boundary, exactly once. Each class
carries its :class:`ErrorKind` as data, so the command line (exit codes) and the agent
gateway (hints) decide by kind, never by a class's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar


class ErrorKind(StrEnum):
    """What kind of failure an error is: what the caller can do about it."""

    INVALID_INPUT = "invalid_input"  # the request is malformed or rejected: fix it, ask again
    NOT_FOUND = "not_found"  # the saga, definition, tool or secret does not exist (here)
    CONFLICT = "conflict"  # it contradicts what is recorded (key reused, stale approval, race)
    UNAVAILABLE = "unavailable"  # a server cannot be reached: the same request may work later
    MISCONFIGURED = "misconfigured"  # the deployment is wrong (settings, tool set, schema)
    INTEGRITY = "integrity"  # the stored history cannot be read or does not check out
    UNAUTHENTICATED = "unauthenticated"  # no valid credential (token, signing key)
    FORBIDDEN = "forbidden"  # the principal is proven but its roles do not allow this
    FAILURE = "failure"  # anything else; the message says what


class SagaError(Exception):
    """Root of every error sagafleet raises on purpose."""

    kind: ClassVar[ErrorKind] = ErrorKind.FAILURE
    """What kind of failure this is; every subclass names its own or inherits one."""

    hint: ClassVar[str | None] = None
    """What a caller can do about it, when that is more specific than its kind says."""


class MissingExtra(SagaError):
    """A feature needs an optional part of the distribution that is not installed; the
    message names the extra (``pip install 'sagafleet[mcp]'``)."""

    kind = ErrorKind.MISCONFIGURED

    def __init__(self, feature: str, extra: str) -> None:
        self.feature = feature
        self.extra = extra
        super().__init__(
            f"{feature} needs the '{extra}' extra, which is not installed: "
            f"pip install 'sagafleet[{extra}]'"
        )


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

    kind = ErrorKind.INVALID_INPUT

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

    hint = "fix every listed problem and propose the plan again"

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("agent plan rejected", problems)


class RevisionRefused(ProblemsError):
    """A plan revision cannot apply to the saga it names: the saga is terminal or paused, or
    the revision would drop an action that cannot be compensated (past the pivot, no
    compensation, in flight) or change one already run; ``problems`` names every reason."""

    kind = ErrorKind.CONFLICT
    hint = "submit the revision while the saga runs forward, keeping every action that ran"

    def __init__(self, saga_id: str, problems: list[Problem]) -> None:
        self.saga_id = saga_id
        super().__init__(f"plan revision of saga {saga_id} refused", problems)


class InputValidationError(ProblemsError):
    """A saga input does not match its definition; ``problems`` names every bad field."""

    hint = "fix the named input fields and call again with the same key"

    def __init__(self, definition: str, problems: list[Problem]) -> None:
        self.definition = definition
        super().__init__(f"input for saga {definition!r} is invalid", problems)


class TemplateError(SagaError):
    """An argument template is malformed or references something that does not exist."""

    kind = ErrorKind.INVALID_INPUT

    def __init__(self, template: str, message: str) -> None:
        self.template = template
        super().__init__(f"template {template!r}: {message}")


class KeyReuseError(SagaError):
    """An operation key was reused with a different payload: one key must mean one call."""

    kind = ErrorKind.CONFLICT

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

    kind = ErrorKind.NOT_FOUND

    def __init__(self, name: str, version: int) -> None:
        self.name = name
        self.version = version
        super().__init__(f"tool {name}@{version} is not in the catalogue")


class DefinitionMismatchError(SagaError):
    """A saga's log names a different definition (hash) than the one it is being folded with."""

    kind = ErrorKind.INTEGRITY


class EventRejected(SagaError):
    """An event cannot apply to the saga state it is folded into (unknown step, after finish)."""

    kind = ErrorKind.INTEGRITY


class ApprovalError(SagaError):
    """An approval cannot be accepted for the pending request; subclasses say why."""

    kind = ErrorKind.CONFLICT

    def __init__(self, step_id: str, step_kind: str, message: str) -> None:
        self.step_id = step_id
        self.step_kind = step_kind  # forward or compensation (``kind`` is the error's kind)
        super().__init__(f"approval for {step_id} ({step_kind}): {message}")


class ApprovalNotPending(ApprovalError):
    """No approval was ever requested for this step and kind."""


class ApprovalAltered(ApprovalError):
    """The approval's action hash differs from the requested action: the payload changed."""


class ApprovalExpired(ApprovalError):
    """The approval request expired before the grant arrived; a new request is needed."""


class ApprovalReplayed(ApprovalError):
    """The grant answers a request that is no longer open (denied or superseded)."""


class ApprovalOutOfScope(ApprovalError):
    """The grant's scope does not cover the requested action (approving up to 500 does not
    cover 600)."""


class NothingToResolve(SagaError):
    """An operator action was asked for a saga that is not waiting for an operator."""

    kind = ErrorKind.CONFLICT

    def __init__(self, saga_id: str, status: str) -> None:
        self.saga_id = saga_id
        self.status = status
        super().__init__(f"saga {saga_id} is {status}, not waiting for an operator")


class SagaMoved(SagaError):
    """An action bound to the saga version its operator saw found the saga moved on since:
    nothing was recorded; the operator looks at the new state and decides again."""

    kind = ErrorKind.CONFLICT
    hint = "look at the saga as it is now, then act again if it still needs it"

    def __init__(self, saga_id: str, seen: int, current: int, meanwhile: str = "") -> None:
        self.saga_id = saga_id
        self.seen = seen
        self.current = current
        # What happened meanwhile that refused the action ("approval for capture_payment
        # (forward): already approved by carol at version 9"), when the refusal says it.
        self.meanwhile = meanwhile
        since = f": {meanwhile}" if meanwhile else ""
        super().__init__(f"saga {saga_id} changed since it was shown (version {seen}, now "
                         f"{current}){since}; nothing was recorded")


class OperatorActionRejected(SagaError):
    """An operator action does not fit the saga (no step named, no such operation)."""

    kind = ErrorKind.INVALID_INPUT
