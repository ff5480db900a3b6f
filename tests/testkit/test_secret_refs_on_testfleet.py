"""Secret inputs by ref, through the real SagaClient on the in-memory kit: deposit, start,
repeat, refuse; the same code the fleet runs on PostgreSQL (tests/contract holds the
stores to the same promises)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from trip_inputs import TRIP_INPUT

from application.client import IdempotencyConflict, InvalidRequest
from application.secrets.inputs import RawSecretRefused
from application.secrets.placeholders import SecretRefRejected
from saga_core.contracts import SagaStatus
from saga_core.engine.events import SagaStarted
from saga_core.errors import ErrorKind, InputValidationError
from sagafleet.testing import TestFleet

TOKEN = "tok_visa_by_ref_7731"


def _rules(error: SecretRefRejected | RawSecretRefused) -> dict[str, str]:
    return {p.where: p.rule for p in error.problems}


def test_a_start_by_ref_runs_with_the_value_and_logs_only_a_placeholder() -> None:
    fleet = TestFleet()
    client = fleet.client(tenant="t")
    # given a token deposited ahead of the start, and one the provider declines
    ref = client.put_secret(TOKEN)
    declined = client.put_secret("tok_declined_by_ref")
    # when trips start with the refs in the secret field
    saga = client.start("trip", {**TRIP_INPUT, "card_token": ref.as_input()}, key="k1")
    other = client.start("trip", {**TRIP_INPUT, "card_token": declined.as_input()}, key="k2")
    fleet.run_until_idle()
    # then the tools received the values (one charged, one declined and compensated)
    assert fleet.state(saga.saga_id).status is SagaStatus.COMPLETED
    assert fleet.state(other.saga_id).status is SagaStatus.COMPENSATED
    # and the log holds a placeholder: neither the value nor the ref
    started = fleet.events(saga.saga_id)[0]
    assert isinstance(started, SagaStarted)
    assert started.input["card_token"] == {"$secret": "card_token"}
    logged = repr(fleet.events(saga.saga_id))
    assert TOKEN not in logged and ref.ref not in logged


def test_a_repeated_start_with_its_spent_ref_lands_on_the_same_saga() -> None:
    fleet = TestFleet()
    client = fleet.client(tenant="t").via_broker()
    ref = client.put_secret(TOKEN)
    data = {**TRIP_INPUT, "card_token": ref.as_input()}
    first = client.start("trip", data, key="k1")
    # when the same command arrives again (a redelivery): the ref is spent by then
    again = client.start("trip", data, key="k1")
    # then it answers with the saga the first one started
    assert (again.saga_id, again.created) == (first.saga_id, False)
    # and a retry with a fresh ref, or with the value, is the same request too
    fresh = client.put_secret(TOKEN)
    assert client.start("trip", {**data, "card_token": fresh.as_input()}, key="k1").saga_id \
        == first.saga_id
    direct = fleet.client(tenant="t")
    assert direct.start("trip", {**TRIP_INPUT, "card_token": "other"}, key="k1").saga_id \
        == first.saga_id
    # but other public input under the same key is a conflict, ref or not
    with pytest.raises(IdempotencyConflict):
        client.start("trip", {**data, "nights": 3}, key="k1")
    # and the spent ref cannot start another saga
    with pytest.raises(SecretRefRejected) as spent:
        client.start("trip", data, key="k2")
    assert _rules(spent.value) == {"input.card_token": "secret_ref_used"}
    fleet.run_until_idle()
    assert fleet.state(first.saga_id).status is SagaStatus.COMPLETED


def test_unknown_other_tenants_expired_and_misplaced_refs_are_refused_naming_the_field() -> None:
    fleet = TestFleet()
    client = fleet.client(tenant="t")
    theirs = fleet.client(tenant="other").put_secret(TOKEN)
    with pytest.raises(SecretRefRejected) as refused:
        client.start("trip", {**TRIP_INPUT, "card_token": theirs.as_input()}, key="k1")
    assert _rules(refused.value) == {"input.card_token": "secret_ref_unknown"}
    assert refused.value.kind is ErrorKind.INVALID_INPUT
    with pytest.raises(SecretRefRejected) as malformed:
        client.start("trip", {**TRIP_INPUT, "card_token": {"$secret_ref": "guess"}})
    assert _rules(malformed.value) == {"input.card_token": "secret_ref_malformed"}
    ref = client.put_secret(TOKEN, ttl=timedelta(seconds=30))
    with pytest.raises(SecretRefRejected) as misplaced:
        client.start("trip", {**TRIP_INPUT, "customer_email": ref.as_input()})
    assert _rules(misplaced.value) == {"input.customer_email": "secret_ref_not_secret"}
    # when the ref waits past its expiry
    fleet.advance(31)
    with pytest.raises(SecretRefRejected) as late:
        client.start("trip", {**TRIP_INPUT, "card_token": ref.as_input()}, key="k1")
    # then it is gone: the sweep forgot it
    assert _rules(late.value) == {"input.card_token": "secret_ref_unknown"}
    assert fleet.client(tenant="other").find("k1") is None and client.find("k1") is None


def test_a_deposited_value_is_checked_against_its_field_when_redeemed() -> None:
    fleet = TestFleet()
    client = fleet.client(tenant="t")
    ref = client.put_secret(4242)  # the trip's card token is a string
    data = {**TRIP_INPUT, "card_token": ref.as_input()}
    for _ in range(2):  # the refused start spent nothing: the second meets the same check
        with pytest.raises(InputValidationError) as wrong:
            client.start("trip", data, key="k1")
        assert {p.where: p.rule for p in wrong.value.problems} == {
            "input.card_token": "wrong_type"}
        assert "4242" not in str(wrong.value)
    assert client.find("k1") is None


def test_a_broker_client_refuses_a_raw_secret_naming_the_field_and_the_way_out() -> None:
    fleet = TestFleet()
    with pytest.raises(RawSecretRefused) as refused:
        fleet.client(tenant="t").via_broker().start("trip", TRIP_INPUT, key="k1")
    assert _rules(refused.value) == {"input.card_token": "secret_over_broker"}
    assert "$secret_ref" in str(refused.value) and "put_secret" in str(refused.value)
    assert TRIP_INPUT["card_token"] not in str(refused.value)
    assert fleet.client(tenant="t").find("k1") is None


@pytest.mark.parametrize("value", [float("nan"), "a\x00b", "x" * 70_000])
def test_put_secret_refuses_values_it_cannot_keep_without_showing_them(value: object) -> None:
    client = TestFleet().client(tenant="t")
    with pytest.raises(InvalidRequest) as refused:
        client.put_secret(value)
    assert "x" * 100 not in str(refused.value)


def test_put_secret_refuses_a_ttl_out_of_range() -> None:
    client = TestFleet().client(tenant="t")
    for ttl in (timedelta(0), timedelta(days=2)):
        with pytest.raises(InvalidRequest, match="ttl"):
            client.put_secret(TOKEN, ttl=ttl)
