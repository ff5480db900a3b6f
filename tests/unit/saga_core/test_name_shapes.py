"""Names a caller gives (a definition's, a tenant's, a principal's, a role) are whole: no NUL,
and no final newline slipping past a pattern's ``$``."""

from __future__ import annotations

import pytest

from application.principals.directory import name_problems
from saga_core.access.roles import role_problems
from saga_core.definitions.definition import definition_name_problem


@pytest.mark.parametrize("name", ["trip", "trip.v2", "plan-ab_1", "t" * 128])
def test_a_definition_name_registration_would_take_is_fine(name: str) -> None:
    assert definition_name_problem(name) is None


@pytest.mark.parametrize("name", ["trip\x00x", "trip\n", "Trip", "", "1trip", "t" * 129, None])
def test_any_other_definition_name_is_refused_without_being_quoted(name: object) -> None:
    problem = definition_name_problem(name)
    assert problem is not None
    assert "trip" not in problem.lower().replace("a definition name", "")


def test_a_nul_is_called_by_its_name() -> None:
    assert "NUL" in str(definition_name_problem("a\x00"))


@pytest.mark.parametrize("what", ["tenant", "name"])
def test_a_tenant_or_principal_name_with_a_final_newline_is_refused(what: str) -> None:
    assert name_problems(what, "acme") == []
    assert name_problems(what, "acme\n")


def test_a_role_with_a_final_newline_is_refused() -> None:
    assert role_problems(["approver"]) == []
    assert role_problems(["approver\n"])
