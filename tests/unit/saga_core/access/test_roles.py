"""What belongs to no tenant answers only to the fleet role; what belongs to a tenant answers
to that tenant's principals alone, whatever their roles (the fleet role's included)."""

from __future__ import annotations

import dataclasses

import pytest

from saga_core.access.roles import (
    FLEET_OPERATOR_ROLE,
    ROLE_ACTIONS,
    Action,
    NotPermitted,
    Principal,
    PrincipalKind,
    answers_to,
    check_permitted,
)


def _person(tenant: str, *roles: str) -> Principal:
    return Principal(tenant, "someone", PrincipalKind.PERSON, frozenset(roles))


def test_a_tenants_record_answers_to_its_own_principals_only() -> None:
    # given principals of acme with every built-in role, and the fleet operator
    acme = [_person("acme", role) for role in ROLE_ACTIONS]
    fleet = _person("fleet", FLEET_OPERATOR_ROLE)
    # then acme's record answers to each of acme's, and to no other tenant's, fleet or not
    assert all(answers_to(p, "acme") for p in acme)
    assert not answers_to(fleet, "acme")
    assert not answers_to(_person("globex", "operator", "admin"), "acme")
    # and the fleet operator's own tenant's records answer to it
    assert answers_to(fleet, "fleet")


def test_a_record_of_unknown_tenant_answers_only_to_the_fleet_role() -> None:
    # given a principal of every role of some tenant, and the fleet operator
    for role in ROLE_ACTIONS:
        # then a record no tenant is proven to own answers only to the fleet role
        assert answers_to(_person("acme", role), None) is (role == FLEET_OPERATOR_ROLE), role
    # (an in-process agent, trusted to act for its tenant, is no fleet operator either)
    assert not answers_to(Principal.in_process_agent("acme", "bot"), None)


def test_only_the_fleet_role_is_allowed_the_fleets_views() -> None:
    check_permitted(_person("fleet", FLEET_OPERATOR_ROLE), Action.FLEET)
    for role in ROLE_ACTIONS:
        if role == FLEET_OPERATOR_ROLE:
            continue
        with pytest.raises(NotPermitted, match="fleet_operator"):
            check_permitted(_person("acme", role, "payments_approver"), Action.FLEET)


def test_only_the_in_process_agent_is_unproven_and_a_principal_cannot_be_changed() -> None:
    # found by the mutation run (issue 36): roles.py:100 and :82 survived every test
    assert _person("acme", "approver").authenticated
    assert not Principal.in_process_agent("acme", "bot").authenticated
    person = _person("acme", "approver")
    with pytest.raises(dataclasses.FrozenInstanceError):
        person.roles = frozenset({FLEET_OPERATOR_ROLE})  # type: ignore[misc]
    assert {person, _person("acme", "approver")} == {person}  # a value: hashable, equal
