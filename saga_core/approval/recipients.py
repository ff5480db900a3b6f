"""Reading an argument as email recipients, the standard way, for a recipient gate.

A recipient gate (:class:`~saga_core.approval.risk_gates.ExternalRecipient`) lets a call through
without a
person only when *every* address the argument names is provably internal, so it must see
every address a mailer would: :func:`parse_recipients` reads a string as an RFC 5322
address list (several addresses, display names, quoted strings, comments) with the standard
library's parser, or a list of such strings, and returns ``None`` — "not proven to be
addresses", hence outside — for anything it cannot read completely and unambiguously.

It answers ``None`` when:

* the value is not a non-empty string or a non-empty list of them (a number, a mapping, a
  nested list, an empty list or string, more than :data:`MAX_RECIPIENT_TEXTS` strings or a
  string longer than :data:`MAX_RECIPIENT_CHARS`);
* a string holds a control or invisible formatting character (NUL, CR, LF, tab, zero-width
  or bidi controls: a header splitter or a spoof), an RFC 2047 encoded word (``=?``), or
  an empty list element (a leading or trailing comma);
* ``email.headerregistry`` reports any defect or fails, or a group (``team: a@x;``), a
  route (``<@relay:a@x>``) or leftover text is present; and ``email.utils.getaddresses``
  (``strict=True`` where this Python has it, CVE-2023-27043) does not find exactly the same
  addresses — two parsers must agree, so a parser bug of one Python version cannot open
  the gate on its own;
* an address has a quoted local part, or one with ``%`` or ``!`` (old relay syntaxes that
  an internal mail host may forward outside), or a non-ASCII one;
* its domain is a literal (``[127.0.0.1]``), has an empty label (a trailing dot), is not a
  valid host name, or is an internationalised name that is not in its one canonical form:
  IDNA must map it to ASCII and back to itself, so full-width letters, ``ß`` and other
  characters that IDNA 2003 and 2008 map differently are refused, while a look-alike
  (Cyrillic ``а``) maps to its own ``xn--`` name, which is not the internal one.

Each :class:`Recipient` carries its domain as lower-case ASCII (``xn--`` for
internationalised labels), the form :func:`ascii_domain` gives the internal domains too.

Reading is pure, and a worker reads the same argument again at every commit of its saga
(decide judges the gate, the claim checks the grant): the readings of recent strings and
domains are kept (:data:`REMEMBERED_READINGS` each, least recently used dropped), and
answered as tuples so no caller can change a kept one. :func:`read_recipient_text` and
:func:`read_ascii_domain` are the plain readings the kept ones must equal (tested).
"""

from __future__ import annotations

import functools
import inspect
import re
import unicodedata
from dataclasses import dataclass
from email.headerregistry import HeaderRegistry
from email.utils import getaddresses
from typing import Any, Final

#: The most strings a recipient list may hold (more is not proven: a person looks).
MAX_RECIPIENT_TEXTS: Final = 1_000
#: The longest recipient string read (the parser's cost grows with it; longer: a person).
MAX_RECIPIENT_CHARS: Final = 10_000

# RFC 5322 atext without "%" and "!" (source-route relaying through an internal host).
_LOCAL_ATOM = r"[A-Za-z0-9#$&'*+/=?^_`{|}~-]+"
_LOCAL_PART = re.compile(rf"{_LOCAL_ATOM}(?:\.{_LOCAL_ATOM})*")
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_REGISTRY = HeaderRegistry()
_STRICT = "strict" in inspect.signature(getaddresses).parameters
#: Recent readings kept per process, of recipient strings and of domains each.
REMEMBERED_READINGS: Final = 4_096
#: The longest string whose reading is kept (longer ones are read afresh each time, so the
#: kept readings hold at most ~2 MB whatever the inputs).
REMEMBERED_CHARS: Final = 512


@dataclass(frozen=True)
class Recipient:
    """One parsed address: its local part as written and its domain as lower-case ASCII."""

    local: str
    domain: str

    def within(self, domain: str) -> bool:
        """Whether this address is of ``domain`` (ASCII, lower case) or one of its subdomains."""
        return self.domain == domain or self.domain.endswith("." + domain)


def ascii_domain(name: str) -> str | None:
    """``name`` as lower-case ASCII (IDNA for non-ASCII labels), or None when it is not a
    host name in canonical form (empty labels, a trailing dot, a literal, invalid punycode,
    or characters IDNA would map to something else)."""
    if not isinstance(name, str):
        return None
    return _remembered_ascii_domain(name) if len(name) <= 253 else None


def read_ascii_domain(name: str) -> str | None:
    """:func:`ascii_domain` read afresh (the plain path the remembered readings equal)."""
    if not name or len(name) > 253 or _has_hidden(name):
        return None
    try:
        encoded = name.encode("idna").decode("ascii").lower()
        unicode_form = encoded.encode("ascii").decode("idna")
        # Valid punycode that nothing was mapped away from: back to ASCII it is the same.
        if unicode_form.encode("idna").decode("ascii").lower() != encoded:
            return None
    except (UnicodeError, ValueError):
        return None
    # Canonical: written either as that ASCII name or as its Unicode form (up to case).
    if name.lower() not in (encoded, unicode_form):
        return None
    labels = encoded.split(".")
    if len(labels) < 2 or not all(_LABEL.fullmatch(label) for label in labels):
        return None
    return encoded


def parse_recipients(value: Any) -> list[Recipient] | None:
    """Every address ``value`` names, or None when it cannot be proven to be addresses."""
    if isinstance(value, str):
        texts = [value]
    elif isinstance(value, list) and 0 < len(value) <= MAX_RECIPIENT_TEXTS:
        texts = value
    else:
        return None
    found: list[Recipient] = []
    for text in texts:
        if not isinstance(text, str):
            return None
        parsed = (_remembered_text(text) if len(text) <= REMEMBERED_CHARS
                  else read_recipient_text(text))
        if parsed is None:
            return None
        found += parsed
    return found or None


def read_recipient_text(text: str) -> tuple[Recipient, ...] | None:
    """The addresses of one string (an RFC 5322 address list), or None, read afresh (the
    plain path the remembered readings equal)."""
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_RECIPIENT_CHARS:
        return None
    if _has_hidden(text) or "=?" in text or text.strip().startswith(",") or text.strip(
            ).endswith(","):
        return None  # an empty list element: Pythons differ on it (strict getaddresses)
    try:
        header = _REGISTRY("to", text)
        groups = header.groups  # type: ignore[attr-defined]
        defects = header.defects
    except Exception:  # noqa: BLE001 - a parser failure on this input proves nothing
        return None
    if defects or any(group.display_name is not None for group in groups):
        return None
    addresses = [address for group in groups for address in group.addresses]
    if not addresses or _second_reading(text) != [a.addr_spec for a in addresses]:
        return None
    found = []
    for address in addresses:
        recipient = _recipient(address.username, address.domain)
        if recipient is None:
            return None
        found.append(recipient)
    return tuple(found)


# Kept readings: the strings are the keys (bounded by MAX_RECIPIENT_CHARS above), the
# answers immutable (tuples of frozen records, text or None).
_remembered_text = functools.lru_cache(maxsize=REMEMBERED_READINGS)(read_recipient_text)
_remembered_ascii_domain = functools.lru_cache(maxsize=REMEMBERED_READINGS)(read_ascii_domain)


def _second_reading(text: str) -> list[str] | None:
    """The addresses ``email.utils.getaddresses`` finds (strict where this Python has it)."""
    try:
        pairs = getaddresses([text], strict=True) if _STRICT else getaddresses([text])
    except Exception:  # noqa: BLE001 - as above
        return None
    return [address for _, address in pairs]


def _recipient(local: str, domain: str) -> Recipient | None:
    """A recipient when the local part is a plain ASCII dot-atom and the domain a canonical
    host name; None otherwise."""
    if not local.isascii() or not _LOCAL_PART.fullmatch(local):
        return None
    canonical = read_ascii_domain(domain)
    return Recipient(local, canonical) if canonical is not None else None


def _has_hidden(text: str) -> bool:
    """Whether ``text`` holds a control, format (zero-width, bidi) or line/paragraph
    separator character."""
    return any(unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") for ch in text)
