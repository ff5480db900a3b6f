"""Reading untrusted YAML and JSON text with bounded cost: the one loader for documents.

PyYAML's safe loader refuses arbitrary objects but not amplification: an alias repeats a
whole node without copying it, and validation and hashing then walk every repetition, so
3.6 KB of nested aliases became 3.4 GB. :class:`BoundedYamlLoader` counts, while it
composes, every node a document expands to (an alias counts as the whole node it repeats)
and how deeply collections nest, and stops at :data:`~saga_core.limits.YAML_NODES` and
:data:`~saga_core.limits.JSON_DEPTH` before anything is constructed. JSON text has no
aliases; its nesting is scanned before a (recursive) decoder sees it. Both check the
text's size first.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import yaml
from yaml.events import AliasEvent, MappingStartEvent, SequenceStartEvent
from yaml.nodes import Node

from saga_core.errors import ErrorKind, SagaError
from saga_core.limits import JSON_DEPTH, YAML_NODES, Limit, json_text_depth, measure_text

Syntax = Literal["yaml", "json"]


class MalformedDocument(SagaError):
    """A document's text is not valid YAML or JSON; the message says where."""

    kind = ErrorKind.INVALID_INPUT


class BoundedYamlLoader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses, while composing, a document expanding to more
    than ``yaml_nodes`` nodes (aliases counted as what they repeat) or nesting more than
    ``json_depth`` collections."""

    def __init__(self, stream: str | bytes, what: str = "YAML document") -> None:
        super().__init__(stream)
        self.what = what
        self.expanded_nodes = 0
        self._depth = 0
        # The expanded size of every composed node, so an alias adds what it repeats.
        self._weights: dict[int, int] = {}

    def _count(self, nodes: int) -> None:
        self.expanded_nodes += nodes
        YAML_NODES.check(f"{self.what} (aliases expanded)", self.expanded_nodes)

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        """Compose one node, counting it (or, for an alias, what it repeats) first."""
        if self.check_event(AliasEvent):
            event: AliasEvent = self.peek_event()  # type: ignore[no-untyped-call]
            anchored = self.anchors.get(event.anchor)
            if anchored is not None:  # an unknown anchor is PyYAML's own error
                self._count(self._weights.get(id(anchored), 1))
            return super().compose_node(parent, index)
        collection = self.check_event(SequenceStartEvent, MappingStartEvent)
        if collection:
            self._depth += 1
            JSON_DEPTH.check(f"{self.what} nesting", self._depth)
        before = self.expanded_nodes
        self._count(1)
        node: Node | None = super().compose_node(parent, index)
        if collection:
            self._depth -= 1
        self._weights[id(node)] = self.expanded_nodes - before
        return node


def load_document(text: str | bytes, what: str, limit: Limit, syntax: Syntax) -> Any:
    """Parse a YAML or JSON document of at most ``limit`` bytes with bounded cost.

    Raises :class:`~saga_core.limits.LimitExceeded` for a text too big, too deep or (YAML)
    expanding to too many nodes, and :class:`MalformedDocument` for one that does not parse.
    """
    measure_text(what, text, limit)
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedDocument(f"{what} is not UTF-8 text: {exc}") from None
    if syntax == "json":
        json_text_depth(what, text)
        try:
            return json.loads(text)
        except ValueError as exc:  # JSONDecodeError, or an integer of too many digits
            raise MalformedDocument(f"{what} is not JSON: {exc}") from None
    loader = BoundedYamlLoader(text, what)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as exc:
        raise MalformedDocument(f"{what} is not YAML: {exc}") from None
    except ValueError as exc:  # an integer of too many digits
        raise MalformedDocument(f"{what} is not YAML: {exc}") from None
    finally:
        loader.dispose()
