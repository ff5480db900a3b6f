"""A dead letter keeps what an operator needs and withholds every secret input."""

from __future__ import annotations

from trip_inputs import TRIP_INPUT

from events.memory import MemoryDefinitions
from saga_core.examples import trip_definition
from workers.celery_app import STEP_TASK
from workers.secrets import WITHHELD, withhold_secrets

START = "sagafleet.commands.start_saga"
TOKEN = TRIP_INPUT["card_token"]


def _definitions() -> MemoryDefinitions:
    definitions = MemoryDefinitions()
    definitions.register_shared(trip_definition())
    return definitions


def test_a_start_command_keeps_its_public_input_and_withholds_the_secret_field() -> None:
    body = {"args": [], "kwargs": {"definition": "trip", "input": TRIP_INPUT, "key": "k"}}
    kept, reason = withhold_secrets(_definitions(), START, body, f"refused {TOKEN}")
    assert kept["kwargs"]["input"] == {**TRIP_INPUT, "card_token": WITHHELD}
    assert kept["kwargs"]["key"] == "k"
    assert TOKEN not in repr(kept) and TOKEN not in reason
    assert body["kwargs"]["input"]["card_token"] == TOKEN  # the caller's copy is untouched


def test_a_ref_in_a_secret_field_is_withheld_too() -> None:
    data = {**TRIP_INPUT, "card_token": {"$secret_ref": "sr_" + "a" * 43}}
    kept, _ = withhold_secrets(_definitions(), START, {"kwargs": {"definition": "trip",
                                                                  "input": data}}, "")
    assert kept["kwargs"]["input"]["card_token"] == WITHHELD


def test_an_unknown_definition_keeps_its_input_for_a_requeue() -> None:
    # a definition nobody registered declares no secret field: the letter keeps the input,
    # so registering the definition and requeueing the letter starts the saga
    body = {"args": [], "kwargs": {"definition": "nope", "input": TRIP_INPUT}}
    kept, _ = withhold_secrets(_definitions(), START, body, "no such definition")
    assert kept["kwargs"]["input"] == TRIP_INPUT
    kept, _ = withhold_secrets(_definitions(), START,
                               {"kwargs": {"definition": 7, "input": [TOKEN]}}, "")
    assert kept["kwargs"]["input"] == WITHHELD


def test_positional_arguments_of_a_command_are_withheld_whole() -> None:
    body = {"args": ["trip", TRIP_INPUT], "kwargs": {}}
    kept, reason = withhold_secrets(_definitions(), START, body,
                                    "saga commands take keyword arguments only")
    assert kept["args"] == "[2 positional arguments withheld]" and TOKEN not in repr(kept)
    assert reason == "saga commands take keyword arguments only"


def test_a_step_command_is_kept_as_it_is() -> None:
    body = {"args": ["saga", "step", "forward", "x"], "kwargs": {}}
    assert withhold_secrets(_definitions(), STEP_TASK, body, "bad attempt") == (body,
                                                                                 "bad attempt")
