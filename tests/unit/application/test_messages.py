"""A broker message is only (saga_id, step_id, kind, attempt); anything else is rejected."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from application.messages import MalformedMessage, StepCommand
from saga_core.contracts import StepKind


def test_valid_message_round_trips() -> None:
    # given a command, when it is turned into task args and parsed back
    command = StepCommand(saga_id="s-1", step_id="hold_flight", kind=StepKind.FORWARD, attempt=2)
    parsed = StepCommand.parse(command.as_args())
    # then nothing was lost
    assert parsed == command


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ("not a list", r"expected \[saga_id"),
        (["s", "step", "forward"], r"expected \[saga_id"),
        (["s", "step", "sideways", 1], "kind"),
        (["s", "step", "forward", "1"], "attempt must be an integer"),
        (["s", "step", "forward", True], "attempt must be an integer"),
        (["s", "step", "forward", 0], "attempt"),
        (["", "step", "forward", 1], "saga_id"),
        (["s; DROP TABLE", "step", "forward", 1], "saga_id"),
        (["s", "x" * 5000, "forward", 1], "exceeds"),
    ],
)
def test_malformed_messages_get_a_typed_error_naming_the_problem(
    args: object, fragment: str
) -> None:
    with pytest.raises(MalformedMessage, match=fragment):
        StepCommand.parse(args)


def test_keyword_arguments_are_refused() -> None:
    with pytest.raises(MalformedMessage, match="keyword"):
        StepCommand.parse(["s", "step", "forward", 1], {"payload": "x"})


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=5)
                    | st.dictionaries(st.text(max_size=5), inner, max_size=5), max_leaves=20))
def test_arbitrary_json_never_crashes_the_parser(args: object) -> None:
    # whatever arrives, the parser answers with a command or a MalformedMessage
    try:
        command = StepCommand.parse(args)
    except MalformedMessage:
        return
    assert isinstance(command, StepCommand)
