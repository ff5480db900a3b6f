"""A definition registered before ``secret_literal`` was refused may hold a secret literal in
a secret argument: its needles are found, and kept by the definition's content hash."""

from __future__ import annotations

from application.secrets.guard import literal_needles
from saga_core.definitions.definition import SagaDefinition
from sagafleet.example_sagas import trip_definition

LITERAL = "tok_visa_4242_literal"


def _with_literal_card(value: str) -> SagaDefinition:
    """The trip as an older registry stored it: the card token written into the definition."""
    trip = trip_definition()
    steps = [step.model_copy(update={"args": {**step.args, "card_token": value}})
             if step.id == "capture_payment" else step for step in trip.steps]
    return trip.model_copy(update={"steps": steps})


def test_a_literal_in_a_secret_argument_is_a_needle_and_a_template_is_not() -> None:
    assert LITERAL in literal_needles(_with_literal_card(LITERAL)).forms
    assert not literal_needles(trip_definition())  # "${input.card_token}": the vault's


def test_each_definition_has_its_own_needles_asked_again_from_the_cache() -> None:
    first, other = _with_literal_card(LITERAL), _with_literal_card(LITERAL + "_2")
    assert first.content_hash() != other.content_hash()
    needles = literal_needles(first)
    assert literal_needles(first) is needles  # kept by content hash, not built again
    assert literal_needles(_with_literal_card(LITERAL)) is needles  # an equal definition
    assert LITERAL + "_2" in literal_needles(other).forms
    assert LITERAL + "_2" not in needles.forms
