"""The last line of defence by value: a known secret found where it must not be is replaced.

Secret inputs are kept out of the log by declaration (placeholders,
:mod:`saga_core.definitions.secret_flow`);
this module catches what declaration cannot: a provider that echoes the card token into its
receipt or its error, a person who pastes it into a reason, a value given in the secret
field and again in an ordinary one. Given the values a saga keeps secret,
:class:`SecretNeedles` holds every form they take in text; :func:`scrub_text`,
:func:`scrub_document` and :func:`scrub_event` replace each occurrence with
:data:`SCRUBBED` and say how many they replaced, so the writer counts them.

The forms of a value: each string in it (a secret may be an object: each of its strings),
each number in it as decimal text, and of each the escapes it takes inside JSON text
(``\\"``, ``\\u00e9``), HTML (``&amp;``) and a URL (``%2F``), so a value quoted inside a
larger document is found too.

How long a value must be to be looked for, and why:

* **a whole string** (a document's string that *is* the value): :data:`MIN_WHOLE` = 4
  characters. Equality with a secret is a strong sign at any length; below 4, ordinary
  short strings (``"EUR"``, ``"1A"``) would be hit.
* **inside a text meant for people** (an error message, a log line, a reason):
  :data:`MIN_IN_TEXT` = 4. A false hit only hides a few characters from a reader, while
  "invalid PIN 98765" is the classic leak.
* **inside a string of a recorded document** (an event, a dead letter, an answer):
  :data:`MIN_IN_DOCUMENT` = 8. Such strings are facts — resource ids, operation keys and
  hashes (64 hex digits hold a given 4-digit run about once in 700 hashes; an 8-character one
  about once in 70 million), times — and a false hit would alter a fact the hash chain then
  keeps forever. Card tokens, keys and IBANs are longer than that; a shorter secret is
  still caught where it is a whole value.

Numbers inside documents are never replaced (a number field equal to a numeric secret may
be any amount, and must stay a number); a numeric secret is found where it appears as text.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar
from urllib.parse import quote

from saga_core.engine.events import SagaEvent

SCRUBBED: Final = "[secret]"
"""What a secret value found where it must not be is replaced with."""

MIN_WHOLE: Final = 4
"""Shortest secret replaced where a document's whole string equals it."""
MIN_IN_TEXT: Final = 4
"""Shortest secret replaced inside a text meant for people."""
MIN_IN_DOCUMENT: Final = 8
"""Shortest secret replaced inside a string of a recorded document."""

T = TypeVar("T")
E = TypeVar("E", bound=SagaEvent)


@dataclass(frozen=True)
class Scrubbed(Generic[T]):
    """What a scrub returned, and how many occurrences of a secret it replaced."""

    value: T
    count: int


@dataclass(frozen=True)
class SecretNeedles:
    """Every form the secret values of a saga (or of a message) take in text, longest first
    (so a longer form is replaced before a shorter one inside it)."""

    forms: tuple[str, ...] = ()
    # Each form as it appears inside JSON text: a document is serialised once and searched
    # for these before it is walked (JSON escapes character by character, so a form inside
    # any string of the document is this inside the document's JSON).
    in_json: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "in_json", tuple(
            {json.dumps(form, ensure_ascii=False)[1:-1] for form in self.forms}))

    @classmethod
    def of(cls, values: Iterable[Any]) -> SecretNeedles:
        """The needles of ``values`` (any JSON values: strings, numbers, objects, lists)."""
        found: set[str] = set()
        for value in values:
            for text in _texts(value):
                found.update(_forms(text))
        return cls(_longest_first(f for f in found if len(f) >= min(MIN_WHOLE, MIN_IN_TEXT)))

    def __bool__(self) -> bool:
        return bool(self.forms)

    def __or__(self, other: SecretNeedles) -> SecretNeedles:
        if not other.forms or other.forms == self.forms:
            return self
        if not self.forms:
            return other
        return SecretNeedles(_longest_first(set(self.forms) | set(other.forms)))

    def found_in_json(self, value: Any) -> bool:
        """Whether any form may occur in ``value`` (False: certainly none does)."""
        try:
            text = json.dumps(value, default=str, ensure_ascii=False)
        except (TypeError, ValueError, RecursionError):
            return True  # cannot tell: walk it
        return self.found_in_json_text(text)

    def found_in_json_text(self, text: str) -> bool:
        """Whether any form may occur in the document whose JSON is ``text``."""
        return any(form in text for form in self.in_json)


def _longest_first(forms: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(forms, key=lambda f: (-len(f), f)))


NO_NEEDLES: Final = SecretNeedles()
"""Nothing to look for (a saga without secret inputs)."""


def scrub_text(text: str, needles: SecretNeedles) -> Scrubbed[str]:
    """``text`` (meant for people) with every form of a secret of :data:`MIN_IN_TEXT`
    characters or more replaced."""
    return _replaced(text, needles, MIN_IN_TEXT)


def scrub_document(value: Any, needles: SecretNeedles) -> Scrubbed[Any]:
    """``value`` (JSON-like: dicts, lists, strings, numbers) with every string that is a
    secret (:data:`MIN_WHOLE`) or holds one (:data:`MIN_IN_DOCUMENT`) scrubbed; the same
    object when nothing was found."""
    if not needles or not needles.found_in_json(value):
        return Scrubbed(value, 0)
    counter = [0]
    scrubbed = _walk(value, needles, counter)
    return Scrubbed(scrubbed if counter[0] else value, counter[0])


def scrub_event(event: E, needles: SecretNeedles) -> Scrubbed[E]:
    """``event`` with its strings scrubbed as a document's are (the same event when nothing
    was found). Times, numbers and enums are not strings here and are left alone."""
    # Most events hold no secret: pydantic's JSON (escaped as json.dumps escapes, character
    # by character) tells so at a fraction of a walk's cost.
    if not needles or not needles.found_in_json_text(event.model_dump_json()):
        return Scrubbed(event, 0)
    found = scrub_document(event.model_dump(), needles)
    if not found.count:
        return Scrubbed(event, 0)
    return Scrubbed(type(event).model_validate(found.value), found.count)


def _walk(value: Any, needles: SecretNeedles, counter: list[int]) -> Any:
    # type() is str, not isinstance: an enum member (a StrEnum) is a name, never a secret.
    if type(value) is str:
        if len(value) >= MIN_WHOLE and value in needles.forms:
            counter[0] += 1
            return SCRUBBED
        found = _replaced(value, needles, MIN_IN_DOCUMENT)
        counter[0] += found.count
        return found.value
    if isinstance(value, dict):
        return {key: _walk(item, needles, counter) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_walk(item, needles, counter) for item in value]
    return value


def _replaced(text: str, needles: SecretNeedles, shortest: int) -> Scrubbed[str]:
    count = 0
    for form in needles.forms:
        if len(form) < shortest:
            break  # longest first: every form after this one is shorter still
        if form in text:
            count += text.count(form)
            text = text.replace(form, SCRUBBED)
    return Scrubbed(text, count)


def _texts(value: Any) -> Iterator[str]:
    """The strings of a secret value, and its numbers as decimal text."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int | float):
        yield json.dumps(value)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _texts(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _texts(item)


def _forms(text: str) -> set[str]:
    """``text`` as it is, and as JSON text, HTML and a URL would carry it."""
    return {
        text,
        json.dumps(text)[1:-1],
        json.dumps(text, ensure_ascii=False)[1:-1],
        html.escape(text, quote=True),
        quote(text, safe=""),
    }
