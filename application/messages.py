"""The only thing a broker message carries: which step of which saga to look at.

Payloads are read from the log, so a message is ``(saga_id, step_id, kind, attempt)``
and nothing else. Anything that does not parse is a :class:`MalformedMessage` and is
dead-lettered, never retried.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from saga_core.contracts import StepKind
from saga_core.errors import ErrorKind, SagaError
from saga_core.field_errors import field_errors
from saga_core.limits import STEP_MESSAGE_BYTES, LimitExceeded, measure_json

MAX_MESSAGE_BYTES = STEP_MESSAGE_BYTES.value


class MalformedMessage(SagaError):
    """A broker message that is not a valid step command; the message says what is wrong."""
    kind = ErrorKind.INVALID_INPUT


class StepCommand(BaseModel):
    """Wake-up call for one step of one saga; the log decides whether there is work."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    saga_id: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")
    step_id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")
    kind: StepKind
    attempt: int = Field(ge=1, le=10_000)

    def as_args(self) -> list[Any]:
        """Positional task arguments, JSON-serialisable."""
        return [self.saga_id, self.step_id, self.kind.value, self.attempt]

    @classmethod
    def parse(cls, args: Any, kwargs: Any = None) -> StepCommand:
        """Validate raw task arguments from the broker into a command, or raise MalformedMessage."""
        try:  # bounded: a hostile message is refused after STEP_MESSAGE_BYTES of walking
            measure_json("step message", [args, kwargs], STEP_MESSAGE_BYTES)
        except LimitExceeded as exc:
            raise MalformedMessage(str(exc)) from None
        if kwargs:
            raise MalformedMessage(f"unexpected keyword arguments: {sorted(kwargs)}")
        if not isinstance(args, list | tuple) or len(args) != 4:
            raise MalformedMessage("expected [saga_id, step_id, kind, attempt]")
        saga_id, step_id, kind, attempt = args
        if isinstance(attempt, bool) or not isinstance(attempt, int):
            raise MalformedMessage(f"attempt must be an integer, got {type(attempt).__name__}")
        try:
            return cls(saga_id=saga_id, step_id=step_id, kind=kind, attempt=attempt)
        except ValidationError as exc:
            first = field_errors(exc)[0]  # never the value: a broker message is anyone's
            raise MalformedMessage(f"{first.path}: {first.message}") from None
