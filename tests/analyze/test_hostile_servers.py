"""Issue 16: live sources against hostile servers on 127.0.0.1 (ephemeral ports).

Credentials never leave their origin on a redirect, only http(s) redirects are followed,
``--timeout`` bounds the whole request however slowly the server answers, and the bytes
fetched by one command are capped with a clear error.
"""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
import urllib.parse

import pytest

from analyze_records import data_file
from otel_coldstart.cli import main

DEMO_TRACE = "4e5c3f5f55b907e2df77600f59a0949d"


def _read(name: str) -> bytes:
    with open(data_file(name), "rb") as handle:
        return handle.read()


class Recorder(http.server.BaseHTTPRequestHandler):
    """Serves what the test's ``routes`` say; records every request with its headers."""

    routes: dict = {}
    seen: list = []

    def log_message(self, *args):
        pass

    def do_GET(self):  # noqa: N802
        path = urllib.parse.urlsplit(self.path).path
        type(self).seen.append((self.server.server_address[1], path, self.headers.get("Authorization")))
        status, headers, body = self.routes.get(path, (404, {}, b"{}"))
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        if "Content-Length" not in headers:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Quiet(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass


def _serve(handler):
    httpd = Quiet(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    return httpd


@pytest.fixture
def two_servers():
    class A(Recorder):
        routes = {}
        seen = []

    class B(Recorder):
        routes = {}
        seen = []

    a, b = _serve(A), _serve(B)
    try:
        yield (A, f"127.0.0.1:{a.server_address[1]}"), (B, f"127.0.0.1:{b.server_address[1]}")
    finally:
        for httpd in (a, b):
            httpd.shutdown()
            httpd.server_close()


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) <= 1 or code == 0
    return code, out, err


def test_credentials_are_not_sent_to_another_origin_on_redirect(two_servers, capsys):
    (a, a_host), (b, b_host) = two_servers
    trace = _read("demo-cold-first-shard.jaeger.json")
    a.routes[f"/api/traces/{DEMO_TRACE}"] = (302, {"Location": f"http://{b_host}/api/traces/{DEMO_TRACE}"}, b"")
    b.routes[f"/api/traces/{DEMO_TRACE}"] = (200, {"Content-Type": "application/json"}, trace)
    code, out, _ = run(capsys, "analyze", "--jaeger", f"http://alice:s3cret@{a_host}", "--trace-id", DEMO_TRACE)
    assert code == 0 and DEMO_TRACE in out
    assert a.seen[0][2] and a.seen[0][2].startswith("Basic ")
    assert b.seen and all(auth is None for _, _, auth in b.seen)


def test_credentials_follow_a_redirect_within_their_origin(two_servers, capsys):
    (a, a_host), _ = two_servers
    a.routes[f"/old/api/traces/{DEMO_TRACE}"] = (301, {"Location": f"/new/api/traces/{DEMO_TRACE}"}, b"")
    a.routes[f"/new/api/traces/{DEMO_TRACE}"] = (200, {}, _read("demo-cold-first-shard.jaeger.json"))
    code, _, _ = run(capsys, "analyze", "--jaeger", f"http://alice:s3cret@{a_host}/old", "--trace-id", DEMO_TRACE)
    assert code == 0
    assert [auth is not None for _, _, auth in a.seen] == [True, True]


def test_a_redirect_to_ftp_is_refused_without_connecting(two_servers, capsys):
    (a, a_host), _ = two_servers
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    try:
        a.routes["/api/traces/abc"] = (302, {"Location": f"ftp://127.0.0.1:{port}/x"}, b"")
        code, _, err = run(capsys, "analyze", "--jaeger", f"http://{a_host}", "--trace-id", "abc")
        assert code == 9 and "only http and https" in err
        with pytest.raises(socket.timeout):
            listener.accept()  # nobody connected
    finally:
        listener.close()


def test_a_redirect_loop_ends(two_servers, capsys):
    (a, a_host), _ = two_servers
    a.routes["/api/traces/abc"] = (302, {"Location": "/api/traces/abc"}, b"")
    code, _, err = run(capsys, "analyze", "--jaeger", f"http://{a_host}", "--trace-id", "abc")
    assert code == 9 and "redirects" in err
    assert len(a.seen) == 6


class _RawServer:
    """A TCP server that runs ``behaviour(conn)`` for each connection, for answers no
    well-behaved HTTP server would give."""

    def __init__(self, behaviour):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.behaviour = behaviour
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _loop(self):
        self.sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn):
        try:
            conn.recv(65536)
            self.behaviour(conn, self.stop)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self):
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


def _drip_body(conn, stop):
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
    while not stop.wait(0.2):
        conn.sendall(b" ")


def _drip_headers(conn, stop):
    for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 100000:
        if stop.wait(0.2):
            return
        conn.sendall(bytes([byte]))


def _timed_fetch(capsys, behaviour) -> tuple[int, str, float]:
    """analyze --jaeger against a raw server behaving so, with a 1.5 s timeout: exit code,
    stderr and the seconds it took."""
    server = _RawServer(behaviour)
    try:
        started = time.monotonic()
        code, _, err = run(capsys, "analyze", "--jaeger", server.url, "--trace-id", "abc", "--timeout", "1.5")
        return code, err, time.monotonic() - started
    finally:
        server.close()


@pytest.mark.parametrize("behaviour", [_drip_body, _drip_headers], ids=["body", "headers"])
def test_timeout_bounds_the_whole_request_against_a_dripping_server(capsys, behaviour):
    code, err, elapsed = _timed_fetch(capsys, behaviour)
    assert code == 9 and "no answer within 1.5 s" in err
    assert elapsed < 15  # cut off at ~1.5 s; generous for a loaded machine


def test_a_declared_oversized_answer_is_refused_before_reading(capsys):
    def huge(conn, stop):
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n{")
        stop.wait(10)

    server = _RawServer(huge)
    try:
        code, _, err = run(capsys, "analyze", "--jaeger", server.url, "--trace-id", "abc", "--max-input-mb", "4")
    finally:
        server.close()
    assert code == 7 and "4 MiB limit in all" in err and "--max-input-mb" in err


def test_undeclared_answers_are_capped_in_all_across_requests(two_servers, capsys):
    """Tempo: a search and then one fetch per trace id; 20 x 1 MiB answers against a 4 MiB
    limit stop at the limit with exit 7, whatever each single answer's size."""
    (a, a_host), _ = two_servers
    ids = [f"{i:032x}" for i in range(1, 21)]
    a.routes["/api/search"] = (200, {}, json.dumps({"traces": [{"traceID": i} for i in ids]}).encode())
    padding = b" " * (1 << 20)
    trace = _read("demo-cold-first-shard.otlp.jsonl").split(b"\n")[0]
    for trace_id in ids:
        a.routes[f"/api/traces/{trace_id}"] = (200, {}, trace + padding)
    code, _, err = run(capsys, "analyze", "--tempo", f"http://{a_host}", "--max-input-mb", "4", "--limit", "20")
    assert code == 7 and "in all" in err
    assert len(a.seen) <= 6  # stopped at the limit, not after all 20


def test_chunked_answer_without_length_is_capped(capsys):
    def endless_chunks(conn, stop):
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b"x" * 65536
        while not stop.is_set():
            conn.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))

    server = _RawServer(endless_chunks)
    try:
        code, _, err = run(capsys, "analyze", "--jaeger", server.url, "--trace-id", "abc", "--max-input-mb", "2",
                           "--timeout", "30")
    finally:
        server.close()
    assert code == 7 and "2 MiB limit" in err


# Issue 25.4: over HTTP/1.0, or with `Connection: close`, http.client hands the socket to the
# response at getresponse(), so the connection has none left when the deadline fires; the
# deadline must hold all the same. Each server drips for at most DRIP_FOR_S, then hangs up:
# a request that outlives the deadline shows in the time taken (it cannot hang the suite).
DRIP_FOR_S = 12


def _dripping(status_and_headers: bytes, headers_too: bool):
    def behaviour(conn, stop):
        ended = time.monotonic() + DRIP_FOR_S
        if headers_too:
            payload, head = status_and_headers + b"X-Slow: " + b"a" * 100000, b""
        else:
            payload, head = b" " * 100000, status_and_headers + b"\r\n"
        if head:
            conn.sendall(head)
        for byte in payload:
            if stop.wait(0.2) or time.monotonic() > ended:
                return
            conn.sendall(bytes([byte]))
    return behaviour


@pytest.mark.parametrize("status_and_headers", [
    b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n",
], ids=["http-1.0", "connection-close"])
@pytest.mark.parametrize("headers_too", [False, True], ids=["body", "headers"])
def test_the_deadline_holds_when_the_response_owns_the_socket(capsys, status_and_headers, headers_too):
    code, err, elapsed = _timed_fetch(capsys, _dripping(status_and_headers, headers_too))
    assert code == 9 and "no answer within 1.5 s" in err
    assert elapsed < DRIP_FOR_S - 4, elapsed  # cut off at ~1.5 s, not when the server gave up
