"""How commands report: one JSON document with ``--json``, readable text otherwise."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any


def emit(document: Any, *, as_json: bool, text: Callable[[Any], str] | None = None) -> None:
    """Print ``document`` as one JSON document, or as the given text rendering."""
    if as_json:
        sys.stdout.write(json.dumps(document, indent=2, sort_keys=True, default=str) + "\n")
    elif text is not None:
        sys.stdout.write(text(document).rstrip("\n") + "\n")
    else:
        sys.stdout.write(json.dumps(document, indent=2, sort_keys=True, default=str) + "\n")


def emit_error(message: str, *, as_json: bool, kind: str, details: Any = None) -> None:
    """Report an error on stderr (text) or as a JSON document on stdout (``--json``)."""
    if as_json:
        payload: dict[str, Any] = {"error": kind, "message": message}
        if details is not None:
            payload["details"] = details
        sys.stdout.write(json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n")
    else:
        sys.stderr.write(f"sagafleet: {kind}: {message}\n")
