"""Sentry: errors carry saga, step and tool tags when a DSN is set; nothing happens without."""

from __future__ import annotations

import gzip
import http.server
import subprocess
import sys
import textwrap
import threading


class _Collector(http.server.BaseHTTPRequestHandler):
    bodies: list[bytes] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        _Collector.bodies.append(body)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=60, check=False)


def test_without_a_dsn_sentry_is_never_initialised() -> None:
    result = _run("""
        import sentry_sdk
        from application.telemetry.sentry import init_sentry, step_scope
        assert init_sentry(None, component="worker") is False
        with step_scope("s-1", "hold_flight", "forward", "flights.hold"):
            pass
        assert not sentry_sdk.is_initialized()
        print("ok")
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_with_a_dsn_errors_carry_saga_step_and_tool_tags() -> None:
    # given a local stand-in for the Sentry ingest endpoint
    _Collector.bodies = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        # when a process with SAGAFLEET_SENTRY_DSN set reports an error inside a step
        result = _run(f"""
            import sentry_sdk
            from application.telemetry.sentry import init_sentry, step_scope
            assert init_sentry("http://public@127.0.0.1:{port}/1", component="worker")
            def call_tool():
                card_token = "tok_local_secret_9f3a"  # a revealed secret in a frame's locals
                raise RuntimeError(f"provider exploded ({{len(card_token)}})")
            with step_scope("saga-42", "capture_payment", "forward", "payments.capture"):
                try:
                    call_tool()
                except RuntimeError:
                    sentry_sdk.capture_exception()
            sentry_sdk.flush(5)
        """)
        assert result.returncode == 0, result.stderr
    finally:
        server.shutdown()
    # then the event that arrived names the saga, the step and the tool
    payload = b"\n".join(_Collector.bodies).decode()
    assert "provider exploded" in payload
    for tag in ('"saga_id": "saga-42"', '"step_id": "capture_payment"',
                '"tool": "payments.capture"'):
        assert tag in payload.replace('":"', '": "')
    # and no frame's local variables were shipped (one may hold a revealed secret input)
    assert "tok_local_secret_9f3a" not in payload


def test_the_traces_sample_rate_is_a_setting() -> None:
    # given SAGAFLEET_SENTRY_TRACES_SAMPLE_RATE, when a process starts its telemetry
    result = _run("""
        import sentry_sdk
        from sagafleet.settings import Settings
        from sagafleet.telemetry import start_telemetry
        settings = Settings.from_env({"SAGAFLEET_SENTRY_DSN": "http://public@127.0.0.1:9/1",
                                      "SAGAFLEET_SENTRY_TRACES_SAMPLE_RATE": "0.05"})
        start_telemetry(settings, "worker")
        # then Sentry samples that share of transactions (errors are sent regardless)
        print(sentry_sdk.get_client().options["traces_sample_rate"])
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "0.05"
