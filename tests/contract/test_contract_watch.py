"""SagaLog.watch contract: a watcher opened before an append is woken by it, whether the
append stands alone or commits with a unit of work; one wake-up covers what came before it.

What SagaClient.wait sleeps on. A wake-up is only "look again"; the waiter's slow re-check
(tests/integration/fleet/test_wait.py) is what covers a store with NOTIFY off.
"""

from __future__ import annotations

from contract_support import Ports, finished, note, registered, start, started

from events.eventstore.model import NO_STREAM

# Generous: the wait returns as soon as the wake-up arrives; this only bounds a failure.
WAKE_DEADLINE_S = 30.0
# How long a watcher listens for a wake-up that must not come.
QUIET_S = 0.2


def test_an_append_after_the_watch_opened_wakes_it(ports: Ports) -> None:
    start(ports, "s1")
    with ports.log.watch() as changes:
        # when another writer appends after the watch opened (before the watcher sleeps)
        ports.log.append("s1", "t", [note(1)], 1)
        # then the watcher is woken, once for everything queued so far
        assert changes.wait(WAKE_DEADLINE_S) is True
        assert changes.wait(QUIET_S) is False
        # and woken again by the next append
        ports.log.append("s1", "t", [finished(2)], 2)
        assert changes.wait(WAKE_DEADLINE_S) is True


def test_an_append_in_a_unit_of_work_wakes_the_watcher_when_it_commits(ports: Ports) -> None:
    definition = registered(ports)
    with ports.log.watch() as changes:
        with ports.log.unit_of_work() as unit:
            ports.log.append("s1", "t", [started("s1", definition)], NO_STREAM, unit=unit)
        assert changes.wait(WAKE_DEADLINE_S) is True
    assert ports.log.load("s1").version == 1


def test_an_append_before_the_watch_opened_does_not_wake_it(ports: Ports) -> None:
    start(ports, "s1")
    with ports.log.watch() as changes:
        assert changes.wait(QUIET_S) is False
