"""SagaLog contract: a saga's due time, set by the append that moves it or by a deferral
while it is still at a version, and the sagas due by a time, longest due first."""

from __future__ import annotations

from datetime import timedelta

import pytest
from contract_support import T0, Ports, finished, note, registered, started

from events import NO_STREAM, ConcurrencyError
from events.saga_log.port import DueSaga

LATER = T0 + timedelta(hours=1)


def start_due(ports: Ports, saga_id: str, due_at: object) -> None:
    """Start a saga whose first append sets its due time."""
    definition = registered(ports)
    ports.log.append(saga_id, "t", [started(saga_id, definition)], NO_STREAM,
                     due_at=due_at)  # type: ignore[arg-type]


def test_a_saga_started_without_a_due_time_is_never_due(ports: Ports) -> None:
    registered(ports)
    ports.log.append("s1", "t", [started("s1", registered(ports))], NO_STREAM)
    assert ports.log.due(LATER + timedelta(days=365), 10) == []


def test_due_sagas_come_longest_due_first_and_only_once_due(ports: Ports) -> None:
    start_due(ports, "late", T0 + timedelta(minutes=30))
    start_due(ports, "early", T0 + timedelta(minutes=10))
    start_due(ports, "future", LATER + timedelta(minutes=1))
    assert ports.log.due(LATER, 10) == [
        DueSaga("early", 1, T0 + timedelta(minutes=10)),
        DueSaga("late", 1, T0 + timedelta(minutes=30)),
    ]
    assert [d.saga_id for d in ports.log.due(LATER, 1)] == ["early"]
    assert ports.log.due(T0, 10) == []


def test_due_since_a_time_is_what_came_due_after_it_longest_due_first(ports: Ports) -> None:
    # given sagas due at 10 and 30 minutes and at the hour, one never due before the hour
    start_due(ports, "at-10", T0 + timedelta(minutes=10))
    start_due(ports, "at-30", T0 + timedelta(minutes=30))
    start_due(ports, "at-60", LATER)
    start_due(ports, "future", LATER + timedelta(minutes=1))
    # then what came due after 10 minutes, by the hour, is the two later ones, in due order
    assert ports.log.due(LATER, 10, since=T0 + timedelta(minutes=10)) == [
        DueSaga("at-30", 1, T0 + timedelta(minutes=30)), DueSaga("at-60", 1, LATER)]
    assert [d.saga_id for d in ports.log.due(LATER, 1, since=T0)] == ["at-10"]
    assert ports.log.due(LATER, 10, since=LATER) == []


def test_an_append_keeps_the_due_time_unless_given_one_and_none_clears_it(
    ports: Ports,
) -> None:
    start_due(ports, "s1", T0)
    ports.log.append("s1", "t", [note(1)], 1)
    assert ports.log.due(LATER, 10) == [DueSaga("s1", 2, T0)]
    ports.log.append("s1", "t", [note(2)], 2, due_at=T0 + timedelta(minutes=5))
    assert ports.log.due(LATER, 10) == [DueSaga("s1", 3, T0 + timedelta(minutes=5))]
    ports.log.append("s1", "t", [finished(3)], 3, due_at=None)
    assert ports.log.due(LATER, 10) == []


def test_a_refused_append_leaves_the_due_time_as_it_was(ports: Ports) -> None:
    start_due(ports, "s1", T0)
    with pytest.raises(ConcurrencyError):
        ports.log.append("s1", "t", [note(1)], 5, due_at=None)
    assert ports.log.due(LATER, 10) == [DueSaga("s1", 1, T0)]


def test_a_due_time_set_in_a_unit_applies_with_the_unit_only(ports: Ports) -> None:
    start_due(ports, "s1", T0)
    with ports.log.unit_of_work() as unit:
        ports.log.append("s1", "t", [note(1)], 1, unit=unit, due_at=LATER)
    assert ports.log.due(LATER, 10) == [DueSaga("s1", 2, LATER)]
    with pytest.raises(RuntimeError), ports.log.unit_of_work() as unit:
        ports.log.append("s1", "t", [note(2)], 2, unit=unit, due_at=None)
        raise RuntimeError("abandon the unit")
    assert ports.log.due(LATER, 10) == [DueSaga("s1", 2, LATER)]


def test_a_deferral_applies_only_while_the_saga_is_at_its_version(ports: Ports) -> None:
    start_due(ports, "kept", T0)
    start_due(ports, "moved", T0)
    start_due(ports, "cleared", T0)
    ports.log.append("moved", "t", [note(1)], 1, due_at=T0 + timedelta(minutes=1))
    deferred = ports.log.defer([
        DueSaga("kept", 1, LATER),
        DueSaga("moved", 1, LATER),  # a commit in between: its own due time stands
        DueSaga("cleared", 1, None),
        DueSaga("never-started", 1, T0),
    ])
    assert deferred == 2
    assert ports.log.due(LATER, 10) == [
        DueSaga("moved", 2, T0 + timedelta(minutes=1)),
        DueSaga("kept", 1, LATER),
    ]
    assert ports.log.defer([]) == 0
