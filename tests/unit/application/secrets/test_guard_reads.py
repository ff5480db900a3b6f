"""The guard asks the vault once per saga per process, even when a saga's parallel branches
ask for its values at the same moment (application.secrets.guard.SecretGuard)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest

from application.secrets.guard import SecretGuard
from application.telemetry.metrics import WorkerMetrics
from events.saga_log.port import LoadedSaga
from saga_core.engine.state import SagaState
from sagafleet.example_sagas import trip_definition

TOKEN = "tok_live_BRANCHES_4711"


class CountedVault:
    """A vault whose reads are counted and held until released: what it keeps is fixed, what
    matters here is how often and when it is asked."""

    def __init__(self, *, fail_first: bool = False) -> None:
        self.reads = 0
        self.inside = threading.Event()  # a read is under way
        self.release = threading.Event()
        self.fail_first = fail_first
        self._lock = threading.Lock()

    def kept(self, saga_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        with self._lock:
            self.reads += 1
            failing = self.fail_first and self.reads == 1
        self.inside.set()
        assert self.release.wait(30), "the test never released the read"
        if failing:
            raise ConnectionError("the vault's server went away")
        return {saga_id: {"card_token": TOKEN} for saga_id in saga_ids}


def _trip(saga_id: str = "saga-1") -> LoadedSaga:
    definition = trip_definition()
    return LoadedSaga(saga_id, definition, SagaState.initial(definition), None, 1)


def _more_reads_within(vault: CountedVault, than: int, seconds: float) -> bool:
    """Whether the vault is asked more than ``than`` times within ``seconds`` (the chance a
    guard without one read per saga would take to ask again)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if vault.reads > than:
            return True
        time.sleep(0.01)
    return False


def _asked_during_the_first_read(
    threads: ThreadPoolExecutor, guard: SecretGuard, vault: CountedVault, loaded: LoadedSaga,
    more: int,
) -> tuple[Future[dict[str, Any]], list[Future[dict[str, Any]]]]:
    """One branch asks for the saga's values; while the vault holds its read, ``more``
    branches ask too, and none of them asks the vault again; then the read is released."""
    first = threads.submit(guard.kept, loaded)
    assert vault.inside.wait(30)
    others = [threads.submit(guard.kept, loaded) for _ in range(more)]
    assert not _more_reads_within(vault, than=1, seconds=0.5)
    vault.release.set()
    return first, others


def test_branches_asking_at_once_wait_for_one_read() -> None:
    # given a guard whose first read of a saga's values is under way
    vault = CountedVault()
    guard = SecretGuard(vault, WorkerMetrics())  # type: ignore[arg-type]
    loaded = _trip()
    with ThreadPoolExecutor(4) as threads:
        # when three more branches of the same saga ask for its values meanwhile, then none
        # of them asks the vault again while that read is under way
        first, others = _asked_during_the_first_read(threads, guard, vault, loaded, 3)
        # and every branch gets the values of that one read
        answers = [first.result(30), *(other.result(30) for other in others)]
    assert answers == [{"card_token": TOKEN}] * 4
    assert vault.reads == 1
    # and the values are kept: a later ask reads nothing, another saga is read for itself
    assert TOKEN in guard.needles(loaded).forms
    assert guard.kept(_trip("saga-2")) == {"card_token": TOKEN}
    assert vault.reads == 2


def test_when_the_read_fails_one_waiting_branch_reads_again_for_all() -> None:
    # given a guard whose first read of a saga fails after two branches began to wait for it
    vault = CountedVault(fail_first=True)
    guard = SecretGuard(vault, WorkerMetrics())  # type: ignore[arg-type]
    loaded = _trip()
    with ThreadPoolExecutor(3) as threads:
        # when the read fails
        first, others = _asked_during_the_first_read(threads, guard, vault, loaded, 2)
        # then the first branch gets the error, and the others get the values of one more read
        with pytest.raises(ConnectionError, match="went away"):
            first.result(30)
        assert [other.result(30) for other in others] == [{"card_token": TOKEN}] * 2
    assert vault.reads == 2
    # and that read is kept
    assert guard.kept(loaded) == {"card_token": TOKEN} and vault.reads == 2
