"""A signed agent command naming a definition with a NUL in it is invalid input (a dead
letter an operator can read), never a database error retried forever."""

from __future__ import annotations

import time

import pytest
from principal_support import authenticated
from signed_agent import agent_signer, bare_celery, send
from trip_inputs import by_secret_ref

pytestmark = pytest.mark.integration


def test_a_signed_start_of_a_name_holding_a_nul_is_dead_lettered_as_invalid_input(
        fleet, broker, workers):
    workers.start(1)
    agent = bare_celery(broker)
    signer = agent_signer(fleet, "nul-tenant")
    # when an agent signs a start of "trip<NUL>x"
    sent = send(agent, signer.start_saga("trip\x00x",
                                         by_secret_ref(fleet.client(tenant="nul-tenant")),
                                         key="nul-1"))
    # then it waits in the dead letters as invalid input, saying why
    # (read by an operator of the tenant whose key signed it)
    olga = authenticated(fleet, "olga", ["operator"], tenant="nul-tenant")
    deadline = time.monotonic() + 60  # only ends a hang
    while not (letters := [x for x in fleet.dead_letters.open_letters(olga)
                           if x.task_id == sent]):
        assert time.monotonic() < deadline, "the command was never dead-lettered"
        time.sleep(0.1)
    (letter,) = letters
    assert letter.error_kind == "invalid_input", letter.reason
    assert "NUL" in letter.reason
    # and nothing was started
    assert fleet.client(tenant="nul-tenant").find("nul-1") is None
    agent.close()
