"""Where the fleet writes or shows something, a saga's secret values are looked for by value.

Secrets are kept out of the log by declaration (placeholders,
``saga_core.definitions.secret_flow``);
:class:`SecretGuard` is the last line of defence behind that, at every place where text from
outside the deterministic core is written or shown — whoever writes knows the values:

* a tool's result (receipt, error, a lookup's answer): the executor, with the saga's values;
* what a person or an agent gives (a start's input, reason, key and lineage; a reason, an
  evidence document, a revised plan): the client, with the start's own values or the saga's;
* a dead letter: the values it withholds (``application.secrets.inputs.withhold_secrets``);
* a worker's log lines while a tool runs: the values of that saga (``application.telemetry.logs``);
* an MCP answer and a console page: the values of every saga it names.

What ``decide`` records derives from the log and so is as clean as the log. Each value
found is replaced (``saga_core.secret_scrub``) and counted by place in
``sagafleet_secret_scrubs_total``: anything above zero is a leak that was stopped.

The values of a saga come from the vault (``Secrets.kept``) while it is live, plus those an
older log or definition holds in clear (a saga started before secret fields were kept apart,
a definition registered before ``secret_literal`` was refused). The vault is asked once per
saga per process (threads asking at once wait for one read): a saga's values never change
once it started (the first write wins), so
they are kept for the most recent :data:`CACHED_SAGAS` sagas — in this process's memory
only, where the worker holds the values anyway while it calls the tool — and the executor
reveals a tool call's secret arguments from the same read (no second query per saga).
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from application.secrets.placeholders import PLACEHOLDER_KEY
from application.secrets.port import Secrets
from application.telemetry.metrics import WorkerMetrics
from events.saga_log.port import LoadedSaga
from saga_core.definitions.definition import SagaDefinition
from saga_core.definitions.derived import Derived
from saga_core.definitions.secret_flow import input_field_of, secret_fields
from saga_core.engine.events import SagaEvent
from saga_core.secret_scrub import (
    NO_NEEDLES,
    SecretNeedles,
    scrub_document,
    scrub_event,
    scrub_text,
)

SCRUB_PLACES: Final = ("tool_result", "lookup", "start", "command", "plan", "dead_letter",
                       "log", "answer", "page")
"""Where a secret value can be found and replaced (the counter's ``place`` label)."""

CACHED_SAGAS: Final = 512
"""How many sagas' needles a process keeps (the oldest is forgotten first)."""

SAGA_ID: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
"""A saga id as it appears in a page or an answer (every saga id is a UUID)."""

E = TypeVar("E", bound=SagaEvent)


class SecretGuard:
    """Looks for the secret values of sagas where the fleet writes or shows, replaces and
    counts what it finds (one per fleet: it keeps the needles of recent sagas)."""

    def __init__(self, secrets: Secrets, metrics: WorkerMetrics) -> None:
        self.secrets = secrets
        self.metrics = metrics
        self._cache: OrderedDict[tuple[str, str], _Known] = OrderedDict()
        self._reading: dict[tuple[str, str], threading.Event] = {}  # read under way, by saga
        self._lock = threading.Lock()

    # -- what to look for -----------------------------------------------------------------

    def needles(self, loaded: LoadedSaga) -> SecretNeedles:
        """Everything ``loaded`` keeps secret: its vault values (asked once per process and
        definition), and any the log's input or the definition holds in clear."""
        return self._known(loaded).needles

    def kept(self, loaded: LoadedSaga) -> dict[str, Any]:
        """The values the vault keeps for ``loaded`` (from the same once-per-process read:
        what the executor reveals into a tool call's arguments)."""
        return dict(self._known(loaded).values)

    def _known(self, loaded: LoadedSaga) -> _Known:
        """The saga's values and needles: kept, or read by one thread while the others asking
        for the same saga wait for that read (a saga's parallel branches start together, and
        each read the vault when none waited). A read that fails is not kept: a waiting
        thread reads again."""
        key = (loaded.saga_id, loaded.definition.content_hash())
        while True:
            with self._lock:
                cached = self._cache.get(key)
                if cached is not None:
                    self._cache.move_to_end(key)
                    return cached
                reading = self._reading.get(key)
                if reading is None:  # nobody reads it: this thread does
                    reading = self._reading[key] = threading.Event()
                    break
            reading.wait()  # its values are kept now, or that read failed and one more is tried
        try:
            known = self._read(loaded)
            with self._lock:
                self._cache[key] = known
                while len(self._cache) > CACHED_SAGAS:
                    self._cache.popitem(last=False)
            return known
        finally:
            with self._lock:
                del self._reading[key]
            reading.set()

    def _read(self, loaded: LoadedSaga) -> _Known:
        """What the vault keeps for ``loaded`` and the log or definition holds in clear."""
        values: dict[str, Any] = {}
        if secret_fields(loaded.definition):
            values = self.secrets.kept([loaded.saga_id]).get(loaded.saga_id, {})
        return _Known(values, SecretNeedles.of(values.values()) | in_clear(loaded))

    @staticmethod
    def of_values(definition: SagaDefinition, values: Mapping[str, Any]) -> SecretNeedles:
        """The needles of values a caller holds (a start's secret fields), with any secret
        literal of ``definition``."""
        return SecretNeedles.of(values.values()) | literal_needles(definition)

    def named_in(self, shown: str) -> SecretNeedles:
        """The vault values of every saga whose id appears in ``shown`` (a page, an answer),
        in one query; nothing when it names none."""
        ids = sorted(set(SAGA_ID.findall(shown)))
        if not ids:
            return NO_NEEDLES
        kept = self.secrets.kept(ids)
        return SecretNeedles.of(value for values in kept.values() for value in values.values())

    # -- replacing and counting -----------------------------------------------------------

    def events(self, events: Sequence[E], needles: SecretNeedles, place: str) -> list[E]:
        """``events`` with every secret value replaced (the same events when none was)."""
        if not needles:
            return list(events)
        clean = []
        for event in events:
            found = scrub_event(event, needles)
            self.count(place, found.count)
            clean.append(found.value)
        return clean

    def document(self, value: Any, needles: SecretNeedles, place: str) -> Any:
        """A JSON-like ``value`` with every secret value replaced."""
        found = scrub_document(value, needles)
        self.count(place, found.count)
        return found.value

    def text(self, text: str, needles: SecretNeedles, place: str) -> str:
        """A text meant for people with every secret value replaced."""
        found = scrub_text(text, needles)
        self.count(place, found.count)
        return found.value

    def watch(self, needles: SecretNeedles) -> SecretWatch:
        """What a log filter needs to replace ``needles`` in records
        (``application.telemetry.logs``)."""
        return SecretWatch(self, needles)

    def count(self, place: str, found: int) -> None:
        """Count ``found`` replacements at ``place`` (one of :data:`SCRUB_PLACES`)."""
        if found:
            self.metrics.secret_scrubbed(place, found)

    def scrubbed(self, place: str) -> int:
        """How many replacements were counted at ``place`` so far (this process)."""
        value = self.metrics.registry.get_sample_value("sagafleet_secret_scrubs_total",
                                                       {"place": place})
        return int(value or 0)


@dataclass(frozen=True)
class _Known:
    """What a process knows of one saga's secrets: the vault's values and their needles."""

    values: Mapping[str, Any]
    needles: SecretNeedles


@dataclass(frozen=True)
class SecretWatch:
    """A guard with the needles of the saga a worker is calling a tool for: what
    ``application.telemetry.logs.step_log_context`` holds while the tool runs."""

    guard: SecretGuard
    needles: SecretNeedles

    def text(self, text: str, place: str) -> str:
        """``text`` with the watched values replaced (counted at ``place``)."""
        return self.guard.text(text, self.needles, place)

    def document(self, value: Any, place: str) -> Any:
        """A JSON-like ``value`` with the watched values replaced (counted at ``place``)."""
        return self.guard.document(value, self.needles, place)


def in_clear(loaded: LoadedSaga) -> SecretNeedles:
    """Secret values a saga's log or definition holds in clear: a secret field's value in
    ``SagaStarted`` (sagas started before the vault) and literal secret arguments."""
    values: list[Any] = []
    if loaded.started is not None:
        for name in secret_fields(loaded.definition):
            value = loaded.started.input.get(name)
            if value is not None and not _is_placeholder(value):
                values.append(value)
    return SecretNeedles.of(values) | literal_needles(loaded.definition)


#: Each definition's literal needles, by content hash.
_LITERAL_NEEDLES: Derived[str, SecretNeedles] = Derived(256)


def literal_needles(definition: SagaDefinition) -> SecretNeedles:
    """The literal values a definition gives arguments its tools mark secret (refused since
    ``secret_literal``; a definition registered before may hold one). Kept by the
    definition's content hash: a start and every saga's first tool call in a process ask."""
    return _LITERAL_NEEDLES.get(definition.content_hash(),
                                lambda: SecretNeedles.of(_literals(definition)))


def _literals(definition: SagaDefinition) -> Iterable[Any]:
    tools = {(t.name, t.version): t for t in definition.tools}
    for step in definition.steps:
        spec = tools.get((step.tool, step.version))
        if spec is None:
            continue
        for arg, value in step.args.items():
            secret = arg in spec.args and spec.args[arg].secret
            if secret and isinstance(value, str) and "${" not in value:
                yield value
            elif secret and not isinstance(value, str) and input_field_of(value) is None:
                yield value


def _is_placeholder(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {PLACEHOLDER_KEY}
