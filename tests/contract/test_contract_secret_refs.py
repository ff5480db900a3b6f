"""Deposited secrets (refs): the same promises on the in-memory and PostgreSQL stores."""

from __future__ import annotations

from datetime import timedelta

import pytest
from contract_support import T0, Ports, registered, started

from application.secrets.placeholders import SecretRefRejected
from events import NO_STREAM

CARD = {"number": "4111 1111 1111 1111", "cvc": "123"}
LATER = T0 + timedelta(minutes=15)


class Boom(Exception):
    """Raised inside a unit to abandon it."""


def _rules(error: SecretRefRejected) -> dict[str, str]:
    return {p.where: p.rule for p in error.problems}


def test_a_ref_is_redeemed_once_with_the_start_that_uses_it(ports: Ports) -> None:
    # given a deposited secret
    ref = ports.secrets.deposit("t", CARD, LATER)
    assert ref.startswith("sr_") and len(ref) == 46
    # when a unit starting a saga redeems it
    definition = registered(ports)
    with ports.log.unit_of_work() as unit:
        values = ports.secrets.redeem("t", {"card": ref}, "s1", T0, unit)
        ports.log.append("s1", "t", [started("s1", definition)], NO_STREAM, unit=unit)
    # then the value came out, and the ref is spent
    assert values == {"card": CARD}
    with pytest.raises(SecretRefRejected) as refused, ports.log.unit_of_work() as unit:
        ports.secrets.redeem("t", {"card": ref}, "s2", T0, unit)
    assert _rules(refused.value) == {"input.card": "secret_ref_used"}


def test_a_unit_that_does_not_commit_leaves_the_ref_unspent(ports: Ports) -> None:
    ref = ports.secrets.deposit("t", CARD, LATER)
    with pytest.raises(Boom), ports.log.unit_of_work() as unit:
        ports.secrets.redeem("t", {"card": ref}, "s1", T0, unit)
        raise Boom
    with ports.log.unit_of_work() as unit:
        assert ports.secrets.redeem("t", {"card": ref}, "s2", T0, unit) == {"card": CARD}


def test_unknown_other_tenants_and_expired_refs_are_refused_naming_each_field(
    ports: Ports
) -> None:
    # given a ref of another tenant, one about to expire, and one never issued
    theirs = ports.secrets.deposit("other", CARD, LATER)
    brief = ports.secrets.deposit("t", "1234", T0 + timedelta(seconds=1))
    never = "sr_" + "A" * 43
    # when a unit redeems them all at once, a second after the brief one expired
    with pytest.raises(SecretRefRejected) as refused, ports.log.unit_of_work() as unit:
        ports.secrets.redeem("t", {"a": theirs, "b": brief, "c": never}, "s1",
                             T0 + timedelta(seconds=2), unit)
    # then each field is named with its reason; another tenant's ref reads as unknown
    assert _rules(refused.value) == {"input.a": "secret_ref_unknown",
                                     "input.b": "secret_ref_expired",
                                     "input.c": "secret_ref_unknown"}
    # and nothing was spent: the owner can still use its ref
    with ports.log.unit_of_work() as unit:
        assert ports.secrets.redeem("other", {"a": theirs}, "s2", T0, unit) == {"a": CARD}


def test_expired_refs_are_purged_spent_or_not(ports: Ports) -> None:
    spent = ports.secrets.deposit("t", CARD, LATER)
    unused = ports.secrets.deposit("t", CARD, LATER)
    lasting = ports.secrets.deposit("t", CARD, LATER + timedelta(hours=1))
    with ports.log.unit_of_work() as unit:
        ports.secrets.redeem("t", {"card": spent}, "s1", T0, unit)
    assert ports.secrets.purge_expired(T0) == 0
    assert ports.secrets.purge_expired(LATER) == 2
    assert ports.secrets.purge_expired(LATER) == 0
    with pytest.raises(SecretRefRejected) as refused, ports.log.unit_of_work() as unit:
        ports.secrets.redeem("t", {"card": unused}, "s2", T0, unit)
    assert _rules(refused.value) == {"input.card": "secret_ref_unknown"}
    with ports.log.unit_of_work() as unit:
        assert ports.secrets.redeem("t", {"card": lasting}, "s3", LATER, unit) == {"card": CARD}


def test_redeeming_nothing_writes_nothing(ports: Ports) -> None:
    with ports.log.unit_of_work() as unit:
        assert ports.secrets.redeem("t", {}, "s1", T0, unit) == {}
