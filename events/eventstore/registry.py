"""Event schemas: pydantic models by type name, schema versions, and chained upcasters."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from pydantic import BaseModel, ValidationError

from events.errors import (
    EventDecodeError,
    RegistryConflict,
    UnknownEventType,
    UnknownSchemaVersion,
    UnregisteredEventModel,
)
from events.eventstore.model import NewEvent, RecordedEvent, ScannedEvent
from events.eventstore.prepare import MAX_TYPE_LENGTH, check_name
from saga_core.field_errors import field_errors

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]
"""Turns the data of schema version n into the data of version n + 1."""


@dataclass(frozen=True)
class EventSchema:
    """A registered event type: its model, name and current schema version."""

    model: type[BaseModel]
    type_name: str
    schema_version: int


class EventRegistry:
    """Maps type names to pydantic models and upcasts stored data on the way out.

    Stored events are never rewritten: an event recorded at version 1 is decoded by running
    the upcasters (type, 1) -> 2 -> ... -> current before model validation.
    """

    def __init__(self) -> None:
        self._by_name: dict[str, EventSchema] = {}
        self._by_model: dict[type[BaseModel], EventSchema] = {}
        self._upcasters: dict[tuple[str, int], Upcaster] = {}

    def register(
        self, model: type[BaseModel], type_name: str | None = None, schema_version: int = 1
    ) -> type[BaseModel]:
        """Register ``model`` as ``type_name`` (default: class name) at its current version."""
        name = check_name("event type name", type_name or model.__name__, MAX_TYPE_LENGTH)
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise RegistryConflict(f"{name}: {model!r} is not a pydantic model class")
        if isinstance(schema_version, bool) or schema_version < 1:
            raise RegistryConflict(f"{name}: schema_version must be an int >= 1")
        schema = EventSchema(model, name, schema_version)
        for existing in (self._by_name.get(name), self._by_model.get(model)):
            if existing is not None and existing != schema:
                raise RegistryConflict(
                    f"{name}: already registered as {existing.type_name} "
                    f"v{existing.schema_version} for {existing.model.__name__}"
                )
        self._by_name[name] = schema
        self._by_model[model] = schema
        return model

    def register_upcaster(self, type_name: str, from_version: int, upcaster: Upcaster) -> None:
        """Register how data of ``type_name`` at ``from_version`` becomes ``from_version + 1``."""
        key = (type_name, from_version)
        if key in self._upcasters and self._upcasters[key] is not upcaster:
            raise RegistryConflict(f"{type_name}: an upcaster from v{from_version} exists")
        self._upcasters[key] = upcaster

    def upcaster(self, type_name: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
        """Decorator form of :meth:`register_upcaster`; returns the function unchanged."""

        def attach(fn: Upcaster) -> Upcaster:
            self.register_upcaster(type_name, from_version, fn)
            return fn

        return attach

    def schema_for(self, type_name: str) -> EventSchema:
        """The registered schema of a type name, or UnknownEventType."""
        try:
            return self._by_name[type_name]
        except KeyError:
            raise UnknownEventType(f"no model registered for event type {type_name!r}") from None

    def to_new_event(
        self,
        event: BaseModel,
        event_id: UUID | str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> NewEvent:
        """The NewEvent for a registered model instance (data as JSON-mode dump)."""
        schema = self._by_model.get(type(event))
        if schema is None:
            raise UnregisteredEventModel(
                f"{type(event).__name__} is not a registered event model; register it first"
            )
        return NewEvent(
            type=schema.type_name,
            data=event.model_dump(mode="json"),
            event_id=event_id,
            metadata=metadata,
            schema_version=schema.schema_version,
        )

    def upcast(self, type_name: str, schema_version: int, data: dict[str, Any]) -> dict[str, Any]:
        """``data`` brought from ``schema_version`` to the type's current version (``data``
        itself when it is current: callers must not mutate it)."""
        schema = self.schema_for(type_name)
        if schema_version == schema.schema_version:
            return data  # current already: nothing to bring forward (and nothing to copy)
        if schema_version > schema.schema_version or schema_version < 1:
            raise UnknownSchemaVersion(
                f"{type_name} v{schema_version} is not known (current v{schema.schema_version})"
            )
        current = dict(data)
        for version in range(schema_version, schema.schema_version):
            step = self._upcasters.get((type_name, version))
            if step is None:
                raise UnknownSchemaVersion(
                    f"{type_name}: no upcaster from v{version} to v{version + 1}"
                )
            try:
                current = step(current)
            except Exception as exc:  # an upcaster is user code; any failure is a decode error
                raise EventDecodeError(
                    f"{type_name}: upcaster v{version}->v{version + 1} failed: {exc!r}"
                ) from exc
        return current

    def decode(self, recorded: RecordedEvent) -> BaseModel:
        """The model instance for a recorded event, upcast first; typed errors, never crashes."""
        schema = self.schema_for(recorded.type)
        data = self.upcast(recorded.type, recorded.schema_version, recorded.data)
        try:
            return schema.model.model_validate(data)
        except ValidationError as exc:
            raise _undecodable(recorded, exc) from exc

    def decode_scanned(self, scanned: ScannedEvent) -> BaseModel:
        """:meth:`decode` for a scanned event, whose data is still JSON text: at the current
        schema version it is validated straight from the text (about twice as fast as
        parsing and then validating); older versions are parsed and upcast first."""
        schema = self.schema_for(scanned.type)
        try:
            if scanned.schema_version == schema.schema_version:
                return schema.model.model_validate_json(scanned.data_json)
            data = json.loads(scanned.data_json)
            if not isinstance(data, dict):
                raise EventDecodeError(f"{_where(scanned)}: data is not a JSON object")
            upcast = self.upcast(scanned.type, scanned.schema_version, data)
            return schema.model.model_validate(upcast)
        except ValidationError as exc:
            raise _undecodable(scanned, exc) from exc
        except ValueError as exc:  # text that is not JSON at all
            raise EventDecodeError(f"{_where(scanned)}: data is not JSON: {exc}") from exc


def _where(event: RecordedEvent | ScannedEvent) -> str:
    return f"{event.type} v{event.schema_version} ({event.stream_id}@{event.stream_version})"


def _undecodable(event: RecordedEvent | ScannedEvent, exc: ValidationError) -> EventDecodeError:
    # Never str(exc): pydantic's text quotes every value, and an event holds a saga's data.
    problems = "; ".join(f"{e.path or 'data'}: [{e.rule}] {e.message}" for e in field_errors(exc))
    return EventDecodeError(f"{_where(event)} does not validate: {problems}")
