"""How commands report: one JSON document with ``--json``, readable text otherwise."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, Protocol


class Report(Protocol):
    """A command's typed result that renders itself as one JSON document and as text."""

    def to_json(self) -> Any:
        """The JSON-ready document ``--json`` prints."""
        ...

    def to_text(self) -> str:
        """What a person reads."""
        ...


def _dump(document: Any) -> str:
    return json.dumps(document, indent=2, sort_keys=True, default=str) + "\n"


def emit_report(report: Report, *, as_json: bool) -> None:
    """Print ``report`` as one JSON document, or as its text."""
    sys.stdout.write(_dump(report.to_json()) if as_json else report.to_text().rstrip("\n") + "\n")


def emit(document: Any, *, as_json: bool, text: Callable[[Any], str] | None = None) -> None:
    """Print ``document`` as one JSON document, or as the given text rendering."""
    if as_json or text is None:
        sys.stdout.write(_dump(document))
    else:
        sys.stdout.write(text(document).rstrip("\n") + "\n")


def emit_error(message: str, *, as_json: bool, error: str, details: Any = None) -> None:
    """Report an error named ``error`` on stderr (text) or as a JSON document on stdout."""
    if as_json:
        payload: dict[str, Any] = {"error": error, "message": message}
        if details is not None:
            payload["details"] = details
        sys.stdout.write(_dump(payload))
    else:
        sys.stderr.write(f"sagafleet: {error}: {message}\n")
