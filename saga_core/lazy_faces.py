"""Package faces that import on first use (PEP 562): a face (``__init__.py``) names its public
parts with ordinary ``from … import …`` statements under ``if TYPE_CHECKING:`` (what type
checkers and readers see), and :func:`lazy_face` makes each name import its module when it is
first asked for. Importing one module of a package (``saga_core.errors``, say) then no longer
imports every module its face names, which a command that needs three of them paid for on
each call. The import statements stay the one list of what the face exports: the runtime
reads them from the face's own source."""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Callable
from pathlib import Path


def face_sources(init_file: str) -> dict[str, tuple[str, str]]:
    """Every name a face imports under ``if TYPE_CHECKING:``, with its module and the name
    there: ``{exported: (module, attribute)}``."""
    tree = ast.parse(Path(init_file).read_text(encoding="utf-8"))
    sources: dict[str, tuple[str, str]] = {}
    for node in tree.body:
        if not (isinstance(node, ast.If) and isinstance(node.test, ast.Name)
                and node.test.id == "TYPE_CHECKING"):
            continue
        for statement in node.body:
            if isinstance(statement, ast.ImportFrom) and statement.module and not statement.level:
                for alias in statement.names:
                    sources[alias.asname or alias.name] = (statement.module, alias.name)
    return sources


def lazy_face(
    package: str, init_file: str
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a face whose exports are imported on first use;
    an exported name, once imported, becomes an ordinary attribute of the package.

    A name that is also a module of the package (``saga_core.canonical_json``, the function,
    beside ``saga_core/canonical_json.py``) is bound at once: importing that module sets the
    package's attribute of that name to the module, which would hide the lazy export."""
    sources = face_sources(init_file)
    face = sys.modules[package]
    here = Path(init_file).parent
    for name, (module, attribute) in sources.items():
        if (here / f"{name}.py").exists() or (here / name / "__init__.py").exists():
            setattr(face, name, getattr(importlib.import_module(module), attribute))

    def get(name: str) -> object:
        try:
            module, attribute = sources[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = getattr(importlib.import_module(module), attribute)
        setattr(face, name, value)
        return value

    def names() -> list[str]:
        return sorted(set(sources) | set(vars(face)))

    return get, names
