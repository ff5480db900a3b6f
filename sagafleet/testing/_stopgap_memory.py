"""STOPGAP until branch ``sagalog`` lands ``events.memory``: the saga ports in memory.

Only what the test kit needs of ``events.saga_log``'s protocols; replaced by
``events.memory.MemorySagaLog`` / ``MemoryDefinitions`` / ``MemorySecrets`` (which keep
the same contract, checked by one contract suite) as soon as they exist.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

from events import ConcurrencyError
from events.definitions import DefinitionConflict, DefinitionNotFound
from events.model import AppendResult, ExpectedVersion, Position, RecordedEvent, StreamState
from events.saga_log import Unit
from events.sagas import LoadedSaga, SagaNotFound, saga_stream
from saga_core import SagaDefinition, evolve
from saga_core.errors import SagaError
from saga_core.events import SagaEvent, SagaStarted
from saga_core.state import SagaState
from workers.secrets import PLACEHOLDER_KEY, SecretUnavailable


@dataclass
class MemoryUnit:
    """Appends and secrets written in one unit; applied together on a clean exit."""

    appends: list[Callable[[], AppendResult]] = field(default_factory=list)
    secrets: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    # The stopgap keeps the unit's appends until commit; a caller reading its own result
    # inside the unit gets it from append()'s return value, computed eagerly below.


class MemoryDefinitions:
    """Definitions by (name, version, hash), in a dict."""

    def __init__(self) -> None:
        self._by_hash: dict[str, SagaDefinition] = {}
        self._by_name: dict[tuple[str, int], str] = {}

    def register(self, definition: SagaDefinition, *, registered_by: str = "") -> str:
        """Store a definition (idempotent); DefinitionConflict for other content."""
        digest = definition.content_hash()
        held = self._by_name.get((definition.name, definition.version))
        if held is not None and held != digest:
            raise DefinitionConflict(
                f"{definition.name} v{definition.version} is registered with other content")
        self._by_hash[digest] = definition
        self._by_name[(definition.name, definition.version)] = digest
        return digest

    def by_hash(self, digest: str) -> SagaDefinition:
        """The definition with that hash."""
        try:
            return self._by_hash[digest]
        except KeyError:
            raise DefinitionNotFound(f"no saga definition with hash {digest}") from None

    def get(self, name: str, version: int | None = None, *, cached_latest: bool = False
            ) -> SagaDefinition:
        """``name`` at ``version`` (the highest when omitted)."""
        versions = [v for (n, v) in self._by_name if n == name]
        wanted = version if version is not None else max(versions, default=None)
        if wanted is None or (name, wanted) not in self._by_name:
            raise DefinitionNotFound(f"no saga definition named {name!r}")
        return self._by_hash[self._by_name[(name, wanted)]]

    def send_latest_check(self, unit: Unit, definition: SagaDefinition) -> Callable[[], bool]:
        """Whether ``definition`` is still the highest version (always answerable here)."""
        return lambda: self.get(definition.name).version == definition.version


class MemorySecrets:
    """Secret saga inputs in a dict, revealed into tool arguments."""

    def __init__(self) -> None:
        self._values: dict[str, dict[str, Any]] = {}

    def keep(self, saga_id: str, secrets: Mapping[str, Any], unit: Unit) -> None:
        """Store values for a saga with the unit that starts it; the first write wins."""
        if secrets:
            _memory(unit).secrets.append((saga_id, dict(secrets)))

    def store(self, saga_id: str, secrets: dict[str, Any]) -> None:
        """Apply a committed unit's secrets."""
        held = self._values.setdefault(saga_id, {})
        for name, value in secrets.items():
            held.setdefault(name, value)

    def reveal(self, saga_id: str, args: Any) -> tuple[Any, dict[str, Any]]:
        """``args`` with placeholders replaced, and the revealed values by name."""
        held = self._values.get(saga_id, {})
        revealed: dict[str, Any] = {}

        def sub(value: Any) -> Any:
            if isinstance(value, dict) and len(value) == 1 and PLACEHOLDER_KEY in value:
                name = value[PLACEHOLDER_KEY]
                if name not in held:
                    raise SecretUnavailable(f"saga {saga_id}: secret input {name!r} is gone")
                revealed[name] = held[name]
                return held[name]
            if isinstance(value, dict):
                return {k: sub(v) for k, v in value.items()}
            if isinstance(value, list):
                return [sub(v) for v in value]
            return value

        return sub(args), revealed

    def purge(self, saga_id: str) -> None:
        """Forget a saga's secrets."""
        self._values.pop(saga_id, None)


class MemorySagaLog:
    """Saga streams in a dict of lists, with expected-version appends."""

    def __init__(self, definitions: MemoryDefinitions, secrets: MemorySecrets) -> None:
        self.definitions = definitions
        self.secrets = secrets
        self._streams: dict[str, list[tuple[SagaEvent, RecordedEvent]]] = {}
        self._position = 0
        self._all: list[RecordedEvent] = []

    @property
    def store(self) -> MemorySagaLog:
        """The event store under the log (here: the log itself, for read_all)."""
        return self

    def stream_version(self, stream_id: str) -> int:
        """A stream's current version (0: no events)."""
        saga_id = stream_id.removeprefix("saga-")
        return len(self._streams.get(saga_id, ()))

    def read_all(self, after: Position | None = None, limit: int = 1000) -> list[RecordedEvent]:
        """A page of the global log after ``after``, in commit order."""
        return [r for r in self._all if after is None or r.position > after][:limit]

    def load(self, saga_id: str, *, tenant: str | None = None, at: Position | None = None
             ) -> LoadedSaga:
        """Fold a saga; SagaNotFound if absent or another tenant's."""
        stream = self._streams.get(saga_id)
        if not stream:
            raise SagaNotFound(f"no saga {saga_id!r}")
        pairs = [p for p in stream if at is None or p[1].position <= at]
        started = pairs[0][0]
        assert isinstance(started, SagaStarted)
        if tenant is not None and started.tenant != tenant:
            raise SagaNotFound(f"no saga {saga_id!r}")
        definition = self.definitions.by_hash(started.definition_hash)
        state = SagaState.initial(definition)
        for event, _ in pairs:
            state = evolve(state, event)
        return LoadedSaga(saga_id, definition, state, tuple(e for e, _ in pairs),
                          tuple(r for _, r in pairs))

    def load_many(self, saga_ids: Sequence[str]) -> dict[str, LoadedSaga | SagaError]:
        """Each id to its saga or to the error loading it alone raises."""
        found: dict[str, LoadedSaga | SagaError] = {}
        for saga_id in saga_ids:
            try:
                found[saga_id] = self.load(saga_id)
            except SagaError as exc:
                found[saga_id] = exc
        return found

    def append(self, saga_id: str, tenant: str, events: Sequence[SagaEvent],
               expected_version: ExpectedVersion, *, actor: str | None = None,
               unit: Unit | None = None) -> AppendResult:
        """Append at ``expected_version``; ConcurrencyError if the stream moved."""
        stream = self._streams.get(saga_id, [])
        actual = len(stream)
        expected = 0 if expected_version is StreamState.NO_STREAM else expected_version
        if expected is not StreamState.ANY and expected != actual:
            raise ConcurrencyError(saga_stream(saga_id), expected_version, actual)
        metadata: dict[str, Any] = {"tenant": tenant, **({"actor": actor} if actor else {})}
        records = []
        for offset, event in enumerate(events, start=1):
            self._position += 1
            records.append(RecordedEvent(
                saga_stream(saga_id), actual + offset, uuid4(), type(event).__name__, 1,
                event.model_dump(mode="json"), metadata, datetime.now(UTC),
                Position(self._position, self._position), "", "", tenant))
        result = AppendResult(saga_stream(saga_id), actual + len(events), tuple(records))

        def commit() -> AppendResult:
            self._streams.setdefault(saga_id, []).extend(zip(events, records, strict=True))
            self._all.extend(records)
            return result

        if unit is None:
            return commit()
        _memory(unit).appends.append(commit)
        return result

    @contextmanager
    def unit_of_work(self) -> Iterator[MemoryUnit]:
        """Commit the unit's appends and secrets on a clean exit, nothing otherwise."""
        unit = MemoryUnit()
        yield unit
        for commit in unit.appends:
            commit()
        for saga_id, values in unit.secrets:
            self.secrets.store(saga_id, values)


def _memory(unit: Unit) -> MemoryUnit:
    if not isinstance(unit, MemoryUnit):
        raise TypeError(f"the in-memory log takes its own units, not a {type(unit).__name__}")
    return unit
