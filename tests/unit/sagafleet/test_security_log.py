"""The security log's lines, from an ASGI app that refuses (no server): one JSON object per
refusal, whoever refused; the access log only when its logger is on."""

from __future__ import annotations

import json
import logging
from typing import Any

import anyio
import pytest

from saga_core.access.roles import Principal, PrincipalKind
from sagafleet.security_log import (
    ACCESS_LOGGER,
    PRINCIPAL_SCOPE_KEY,
    SECURITY_LOGGER,
    RequestLog,
    SecurityEvent,
    note_refusal,
)

ANA = Principal("acme", "ana", PrincipalKind.PERSON, frozenset({"approver"}))


def _app(status: int, *, event: str = "", principal: Principal | None = None) -> Any:
    async def app(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        if principal is not None:
            scope[PRINCIPAL_SCOPE_KEY] = principal
        if event:
            note_refusal(scope, event, "the reason")
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b""})
    return app


def _serve(app: Any, path: str = "/queue") -> None:
    scope = {"type": "http", "method": "GET", "path": path, "query_string": b"token=sft_x",
             "headers": [(b"authorization", b"Bearer sft_SECRET")], "client": ("10.0.0.1", 5)}

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        pass

    anyio.run(RequestLog(app), scope, receive, send)


def _lines(caplog: pytest.LogCaptureFixture, logger: str) -> list[dict[str, Any]]:
    return [json.loads(r.getMessage()) for r in caplog.records if r.name == logger]


def test_an_explained_refusal_is_a_line_with_its_event_reason_and_who(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger=SECURITY_LOGGER):
        _serve(_app(403, event="csrf_refused", principal=ANA))
    assert _lines(caplog, SECURITY_LOGGER) == [{
        "event": "csrf_refused", "reason": "the reason", "status": 403, "method": "GET",
        "path": "/queue", "client": "10.0.0.1", "tenant": "acme", "principal": "ana"}]


@pytest.mark.parametrize(("status", "event"), [(401, "unauthenticated"), (403, "forbidden"),
                                               (429, "throttled")])
def test_a_refusal_nobody_explained_is_logged_all_the_same(caplog, status, event) -> None:
    with caplog.at_level(logging.WARNING, logger=SECURITY_LOGGER):
        _serve(_app(status))
        _serve(_app(200))
    (line,) = _lines(caplog, SECURITY_LOGGER)
    assert (line["event"], line["status"], line["reason"]) == (event, status, "")


def test_no_line_holds_a_credential_or_the_query(caplog) -> None:
    with caplog.at_level(logging.INFO):
        _serve(_app(401, event="unauthenticated"))
    assert "sft_" not in caplog.text and "token=" not in caplog.text


def test_the_access_log_is_written_only_while_its_logger_is_on(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger=ACCESS_LOGGER):
        _serve(_app(200, principal=ANA))
    assert not _lines(caplog, ACCESS_LOGGER)
    with caplog.at_level(logging.INFO, logger=ACCESS_LOGGER):
        _serve(_app(200, principal=ANA), path="/sagas")
    (line,) = _lines(caplog, ACCESS_LOGGER)
    assert {k: line[k] for k in ("method", "path", "status", "client", "principal")} == {
        "method": "GET", "path": "/sagas", "status": 200, "client": "10.0.0.1",
        "principal": "ana"}


def test_a_long_path_or_reason_is_cut() -> None:
    line = json.loads(SecurityEvent("forbidden", "r" * 5000, path="/" + "p" * 5000).line())
    assert len(line["reason"]) < 400 and len(line["path"]) < 400
