"""Live sources against a local http.server on 127.0.0.1 that answers with real Jaeger and
Tempo API responses (tests/data/traces): by trace id, by search, and every failure mode
(HTTP error, no answer, refused connection) as exit 9 with no credentials printed."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import urllib.parse

import pytest

from analyze_records import data_file
from otel_coldstart.cli import main

DEMO_TRACE = "4e5c3f5f55b907e2df77600f59a0949d"
TEMPO_TRACE = "3ba55609c3cde49649cd77d1f9dcd936"


def _read(name: str) -> bytes:
    with open(data_file(name), "rb") as handle:
        return handle.read()


class Api(http.server.BaseHTTPRequestHandler):
    requests: list = []

    def log_message(self, *args):  # keep pytest output clean
        pass

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # noqa: N802 - http.server's naming
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        Api.requests.append((url.path, query, self.headers.get("Authorization")))
        if url.path == "/jaeger/api/traces" and query.get("service") == ["demo"]:
            return self._send(200, _read("demo-cold-first-shard.jaeger.json"))
        if url.path == "/jaeger/api/traces/2db17286b3e6b148":
            return self._send(200, _read("ui-trace.json"))
        if url.path.startswith("/jaeger/api/traces/"):
            return self._send(404, b'{"data":null,"errors":[{"code":404,"msg":"trace not found"}]}')
        if url.path == "/tempo/api/search":
            return self._send(200, _read("tempo-search-response.json"))
        if url.path == f"/tempo/api/traces/{TEMPO_TRACE}":
            return self._send(200, _read("responseTrace.json"))
        if url.path == f"/tempo/api/traces/{DEMO_TRACE}":
            return self._send(200, _read("demo-cold-first-shard.otlp.jsonl"))
        if url.path == "/garbage/api/traces/1":
            return self._send(200, b"<html>login</html>")
        if url.path == "/slow/api/traces/1":
            threading.Event().wait(3)  # longer than the client's timeout
            return self._send(200, b"{}")
        return self._send(500, b"oops")


class QuietServer(http.server.ThreadingHTTPServer):
    # The /slow handler answers after the client gave up: its write then fails with a broken
    # pipe, which socketserver would print to whatever sys.stderr is at that moment, possibly
    # a later test's captured stderr. A client hanging up is expected here: stay quiet.
    daemon_threads = False
    block_on_close = True  # server_close() waits for handlers: none outlives this module

    def handle_error(self, request, client_address):
        pass


@pytest.fixture(scope="module")
def server():
    httpd = QuietServer(("127.0.0.1", 0), Api)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def test_jaeger_search_by_service_analyses_the_startup(server, capsys):
    Api.requests.clear()
    code, out, _ = run(capsys, "analyze", "--jaeger", server + "/jaeger", "--service", "demo", "--limit", "5")
    assert code == 0 and DEMO_TRACE in out and "cold shard(s) read from storage" in out
    path, query, _ = Api.requests[-1]
    assert path == "/jaeger/api/traces" and query["operation"] == ["model.startup"] and query["limit"] == ["5"]


def test_jaeger_trace_without_startup_is_exit_5(server, capsys):
    code, _, err = run(capsys, "analyze", "--jaeger", server + "/jaeger", "--trace-id", "2db17286b3e6b148")
    assert code == 5 and "no model.startup span" in err


def test_tempo_search_then_fetch_each_trace(server, capsys):
    Api.requests.clear()
    code, _, err = run(capsys, "analyze", "--tempo", server + "/tempo", "--service", "x")
    assert code == 5 and "among 8 spans" in err  # the bookinfo trace: read, but not a start-up
    search = Api.requests[0]
    assert search[0] == "/tempo/api/search" and 'name = "model.startup"' in search[1]["q"][0]
    assert 'resource.service.name = "x"' in search[1]["q"][0]
    assert Api.requests[1][0] == f"/tempo/api/traces/{TEMPO_TRACE}"


def test_tempo_by_trace_id(server, capsys):
    code, out, _ = run(capsys, "analyze", "--tempo", server + "/tempo", "--trace-id", DEMO_TRACE,
                       "--format", "json")
    assert code == 0 and json.loads(out)["startups"][0]["trace_id"] == DEMO_TRACE


def test_http_errors_and_credentials_never_printed(server, capsys):
    with_credentials = server.replace("http://", "http://alice:s3cret@") + "/jaeger"
    Api.requests.clear()
    code, _, err = run(capsys, "analyze", "--jaeger", with_credentials + "?token=abc", "--trace-id", "ff")
    assert code == 9 and "HTTP 404" in err
    assert "s3cret" not in err and "alice" not in err and "token" not in err
    assert Api.requests[-1][2].startswith("Basic ")  # sent, not printed


def test_non_json_answer_is_exit_9(server, capsys):
    code, _, err = run(capsys, "analyze", "--jaeger", server + "/garbage", "--trace-id", "1")
    assert code == 9 and "not JSON" in err


def test_no_answer_within_timeout_is_exit_9(server, capsys):
    code, _, err = run(capsys, "analyze", "--jaeger", server + "/slow", "--trace-id", "1", "--timeout", "0.3")
    assert code == 9 and "no answer within 0.3 s" in err


def test_refused_connection_and_bad_url_are_exit_9(capsys):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code, _, err = run(capsys, "analyze", "--jaeger", f"http://127.0.0.1:{port}", "--service", "s")
    assert code == 9 and "cannot connect" in err
    code, _, err = run(capsys, "analyze", "--tempo", "ftp://example", "--trace-id", "1")
    assert code == 9 and "not an http(s) URL" in err


def test_jaeger_needs_service_or_trace_id_and_sources_are_exclusive(server, capsys):
    assert run(capsys, "analyze", "--jaeger", server)[0] == 2  # a usage error, found before any request
    assert run(capsys, "analyze", "--jaeger", server, "--tempo", server)[0] == 2
    assert run(capsys, "analyze", data_file("trace.json"), "--tempo", server)[0] == 2
