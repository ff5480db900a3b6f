"""The last line of defence by value (saga_core.secret_scrub): a known secret is found in
every form it takes and replaced, counted, and nothing that merely looks alike is touched."""

from __future__ import annotations

from datetime import UTC, datetime

from saga_core.contracts import Receipt, StepKind
from saga_core.engine.events import StepSucceeded
from saga_core.secret_scrub import (
    SCRUBBED,
    Scrubbed,
    SecretNeedles,
    scrub_document,
    scrub_event,
    scrub_text,
)

TOKEN = 'tok_live_"9f3b"_é'  # a quote and an accent: it has JSON, HTML and URL forms
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_secret_is_found_as_it_is_and_as_json_html_and_a_url_carry_it() -> None:
    needles = SecretNeedles.of([TOKEN])
    for carried in (TOKEN, 'tok_live_\\"9f3b\\"_\\u00e9', "tok_live_&quot;9f3b&quot;_é",
                    "tok_live_%229f3b%22_%C3%A9"):
        found = scrub_text(f"card {carried} declined", needles)
        assert found == Scrubbed(f"card {SCRUBBED} declined", 1)


def test_an_object_secret_is_found_by_each_of_its_strings_and_numbers() -> None:
    needles = SecretNeedles.of([{"number": "4111111111111111", "cvc": "987", "pin": 12345678}])
    text = "pan 4111111111111111 cvc 987 pin 12345678"
    # the three-character cvc is too short to look for; the rest is found
    assert scrub_text(text, needles).value == f"pan {SCRUBBED} cvc 987 pin {SCRUBBED}"


def test_a_document_replaces_whole_values_and_long_secrets_inside_strings_only() -> None:
    # given a short secret (a PIN) and a long one (a token)
    needles = SecretNeedles.of(["98765", "tok_canary_long"])
    document = {
        "pin": "98765",  # a whole value: replaced at any length from 4
        "note": "pin 98765 given",  # inside a recorded string: too short to look for
        "key": "ab98765cd",  # so an id or a hash holding the digits is left alone
        "echo": ["paid with tok_canary_long", {"deep": "tok_canary_long"}],
        "amount": 98765,  # numbers stay numbers
    }
    found = scrub_document(document, needles)
    assert found.value == {"pin": SCRUBBED, "note": "pin 98765 given", "key": "ab98765cd",
                           "echo": [f"paid with {SCRUBBED}", {"deep": SCRUBBED}],
                           "amount": 98765}
    assert found.count == 3
    # and a text meant for people hides even the short one
    assert scrub_text("pin 98765 given", needles).value == f"pin {SCRUBBED} given"


def test_nothing_found_returns_the_same_object_and_counts_nothing() -> None:
    document = {"a": ["b"]}
    found = scrub_document(document, SecretNeedles.of(["tok_canary_long"]))
    assert found.value is document and found.count == 0
    assert scrub_document(document, SecretNeedles()).value is document


def test_an_event_keeps_its_types_and_loses_only_the_echoed_secret() -> None:
    # given a receipt that echoes the card token a tool was called with
    event = StepSucceeded(at=T0, step_id="pay", kind=StepKind.FORWARD, attempt=1,
                          operation_key="k" * 64, via="execute",
                          receipt=Receipt(resource_id="cap-1", version=2,
                                          fields={"card": TOKEN, "amount": 100}))
    # when it is scrubbed
    found = scrub_event(event, SecretNeedles.of([TOKEN]))
    # then only the token is replaced; times, enums and numbers are as they were
    assert found.count == 1
    assert found.value.receipt.fields == {"card": SCRUBBED, "amount": 100}
    assert found.value.at == T0 and found.value.kind is StepKind.FORWARD
    assert found.value.operation_key == "k" * 64
    # and an event without it is returned as it is
    assert scrub_event(found.value, SecretNeedles.of([TOKEN])).value is found.value
