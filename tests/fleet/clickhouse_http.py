"""A local server that speaks ClickHouse's HTTP interface (the parts otel-coldstart uses) by
running each query on chDB: GET ``/?query=...&param_x=...&database=...`` (read-only, as
ClickHouse runs GET), POST with the query in the URL and the data in the body (INSERT),
Basic authentication, and errors as ClickHouse writes them (``Code: N. DB::Exception: ...``
with a non-200 status). Binds 127.0.0.1 only; ``delay_s`` holds each answer back (timeouts).
"""

from __future__ import annotations

import base64
import re
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from chdb import session


class ClickHouseOverChdb:
    def __init__(self, path: str, user: str = "analyst", password: str = "s3cret-pw") -> None:
        self.session = session.Session(path)
        self.user, self.password = user, password
        self.delay_s = 0.0
        self.queries: list[str] = []
        self.headers_seen: list[dict] = []
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                owner._answer(self, b"", readonly=True)

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                owner._answer(self, self.rfile.read(length) if length else b"", readonly=False)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://{user}@127.0.0.1:{self.server.server_address[1]}/default"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        self.session.close()

    def _answer(self, handler, body: bytes, readonly: bool) -> None:
        self.headers_seen.append(dict(handler.headers))
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(handler.path).query, keep_blank_values=True)
        auth = handler.headers.get("Authorization", "")
        user, _, password = base64.b64decode(auth[6:]).decode().partition(":") if auth.startswith("Basic ") else ("", "", "")
        if (user, password) != (self.user, self.password):
            return self._send(handler, 516, f"Code: 516. DB::Exception: {user}: Authentication failed: password is "
                                            "incorrect, or there is no user with such name. (AUTHENTICATION_FAILED)")
        sql = query.get("query", [""])[0]
        if readonly and not re.match(r"^\s*(SELECT|WITH)\b", sql, re.I):
            return self._send(handler, 500, "Code: 164. DB::Exception: Cannot execute query in readonly mode. (READONLY)")
        params = {k[len("param_"):]: v[0] for k, v in query.items() if k.startswith("param_")}
        self.queries.append(sql)
        if self.delay_s:
            time.sleep(self.delay_s)
        text = sql + ("\n" + body.decode() if body else "")
        try:
            with self.lock:  # one engine: one query at a time
                result = self.session.query(text, "TabSeparated", params=params or None)
        except Exception as exc:  # noqa: BLE001 - the engine's error, as ClickHouse would send it
            return self._send(handler, 500, str(exc))
        self._send(handler, 200, result.bytes().decode() if hasattr(result, "bytes") else str(result))

    @staticmethod
    def _send(handler, status: int, text: str) -> None:
        data = text.encode()
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", "text/plain; charset=UTF-8")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (its timeout)
            pass
