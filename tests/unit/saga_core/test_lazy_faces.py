"""The faces of saga_core, events and projections import on first use
(``saga_core.lazy_faces``) and still export exactly what they name."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

from saga_core.lazy_faces import face_sources

LAZY_FACES = ("saga_core", "events", "projections")


@pytest.mark.parametrize("package", LAZY_FACES)
def test_every_exported_name_is_the_object_its_module_defines(package: str) -> None:
    face = importlib.import_module(package)
    assert face.__file__ is not None
    sources = face_sources(face.__file__)
    # the face's __all__ and its imports are one list
    assert sorted(face.__all__) == sorted(sources)
    for name, (module, attribute) in sources.items():
        value = getattr(face, name)
        assert value is getattr(importlib.import_module(module), attribute), name
        assert not isinstance(value, types.ModuleType), name


def test_an_export_named_like_its_module_is_the_export_not_the_module() -> None:
    importlib.import_module("saga_core.canonical_json")  # the module, imported first
    from saga_core import canonical_json

    assert canonical_json is sys.modules["saga_core.canonical_json"].canonical_json
    assert canonical_json({"b": 1, "a": 2}) == '{"a":2,"b":1}'


def test_an_unknown_name_is_an_attribute_error_naming_it() -> None:
    import saga_core

    with pytest.raises(AttributeError, match="'saga_core' has no attribute 'no_such_name'"):
        _ = saga_core.no_such_name  # type: ignore[attr-defined]


def test_importing_one_module_of_the_core_does_not_import_the_rest() -> None:
    # given a fresh interpreter, when it imports the core's errors and the events' errors
    probe = ("import json, sys, saga_core.errors, events.errors; "
             "print(json.dumps(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True, cwd=Path(__file__).resolve().parents[3])
    loaded = set(json.loads(done.stdout))
    # then the engine, the definitions and the PostgreSQL store were not imported
    assert {"saga_core.engine.decide", "saga_core.definitions.validation",
            "events.eventstore.postgres", "psycopg"}.isdisjoint(loaded)
