"""The rules between rooms (docs/architecture.md), checked on every import in the source.

Every import counts, at module level, inside a function, or behind ``TYPE_CHECKING``: a
type-only import is still a dependency a reader has to follow, and a local one hides it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Each room and the rooms it may import (itself included). Arrows point one way.
MAY_IMPORT: dict[str, set[str]] = {
    "saga_core": {"saga_core"},
    "events": {"saga_core", "events"},
    "application": {"saga_core", "events", "application"},
    "workers": {"saga_core", "events", "application", "workers"},
    "projections": {"saga_core", "events", "projections"},
    "sagafleet": {"saga_core", "events", "application", "workers", "projections", "sagafleet"},
}

#: What the pure core may import from outside the standard library.
PURE_THIRD_PARTY = {"pydantic", "pydantic_core", "jsonschema", "yaml", "idna", "typing_extensions"}

#: Modules only the composition root may import (I/O, brokers, web servers).
IO_PACKAGES = {"psycopg", "psycopg_pool", "redis", "celery", "kombu", "starlette", "uvicorn",
               "prometheus_client", "sentry_sdk", "opentelemetry", "mcp", "httpx", "requests"}


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for room in MAY_IMPORT:
        for path in sorted((ROOT / room).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(path: Path) -> Iterator[str]:
    """Every module ``path`` imports (absolute imports: the project uses no relative ones)."""
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: a relative import"
            if node.module is None:
                continue
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                yield submodule if submodule in MODULES else node.module
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name


def _owner(name: str) -> str | None:
    """The project module ``name`` resolves to (a name inside a module: that module)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        targets = {_owner(name) for name in _imports(path)}
        graph[module] = {t for t in targets if t is not None and t != module}
    return graph


def test_every_import_points_down_the_rooms() -> None:
    # given every import of every module
    wrong = [
        f"{module} imports {target}"
        for module, targets in _graph().items()
        for target in sorted(targets)
        if target.split(".")[0] not in MAY_IMPORT[module.split(".")[0]]
    ]
    # then none points up or sideways (workers and projections never import each other)
    assert wrong == []


def test_the_pure_core_imports_no_io() -> None:
    # given saga_core's imports outside the project
    outside = {
        f"{module} imports {name}"
        for module, path in MODULES.items() if module.startswith("saga_core")
        for name in _imports(path)
        if name.split(".")[0] not in MAY_IMPORT
        and name.split(".")[0] not in PURE_THIRD_PARTY
        and not _is_stdlib(name.split(".")[0])
    }
    # then there is none: no database, broker, clock source or web server in the core
    assert outside == set()


def test_only_the_rooms_with_io_import_io_packages() -> None:
    # the pure core and the projections' pure derivations never reach a driver
    pure = [m for m in MODULES if m.startswith("saga_core")]
    found = [f"{m} imports {n}" for m in pure for n in _imports(MODULES[m])
             if n.split(".")[0] in IO_PACKAGES]
    assert found == []


def test_there_is_no_import_circle() -> None:
    # given the import graph of every module (type-only and local imports included)
    graph = _graph()
    # when its strongly connected components are found
    circles = [sorted(c) for c in _components(graph) if len(c) > 1]
    # then every one is a single module
    assert circles == []


#: The rooms whose every package face is a map of its modules (the composition root's
#: packages, the console, the gateway and the test kit, have faces that export instead).
MAPPED_ROOMS = {"saga_core", "events", "application", "workers"}


def test_every_sub_package_names_each_of_its_modules_in_its_face() -> None:
    # given each package's __init__ (its face) and the modules beside it
    missing = []
    for module, path in MODULES.items():
        if path.name != "__init__.py" or module.split(".")[0] not in MAPPED_ROOMS \
                or module in MAPPED_ROOMS - {"application", "workers"}:
            continue
        face = ast.get_docstring(ast.parse(path.read_text("utf-8"))) or ""
        for child in sorted(MODULES):
            if child.rpartition(".")[0] == module and not re.search(
                    rf"(?<![\w.]){re.escape(child)}(?![\w])", face):
                missing.append(child)
    # then the face's map names every one of them
    assert missing == []


def _is_stdlib(top: str) -> bool:
    import sys

    return top in sys.stdlib_module_names or top == "__future__"


def _components(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's strongly connected components, iteratively (the graph is a few hundred nodes)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[set[str]] = []
    counter = 0
    for root, edges in graph.items():
        if root in index:
            continue
        work = [(root, iter(sorted(edges)))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: set[str] = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                found.append(component)
    return found


@pytest.mark.parametrize("room", sorted(MAY_IMPORT))
def test_each_room_has_a_face_that_says_what_it_holds(room: str) -> None:
    face = ast.get_docstring(ast.parse((ROOT / room / "__init__.py").read_text("utf-8")))
    assert face and len(face.split()) >= 5, f"{room}/__init__.py says nothing of what it holds"
