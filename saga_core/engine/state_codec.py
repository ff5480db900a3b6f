"""Snapshots of saga state: a :class:`~saga_core.engine.state.SagaState` to JSON and back, and the
schema fingerprint a stored snapshot must carry to be read at all.

A snapshot is never the truth, only a shortcut: a load folds the events after it, and a
snapshot that does not decode, or was written by a fold of another shape or meaning, is
ignored (the log is folded from its start instead). So the codec has one promise, checked
by a property test for every cut point of generated histories::

    evolve*(decode(encode(fold(prefix))), rest) == fold(prefix + rest)

The codec is driven by the dataclasses' own type hints (no pickle: whoever can write the
database must not be able to run code here), so it covers every field by construction,
and a field of a type it does not know fails loudly when this module is imported. The
definition is not stored: a snapshot names it by content hash, and the reader passes the
definition it loaded by that hash.

Runs are shared: each first claim keeps the forward runs as they stood
(``StepRun.forward_at_first_claim``), which keep their own, and most runs are the same
objects in several of those mappings. Encoding them as a table of nodes, each written once
(by identity) and referenced by index, keeps a snapshot linear in the state's size and
decodes into the same sharing.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import types
from collections.abc import Callable, Mapping
from datetime import datetime
from decimal import Decimal, InvalidOperation
from enum import Enum
from typing import Any, Final, Literal, Union, get_args, get_origin, get_type_hints

from pydantic import BaseModel, ValidationError

from saga_core.definitions.definition import SagaDefinition
from saga_core.engine.state import FOLD_VERSION, SagaState, StepRun
from saga_core.errors import ErrorKind, SagaError

DEFAULT_SNAPSHOT_EVERY: Final = 16
"""How many events a load may fold past a saga's snapshot before it writes a new one
(``SAGAFLEET_SNAPSHOT_EVERY``; chosen by ``scripts/bench_snapshots.py``)."""

#: The field a snapshot leaves to its reader: the definition, named by its content hash.
_BY_HASH: Final = frozenset({(SagaState, "definition")})


class SnapshotUnreadable(SagaError):
    """A stored snapshot does not decode into a saga state (corrupt, or for another shape);
    the caller ignores it and folds the log from its start."""

    kind = ErrorKind.INTEGRITY


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """The resolved field types of a dataclass, in field order (the definition excluded);
    resolved once per class (resolving them is slower than encoding a run)."""
    hints = get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if (cls, f.name) not in _BY_HASH}


def _optional(tp: Any) -> Any | None:
    """``X`` of ``X | None``; None for any other type."""
    if get_origin(tp) in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(get_args(tp)) == 2:
            return args[0]
    return None


def _is_runs(tp: Any) -> bool:
    """Whether ``tp`` is a mapping of step ids to runs (encoded as a shared node)."""
    return get_origin(tp) is Mapping and get_args(tp) == (str, StepRun)


def _describe(tp: Any, seen: set[type]) -> Any:
    """A JSON-able description of a type's shape, recursively (what the fingerprint hashes).
    TypeError for a type the codec cannot encode, so a new field of one fails at import."""
    inner = _optional(tp)
    if inner is not None:
        return ["optional", _describe(inner, seen)]
    if _is_runs(tp):
        return ["runs", _describe(StepRun, seen)]
    origin = get_origin(tp)
    if origin is Literal:
        return ["literal", [str(a) for a in get_args(tp)]]
    if origin is frozenset and get_args(tp) == (str,):
        return ["frozenset", "str"]
    if tp == Mapping[str, Any]:
        return "json-object"
    if tp in (str, int, bool, float, Decimal, datetime):
        return tp.__name__
    if isinstance(tp, type) and issubclass(tp, Enum):
        return ["enum", tp.__name__, [m.value for m in tp]]
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return ["model", tp.__name__, tp.model_json_schema()]
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if tp in seen:
            return ["ref", tp.__name__]
        seen.add(tp)
        return ["record", tp.__name__, [[n, _describe(t, seen)] for n, t in _hints(tp).items()]]
    raise TypeError(f"saga_core.engine.state_codec cannot encode a field of type {tp!r}")


def _fingerprint() -> str:
    """sha256 over the state's shape (field names and types, recursively) and FOLD_VERSION:
    a snapshot written under another shape or another meaning of evolve never matches."""
    shape = {"fold_version": FOLD_VERSION, "state": _describe(SagaState, set())}
    text = json.dumps(shape, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


SCHEMA: Final = _fingerprint()
"""The schema fingerprint of snapshots this code writes and accepts."""


Encode = Callable[[Any, "_Encoder"], Any]
Decode = Callable[[Any, "_Decoder"], Any]


@functools.cache
def _codec(tp: Any) -> tuple[Encode, Decode]:
    """How a value of declared type ``tp`` goes to JSON and back, worked out once per type
    (a snapshot holds hundreds of runs of the same few types)."""
    inner = _optional(tp)
    if inner is not None:
        encode, decode = _codec(inner)
        return (lambda v, e: None if v is None else encode(v, e),
                lambda d, r: None if d is None else decode(d, r))
    if _is_runs(tp):
        return (lambda v, e: e.runs(v)), (lambda d, r: r.node(d, dict))
    origin = get_origin(tp)
    if origin is frozenset:
        return (lambda v, e: sorted(v),
                lambda d, r: frozenset(_typed(str, item) for item in _typed(list, d)))
    if origin is Literal:
        return (lambda v, e: v), (lambda d, r: _one_of(get_args(tp), d))
    if tp is Decimal:
        return (lambda v, e: str(v)), (lambda d, r: Decimal(_typed(str, d)))
    if tp is datetime:
        return (lambda v, e: v.isoformat()), (lambda d, r: datetime.fromisoformat(_typed(str, d)))
    if isinstance(tp, type) and issubclass(tp, Enum):
        return (lambda v, e: v.value), (lambda d, r: tp(d))
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return (lambda v, e: v.model_dump(mode="json")), (lambda d, r: tp.model_validate(d))
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return (lambda v, e: e.record(v)), (lambda d, r: r.record(tp, _typed(dict, d)))
    if tp == Mapping[str, Any]:  # the input: JSON already
        return (lambda v, e: v), (lambda d, r: _typed(dict, d))
    if tp in (str, int, bool, float):
        return (lambda v, e: v), (lambda d, r: _typed(tp, d))
    raise TypeError(f"saga_core.engine.state_codec cannot encode a field of type {tp!r}")


@functools.cache
def _fields(cls: type) -> tuple[tuple[str, Encode, Decode], ...]:
    """Each field of a dataclass (the definition excluded) with its codec, in field order."""
    return tuple((name, *_codec(tp)) for name, tp in _hints(cls).items())


class _Encoder:
    """One state to JSON: plain values inline, runs and runs mappings as shared nodes."""

    def __init__(self) -> None:
        self.nodes: list[dict[str, Any]] = []
        self._index: dict[int, int] = {}  # id(run or mapping) -> its node

    def record(self, value: Any) -> dict[str, Any]:
        """A dataclass as an object of its encoded fields."""
        cls: type = type(value)
        attributes = value.__dict__
        return {name: encode(attributes[name], self) for name, encode, _ in _fields(cls)}

    def runs(self, runs: Mapping[str, StepRun]) -> int:
        """The node of a runs mapping, its runs' nodes written first (post-order)."""
        if id(runs) in self._index:
            return self._index[id(runs)]
        # Pairs, not an object: the runs' order is the definition's (decide walks it), and
        # jsonb keeps an object's keys in an order of its own.
        refs = [[step_id, self._run(run)] for step_id, run in runs.items()]
        return self._node(runs, {"runs": refs})

    def _run(self, run: StepRun) -> int:
        if id(run) in self._index:
            return self._index[id(run)]
        return self._node(run, {"run": self.record(run)})

    def _node(self, obj: object, node: dict[str, Any]) -> int:
        self.nodes.append(node)
        self._index[id(obj)] = len(self.nodes) - 1
        return len(self.nodes) - 1


class _Decoder:
    """JSON back to a state: nodes decoded in order (each refers only to earlier ones)."""

    def __init__(self, nodes: list[Any]) -> None:
        self.built: list[Any] = []
        for node in nodes:
            if "run" in node:
                self.built.append(self.record(StepRun, _typed(dict, node["run"])))
            else:
                self.built.append({_typed(str, step_id): self.node(i, StepRun)
                                   for step_id, i in _typed(list, node["runs"])})

    def record(self, cls: type, doc: dict[str, Any], **given: Any) -> Any:
        """A dataclass from an object of its encoded fields (every field present).

        Built as ``saga_core.engine.state.replace`` builds records, without the frozen
        ``__init__``: a snapshot holds hundreds of runs of some thirty fields each, and
        every field is set here (a missing one is unreadable, never a default)."""
        record: Any = object.__new__(cls)
        attributes = record.__dict__
        for name, _, decode in _fields(cls):
            attributes[name] = decode(doc[name], self)
        attributes.update(given)
        return record

    def node(self, index: Any, kind: type) -> Any:
        """An earlier node (a run or a runs mapping), or unreadable."""
        if type(index) is not int or not 0 <= index < len(self.built):
            raise SnapshotUnreadable(f"node reference {index!r} is not an earlier node")
        node = self.built[index]
        if not isinstance(node, kind):
            raise SnapshotUnreadable(f"node {index} is not a {kind.__name__}")
        return node


def _one_of(values: tuple[Any, ...], doc: Any) -> Any:
    """``doc`` if it is one of a Literal's values, else unreadable."""
    if doc not in values:
        raise SnapshotUnreadable(f"{doc!r} is not one of {values}")
    return doc


def _typed(kind: type, doc: Any) -> Any:
    """``doc`` if JSON decoded it as ``kind`` (an int is a float too), else unreadable."""
    if kind is float and type(doc) is int:
        return float(doc)
    if type(doc) is not kind:
        raise SnapshotUnreadable(f"{doc!r} is not a {kind.__name__}")
    return doc


def encode_state(state: SagaState) -> dict[str, Any]:
    """A JSON document of ``state`` (its definition named only by hash, by the caller)."""
    encoder = _Encoder()
    fields = encoder.record(state)
    return {"nodes": encoder.nodes, "state": fields}


#: What a corrupt document can raise while decoding, besides our own error.
_DECODE_ERRORS: Final[tuple[type[Exception], ...]] = (
    KeyError, TypeError, ValueError, AttributeError, InvalidOperation, ValidationError,
    RecursionError,
)


def decode_state(doc: Any, definition: SagaDefinition) -> SagaState:
    """The state a document of :func:`encode_state` holds, running ``definition``;
    :class:`SnapshotUnreadable` if it does not decode."""
    try:
        decoder = _Decoder(_typed(list, _typed(dict, doc)["nodes"]))
        state: SagaState = decoder.record(SagaState, _typed(dict, doc["state"]),
                                          definition=definition)
        return state
    except SnapshotUnreadable:
        raise
    except _DECODE_ERRORS as exc:
        raise SnapshotUnreadable(f"snapshot does not decode: {type(exc).__name__}: {exc}") from exc
