"""Argument templates: JSON values whose strings may reference the saga input and receipts.

Syntax (the orchestrator resolves templates; a model never does):

* A template is any JSON value. Dicts and lists are walked recursively; numbers, booleans and
  null are kept as they are.
* A string that is *exactly* one reference, ``"${input.amount}"``, is replaced by the referenced
  value **keeping its type** (a number stays a number, a dict stays a dict).
* A reference embedded in a longer string, ``"hold ${steps.hold_hotel.receipt.resource_id}"``,
  is interpolated as text: strings as-is, other values as canonical JSON.
* ``$${`` is an escaped literal ``${``.
* References (dotted names of ``[A-Za-z_][A-Za-z0-9_]*`` segments):

  - ``input.<field>[.<key>...]`` -- a saga input field (deeper segments index into dicts);
  - ``steps.<step_id>.receipt.<field>`` -- a forward receipt of an earlier step;
  - ``receipt.<field>`` -- compensations only: the compensated step's own forward receipt;
  - ``saga.id`` / ``saga.tenant`` -- the saga's identity.

  Receipt fields are ``resource_id``, ``version``, ``status`` or a key of ``Receipt.fields``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Final

from saga_core.canonical_json import canonical_json
from saga_core.contracts import Receipt
from saga_core.errors import TemplateError

_SEGMENT = r"[A-Za-z_][A-Za-z0-9_]*"
_REF = re.compile(r"\$\{(" + _SEGMENT + r"(?:\." + _SEGMENT + r")*)\}")
_WHOLE = re.compile(r"\$\{(" + _SEGMENT + r"(?:\." + _SEGMENT + r")*)\}\Z")
_ESCAPE = "$${"
_PLACEHOLDER = "\x00ESCAPED\x00"


@dataclass(frozen=True)
class Reference:
    """One parsed ``${...}`` reference: its root (input, steps, receipt, saga) and path."""

    text: str
    root: str
    path: tuple[str, ...]

    @property
    def step_id(self) -> str | None:
        """The referenced step for ``steps.<id>.receipt.<field>``, else None."""
        return self.path[0] if self.root == "steps" and self.path else None

    @property
    def receipt_field(self) -> str | None:
        """The receipt field for ``steps...receipt.<f>`` or ``receipt.<f>``, else None."""
        if self.root == "steps" and len(self.path) == 3 and self.path[1] == "receipt":
            return self.path[2]
        if self.root == "receipt" and len(self.path) == 1:
            return self.path[0]
        return None


def parse_reference(text: str) -> Reference:
    """Parse the inside of ``${...}``; raise :class:`TemplateError` on an unknown shape."""
    root, *rest = text.split(".")
    path = tuple(rest)
    shapes_ok = (
        (root == "input" and len(path) >= 1)
        or (root == "steps" and len(path) == 3 and path[1] == "receipt")
        or (root == "receipt" and len(path) == 1)
        or (root == "saga" and path in (("id",), ("tenant",)))
    )
    if not shapes_ok:
        raise TemplateError(
            "${" + text + "}",
            "expected input.<field>, steps.<step>.receipt.<field>, receipt.<field>, "
            "saga.id or saga.tenant",
        )
    return Reference(text=text, root=root, path=path)


def _check_string(value: str) -> None:
    stripped = _REF.sub("", value.replace(_ESCAPE, ""))
    if "${" in stripped:
        raise TemplateError(value, "unterminated or malformed ${...} reference")


def references(template: Any) -> list[Reference]:
    """Every reference in a template, in document order; raises on malformed ones."""
    found: list[Reference] = []
    if isinstance(template, str):
        _check_string(template)
        for match in _REF.finditer(template.replace(_ESCAPE, _PLACEHOLDER)):
            found.append(parse_reference(match.group(1)))
    elif isinstance(template, dict):
        for value in template.values():
            found.extend(references(value))
    elif isinstance(template, list):
        for value in template:
            found.extend(references(value))
    return found


@dataclass(frozen=True)
class TemplateContext:
    """What references resolve against: input, forward receipts, own receipt, saga identity."""

    saga_id: str
    tenant: str = ""
    input: dict[str, Any] = field(default_factory=dict)
    receipts: dict[str, Receipt] = field(default_factory=dict)
    own_receipt: Receipt | None = None

    def lookup(self, ref: Reference) -> Any:
        """The value of one reference; raises :class:`TemplateError` when it is missing."""
        # Every resolution of every template comes here (decide, claims, gate checks): the
        # error's text is built only when there is an error.
        if ref.root == "saga":
            return self.saga_id if ref.path == ("id",) else self.tenant
        if ref.root == "input":
            value: Any = self.input
            for segment in ref.path:
                if not isinstance(value, dict) or segment not in value:
                    raise TemplateError(_where(ref), f"input has no {segment!r}")
                value = value[segment]
            return value
        if ref.root == "receipt":
            receipt = self.own_receipt
            if receipt is None:
                raise TemplateError(_where(ref), "no forward receipt to compensate")
        else:
            step_id = ref.path[0]
            if step_id not in self.receipts:
                raise TemplateError(_where(ref), f"step {step_id!r} has no receipt yet")
            receipt = self.receipts[step_id]
        name = ref.receipt_field or ""
        if not receipt.has(name):
            raise TemplateError(_where(ref), f"receipt has no field {name!r}")
        return receipt.get(name)


def _where(ref: Reference) -> str:
    """The reference as written in a template, for an error."""
    return "${" + ref.text + "}"


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else canonical_json(value)


@lru_cache(maxsize=4096)
def _compiled(template: str) -> Reference | tuple[str | Reference, ...]:
    """A template string parsed once: one whole reference (its value keeps its type), or
    the literal text and references it interpolates, in order. Raises on malformed ones."""
    _check_string(template)
    whole = _WHOLE.match(template)
    if whole:
        return parse_reference(whole.group(1))
    # _REF.split alternates literal text and the captured reference names.
    pieces = _REF.split(template.replace(_ESCAPE, _PLACEHOLDER))
    return tuple(
        parse_reference(piece) if odd else piece.replace(_PLACEHOLDER, "${")
        for odd, piece in ((index % 2 == 1, piece) for index, piece in enumerate(pieces))
        if odd or piece
    )


def whole_reference(template: Any) -> Reference | None:
    """The reference ``template`` is exactly (``"${input.card_token}"``: its value keeps its
    type when resolved), or None for anything else; raises on a malformed reference."""
    if not isinstance(template, str):
        return None
    compiled = _compiled(template)
    return compiled if isinstance(compiled, Reference) else None


def resolve_template(template: Any, context: TemplateContext) -> Any:
    """Resolve a template into a plain JSON value (see the module docstring for the syntax)."""
    if isinstance(template, str):
        compiled = _compiled(template)
        if isinstance(compiled, Reference):
            return context.lookup(compiled)
        return "".join(
            piece if isinstance(piece, str) else _as_text(context.lookup(piece))
            for piece in compiled
        )
    if isinstance(template, dict):
        return {key: resolve_template(value, context) for key, value in template.items()}
    if isinstance(template, list):
        return [resolve_template(value, context) for value in template]
    return template


#: The receipt fields that are its attributes (``Receipt.get``); any other is in ``fields``.
_RECEIPT_ATTRIBUTES: Final = frozenset({"resource_id", "version", "status"})

#: A template resolved against a context: what :func:`compile_template` returns.
Resolver = Callable[[TemplateContext], Any]


def compile_template(template: Any) -> Resolver:
    """:func:`resolve_template` of ``template`` as a function of the context, walked and
    parsed once: ``compile_template(t)(context)`` returns what ``resolve_template(t,
    context)`` returns (equal values in fresh containers) and raises the same
    :class:`TemplateError`, in the same order, for a missing or malformed reference. The
    engine resolves a step's templates several times a commit (decide, the gate checks, a
    claim); ``resolve_template`` stays the reference (tests/unit/saga_core/definitions/
    test_compiled_templates.py holds the two equal)."""
    if isinstance(template, str):
        try:
            compiled = _compiled(template)
        except TemplateError:
            return _raiser(template)  # raised where the walk would meet it, not before
        if isinstance(compiled, Reference):
            return _reader(compiled)
        texts = [piece for piece in compiled if isinstance(piece, str)]
        if len(texts) == len(compiled):  # no reference: the same text every time
            text = "".join(texts)
            return lambda context: text
        pieces = tuple(piece if isinstance(piece, str) else _reader(piece) for piece in compiled)
        return lambda context: "".join(
            piece if isinstance(piece, str) else _as_text(piece(context)) for piece in pieces)
    if isinstance(template, dict):
        members = tuple((key, compile_template(value)) for key, value in template.items())
        return lambda context: {key: resolve(context) for key, resolve in members}
    if isinstance(template, list):
        items = tuple(compile_template(value) for value in template)
        return lambda context: [resolve(context) for resolve in items]
    return lambda context: template


def _raiser(template: str) -> Resolver:
    def resolve(context: TemplateContext) -> Any:
        return _compiled(template)  # raises its TemplateError afresh (failures are not cached)
    return resolve


def _reader(ref: Reference) -> Resolver:
    """``context.lookup(ref)`` for one reference, its common shapes without the dispatch
    (anything unusual, and every error, goes through ``lookup`` itself)."""
    lookup = TemplateContext.lookup
    if ref.root == "input" and len(ref.path) == 1:
        (name,) = ref.path

        def read_input(context: TemplateContext) -> Any:
            data = context.input
            if type(data) is dict and name in data:
                return data[name]
            return lookup(context, ref)
        return read_input
    field_name = ref.receipt_field
    if field_name is not None:
        step_id = ref.step_id
        attribute = field_name in _RECEIPT_ATTRIBUTES

        def read_receipt(context: TemplateContext) -> Any:
            receipt = (context.own_receipt if step_id is None
                       else context.receipts.get(step_id))
            if type(receipt) is Receipt:
                if attribute:
                    return getattr(receipt, field_name)
                fields = receipt.fields
                if field_name in fields:
                    return fields[field_name]
            return lookup(context, ref)
        return read_receipt
    return lambda context: lookup(context, ref)
