"""A dead letter keeps what an operator needs and withholds every secret input."""

from __future__ import annotations

import json

from trip_inputs import TRIP_INPUT

from events.definition_store.memory import MemoryDefinitions
from sagafleet.example_sagas import trip_definition, trip_tool_catalogue
from workers.celery_app import STEP_TASK
from workers.dead_letters.withholding import SIGNATURE_WITHHELD, WITHHELD, withhold_secrets

START = "sagafleet.commands.start_saga"
TOKEN = TRIP_INPUT["card_token"]


def _definitions() -> MemoryDefinitions:
    definitions = MemoryDefinitions()
    definitions.register_shared(trip_definition())
    return definitions


def withhold(task: str, body: object, reason: str, tenant: str | None = None):  # type: ignore[no-untyped-def]
    """The letter withhold_secrets keeps, as (body, reason) (the count is checked apart)."""
    kept = withhold_secrets(_definitions(), trip_tool_catalogue(), task, body, reason,
                            signer_tenant=tenant)
    return kept.body, kept.reason


def test_a_start_command_keeps_its_public_input_and_withholds_the_secret_field() -> None:
    body = {"args": [], "kwargs": {"definition": "trip", "input": TRIP_INPUT, "key": "k"}}
    kept, reason = withhold(START, body, f"refused {TOKEN}")
    assert kept["kwargs"]["input"] == {**TRIP_INPUT, "card_token": WITHHELD}
    assert kept["kwargs"]["key"] == "k"
    assert TOKEN not in repr(kept) and TOKEN not in reason
    assert body["kwargs"]["input"]["card_token"] == TOKEN  # the caller's copy is untouched


def test_a_ref_in_a_secret_field_is_withheld_too() -> None:
    data = {**TRIP_INPUT, "card_token": {"$secret_ref": "sr_" + "a" * 43}}
    kept, _ = withhold(START, {"kwargs": {"definition": "trip",
                                                                  "input": data}}, "")
    assert kept["kwargs"]["input"]["card_token"] == WITHHELD


def test_an_unknown_definition_withholds_what_the_catalogue_calls_secret_and_keeps_refs() -> None:
    # given a start of a definition nobody registered yet, its card token given as a value
    body = {"args": [], "kwargs": {"definition": "nope", "input": TRIP_INPUT}}
    # then the field the catalogue calls secret is withheld (a raw secret must not stay in a
    # dead letter because its definition came late), the public input is kept
    kept, reason = withhold(START, body, f"no such definition {TOKEN}")
    assert kept["kwargs"]["input"] == {**TRIP_INPUT, "card_token": WITHHELD}
    assert TOKEN not in repr(kept) and TOKEN not in reason
    # and given by ref, the field is kept: registering the definition and requeueing the
    # letter starts the saga (the ref is not the secret; the requeued start redeems it)
    ref = {"$secret_ref": "sr_" + "b" * 43}
    body = {"args": [], "kwargs": {"definition": "nope", "input": {**TRIP_INPUT,
                                                                   "card_token": ref}}}
    kept, _ = withhold(START, body, "no such definition")
    assert kept["kwargs"]["input"]["card_token"] == ref
    kept, _ = withhold(START, {"kwargs": {"definition": 7, "input": [TOKEN]}}, "")
    assert kept["kwargs"]["input"] == WITHHELD


def test_positional_arguments_of_a_command_are_withheld_whole() -> None:
    body = {"args": ["trip", TRIP_INPUT], "kwargs": {}}
    kept, reason = withhold(START, body,
                                    "saga commands take keyword arguments only")
    assert kept["args"] == "[2 positional arguments withheld]" and TOKEN not in repr(kept)
    assert reason == "saga commands take keyword arguments only"


def test_an_oversized_command_keeps_only_what_the_limit_said() -> None:
    body = {"$oversized": "command_message_bytes exceeded"}
    assert withhold(START, body, "too big") == (body, "too big")


def test_a_step_command_is_kept_as_it_is() -> None:
    body = {"args": ["saga", "step", "forward", "x"], "kwargs": {}}
    assert withhold(STEP_TASK, body, "bad attempt") == (body,
                                                                                 "bad attempt")


def _signed_start(definition: str, data: dict) -> dict:  # type: ignore[type-arg]
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from sagafleet.agent import CommandSigner

    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption())
    return CommandSigner("sk_" + "A" * 22, pem).start_saga(definition, data, key="k")[1]


def test_a_signed_start_keeps_its_envelope_with_the_secret_field_withheld() -> None:
    # given a signed start carrying the raw card token inside its envelope
    kwargs = _signed_start("trip", TRIP_INPUT)
    # when it is dead-lettered
    kept, reason = withhold(START, {"args": [], "kwargs": kwargs},
                                    f"refused {TOKEN}", "default")
    # then the envelope is kept, its secret field withheld and its public input whole
    assert TOKEN not in repr(kept) and TOKEN not in reason
    envelope = json.loads(kept["kwargs"]["envelope"])
    assert envelope["args"]["input"] == {**TRIP_INPUT, "card_token": WITHHELD}
    assert envelope["command_id"] == json.loads(kwargs["envelope"])["command_id"]
    # and the signature, which could never verify the altered envelope, says so
    assert kept["kwargs"]["signature"] == SIGNATURE_WITHHELD
    assert kept["kwargs"]["kid"] == kwargs["kid"]


def test_a_signed_start_with_nothing_secret_to_withhold_is_kept_as_signed() -> None:
    # a definition nobody registered, its secret given by ref: nothing to withhold, so the
    # letter is kept whole and verifiable, and a requeue after registering it is the same
    # signed message
    ref = {"$secret_ref": "sr_" + "c" * 43}
    kwargs = _signed_start("nope", {**TRIP_INPUT, "card_token": ref})
    kept, _ = withhold(START, {"args": [], "kwargs": kwargs}, "", "default")
    assert kept["kwargs"] == kwargs


def test_a_signed_start_whose_key_is_unknown_has_every_input_value_withheld() -> None:
    # given a signed start whose key names no live principal (so no tenant's definition
    # can say which fields are secret)
    kwargs = _signed_start("trip", TRIP_INPUT)
    # when it is dead-lettered without a signer's tenant
    kept, reason = withhold(START, {"args": [], "kwargs": kwargs},
                                    f"refused {TOKEN}")
    # then every input value is withheld, the secret one included
    envelope = json.loads(kept["kwargs"]["envelope"])
    assert set(envelope["args"]["input"].values()) == {WITHHELD}
    assert TOKEN not in repr(kept) and TOKEN not in reason


def test_an_envelope_that_is_not_json_is_withheld_whole() -> None:
    kwargs = {"envelope": '{"args": {"input": {"card_token": "' + TOKEN + '"', "kid": "k",
              "signature": "s"}
    kept, reason = withhold(START, {"kwargs": kwargs},
                                    f"bad envelope {kwargs['envelope']}")
    assert kept["kwargs"]["envelope"] == WITHHELD and TOKEN not in reason


def test_a_secret_value_given_again_elsewhere_in_the_command_is_replaced_and_counted() -> None:
    # given a raw token in its secret field, and again in the flight id and in the reason
    body = {"args": [], "kwargs": {"definition": "trip", "reason": f"pay with {TOKEN}",
                                   "input": {**TRIP_INPUT, "flight_id": TOKEN}}}
    # when it is dead-lettered with a refusal quoting it
    letter = withhold_secrets(_definitions(), trip_tool_catalogue(), START, body,
                              f"refused {TOKEN}")
    # then the field is withheld, every other occurrence replaced, and each one counted
    assert TOKEN not in repr(letter.body) and TOKEN not in letter.reason
    assert letter.body["kwargs"]["input"]["flight_id"] == "[secret]"
    assert letter.body["kwargs"]["reason"] == "pay with [secret]"
    assert letter.scrubbed == 3


def test_a_plans_secret_literal_and_its_secret_input_are_withheld() -> None:
    # given a plan refused for giving the card token as a literal, and one whose input
    # carries the token in the field the plan makes secret
    literal = {"actions": [{"tool": "payments.capture", "args": {
        "amount": 1, "currency": "EUR", "card_token": TOKEN}}]}
    by_input = {"actions": [{"tool": "payments.capture", "args": {
        "amount": 1, "currency": "EUR", "card_token": "${input.card_token}"}}]}
    plan_task = "sagafleet.commands.submit_plan"
    # when they are dead-lettered
    kept, _ = withhold(plan_task, {"kwargs": {"plan": literal}}, "secret_literal")
    assert kept["kwargs"]["plan"]["actions"][0]["args"]["card_token"] == WITHHELD
    kept, _ = withhold(plan_task, {"kwargs": {"plan": by_input, "input": {
        "card_token": TOKEN, "note": "kept"}}}, "refused")
    # then neither keeps the token; what is not secret stays
    assert kept["kwargs"]["input"] == {"card_token": WITHHELD, "note": "kept"}
    assert kept["kwargs"]["plan"] == by_input
    # and a plan that cannot be read has its whole input withheld
    kept, _ = withhold(plan_task, {"kwargs": {"plan": "junk", "input": {"a": TOKEN}}}, "")
    assert kept["kwargs"]["input"] == {"a": WITHHELD}
