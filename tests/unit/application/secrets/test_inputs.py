"""Error text that reaches the log never carries a revealed secret argument."""

from __future__ import annotations

from application.secrets.inputs import scrub, split_secrets
from application.secrets.placeholders import placeholder
from sagafleet.example_sagas import trip_definition


def test_secret_fields_become_placeholders_and_values_stay_aside() -> None:
    public, secrets = split_secrets(trip_definition(), {"card_token": "tok_live_9", "nights": 2})
    assert public == {"card_token": placeholder("card_token"), "nights": 2}
    assert secrets == {"card_token": "tok_live_9"}


def test_scrub_masks_every_revealed_string_in_error_text() -> None:
    args = {"card_token": "tok_live_SECRET", "nested": {"pin": "98765"}, "amount": 100}
    text = "declined: card tok_live_SECRET with pin 98765 for 100"
    scrubbed = scrub(text, args)
    assert "tok_live_SECRET" not in scrubbed and "98765" not in scrubbed
    assert scrubbed == "declined: card [secret] with pin [secret] for 100"


def test_scrub_leaves_text_alone_when_nothing_secret_appears() -> None:
    assert scrub("provider timed out", {"card_token": "tok_live_SECRET"}) == "provider timed out"
