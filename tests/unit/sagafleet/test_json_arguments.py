"""JSON on the command line (``start --input``, ``resolve --evidence``): inline, ``@FILE`` or
``-`` for stdin, each refusal typed and naming the option and the source."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from saga_core.definitions.documents import MalformedDocument
from saga_core.limits import INPUT_TEXT_BYTES, Limit, LimitExceeded
from sagafleet.errors import NotFound
from sagafleet.json_arguments import json_argument


class _Stdin:
    def __init__(self, data: bytes) -> None:
        self.buffer = io.BytesIO(data)


def test_inline_file_and_stdin_give_the_same_document(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "input.json"
    path.write_text('{"nights": 2}', encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", _Stdin(b'{"nights": 2}\n'))
    assert (json_argument('{"nights": 2}', "--input", INPUT_TEXT_BYTES)
            == json_argument(f"@{path}", "--input", INPUT_TEXT_BYTES)
            == json_argument("-", "--input", INPUT_TEXT_BYTES) == {"nights": 2})


def test_a_missing_file_is_not_found_naming_option_and_path(tmp_path: Path) -> None:
    with pytest.raises(NotFound, match=r"--evidence @.*nope\.json: cannot read"):
        json_argument(f"@{tmp_path / 'nope.json'}", "--evidence", INPUT_TEXT_BYTES)


def test_text_that_is_not_json_names_where_it_came_from(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", _Stdin(b"{not json"))
    with pytest.raises(MalformedDocument, match=r"--input - \(stdin\)"):
        json_argument("-", "--input", INPUT_TEXT_BYTES)
    path = tmp_path / "broken.json"
    path.write_text("[1,", encoding="utf-8")
    with pytest.raises(MalformedDocument, match="broken.json"):
        json_argument(f"@{path}", "--input", INPUT_TEXT_BYTES)


def test_a_file_over_the_limit_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    path.write_text('"' + "x" * 100 + '"', encoding="utf-8")
    with pytest.raises(LimitExceeded, match="at least 11"):
        json_argument(f"@{path}", "--input", Limit("tiny", 10, "bytes", "a test"))
