"""JSON given on the command line: the text itself, ``@FILE`` for a file's content, or ``-``
for standard input (``start --input``, ``resolve --evidence``).

Read with a bound (no more than one byte past the limit is ever read), parsed by
:func:`saga_core.definitions.documents.load_document` (size and nesting checked on the text): a file
that cannot be read is :class:`~sagafleet.errors.NotFound` (exit 4), text that is not JSON
an invalid input (exit 3), each naming the option and where the text came from.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, BinaryIO

from saga_core.definitions.documents import load_document
from saga_core.limits import Limit, LimitExceeded
from sagafleet.errors import NotFound


def json_argument(value: str, option: str, limit: Limit) -> Any:
    """``option``'s JSON: ``value`` itself, the file ``@PATH`` names, or stdin for ``-``."""
    source = option
    raw: str | bytes
    if value == "-":
        source = f"{option} - (stdin)"
        raw = read_at_most(sys.stdin.buffer, limit, source)
    elif value.startswith("@"):
        path = Path(value[1:])
        source = f"{option} {value}"
        try:
            with path.open("rb") as file:
                raw = read_at_most(file, limit, source)
        except OSError as exc:
            raise NotFound(f"{option} {value}: cannot read {path}: {exc.strerror}") from None
    else:
        raw = value
    return load_document(raw, source, limit, "json")


def read_at_most(file: BinaryIO, limit: Limit, what: str) -> bytes:
    """A file's bytes, reading no more than one byte past ``limit`` (LimitExceeded then)."""
    data = file.read(limit.value + 1)
    if len(data) > limit.value:
        raise LimitExceeded(limit, what, len(data), at_least=True)
    return data
