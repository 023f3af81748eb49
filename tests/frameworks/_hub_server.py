"""A Hugging Face Hub-compatible HTTP server on 127.0.0.1, for tests and benchmarks.

The real ``huggingface_hub`` client (and through it transformers) talks to it through
``HF_ENDPOINT``; nothing in the client is mocked. What it serves is what hub 2.x asks for:

- ``HEAD|GET /{repo}/resolve/{revision}/{path}``: ``X-Repo-Commit``, ``ETag`` (the
  content's sha256, as the hub gives for LFS files), ``Content-Length``, ``Range``
  (``bytes=N-`` and ``bytes=N-M``: ``206`` with ``Content-Range``); a missing file or repo is ``404`` with
  ``X-Error-Code: EntryNotFound`` / ``RepoNotFound``;
- ``GET /api/models/{repo}[/revision/{revision}]``: repo info (``sha``, ``siblings``);
- ``GET /api/models/{repo}/tree/{revision}``: the file listing snapshot_download reads.

It never advertises Xet (no ``X-Xet-Hash``), so the client downloads over plain HTTP even
with hf_xet installed: the Xet path is covered by the patch's own hook, not by this server.

Faults, per server: ``bytes_per_s`` (throttle per connection), ``metadata_delay_s`` (every
HEAD and API request), ``fail_first`` (paths whose first GET or HEAD answers ``503``),
``cut_first`` (paths whose first GET closes the connection after half the body: the client
resumes with ``Range``). Bounded: it stops serving after ``max_requests``.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CHUNK = 64 * 1024


class Repo:
    def __init__(self, files: dict[str, bytes], commit: str | None = None) -> None:
        self.files = files
        self.commit = commit or hashlib.sha1(b"".join(files[name] for name in sorted(files))).hexdigest()
        self.etags = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}

    def total_bytes(self, suffix: str = "") -> int:
        return sum(len(data) for name, data in self.files.items() if name.endswith(suffix))


class HubServer:
    def __init__(self, repos: dict[str, Repo], *, bytes_per_s: float | None = None, metadata_delay_s: float = 0.0,
                 fail_first: tuple[str, ...] = (), cut_first: tuple[str, ...] = (), max_requests: int = 2000) -> None:
        self.repos = repos
        self.bytes_per_s = bytes_per_s
        self.metadata_delay_s = metadata_delay_s
        self.fail_first = set(fail_first)
        self.cut_first = set(cut_first)
        self.max_requests = max_requests
        self.log: list[tuple[str, str]] = []  # (method, path) of every request, in order
        self.sent: list[tuple[str, int, int]] = []  # (repo/file, from offset, body bytes sent) per GET
        self._lock = threading.Lock()
        server = self

        class Handler(_Handler):
            hub = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> HubServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def note(self, method: str, path: str) -> bool:
        """Log a request; False once max_requests were served (the handler stops)."""
        with self._lock:
            self.log.append((method, path))
            return len(self.log) <= self.max_requests

    def take(self, kind: set, path: str) -> bool:
        with self._lock:
            if path in kind:
                kind.discard(path)
                return True
            return False

    def body_bytes(self) -> int:
        return sum(sent for key, start, sent in self.sent)

    def signal_mid_transfer(self, child, how: int, after_s: float) -> None:
        """Send ``how`` to ``child`` ``after_s`` seconds into its first file GET (then wait for
        it; killed if it has not ended within 60 s)."""
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not any(m == "GET" and "/resolve/" in p for m, p in self.log):
                time.sleep(0.05)
            time.sleep(after_s)
            child.send_signal(how)
            child.wait(timeout=60)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()

    def metadata_requests(self) -> int:
        """Requests that were not a file's GET (HEAD, API)."""
        return sum(1 for method, path in self.log if not (method == "GET" and "/resolve/" in path))


_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)$")
_API = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)(?:/(?P<kind>revision|tree)/(?P<rev>[^/?]+))?/?$")


class _Handler(BaseHTTPRequestHandler):
    hub: HubServer
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_HEAD(self) -> None:
        self._route(head=True)

    def do_GET(self) -> None:
        self._route(head=False)

    def _route(self, head: bool) -> None:
        path = self.path.split("?", 1)[0]
        if not self.hub.note(self.command, path):
            self.close_connection = True
            return
        match = _RESOLVE.match(path)
        if match:
            return self._resolve(match["repo"], match["path"], head)
        match = _API.match(path)
        if match and not head:
            return self._api(match["repo"], match["kind"], match["rev"])
        self._error(404, "RepoNotFound")

    def _error(self, status: int, code: str | None, commit: str | None = None) -> None:
        body = json.dumps({"error": code or "error"}).encode()
        self.send_response(status)
        if code:
            self.send_header("X-Error-Code", code)
        if commit:
            self.send_header("X-Repo-Commit", commit)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, payload) -> None:
        if self.hub.metadata_delay_s:
            time.sleep(self.hub.metadata_delay_s)
        body = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _api(self, repo_id: str, kind: str | None, revision: str | None) -> None:
        repo = self.hub.repos.get(repo_id)
        if repo is None:
            return self._error(404, "RepoNotFound")
        if kind == "tree":
            return self._json([{"type": "file", "path": name, "size": len(data), "oid": repo.etags[name][:40],
                                "lfs": {"oid": repo.etags[name], "size": len(data), "pointerSize": 134}}
                               for name, data in sorted(repo.files.items())])
        self._json({"id": repo_id, "modelId": repo_id, "sha": repo.commit, "private": False, "tags": [],
                    "siblings": [{"rfilename": name, "size": len(data)} for name, data in sorted(repo.files.items())]})

    def _resolve(self, repo_id: str, name: str, head: bool) -> None:
        hub = self.hub
        if head and hub.metadata_delay_s:
            time.sleep(hub.metadata_delay_s)
        repo = hub.repos.get(repo_id)
        if repo is None:
            return self._error(404, "RepoNotFound")
        data = repo.files.get(name)
        if data is None:
            return self._error(404, "EntryNotFound", repo.commit)
        key = f"{repo_id}/{name}"
        if hub.take(hub.fail_first, key):
            return self._error(503, None)
        start, end = 0, len(data) - 1
        ranged = self.headers.get("Range")
        found = re.match(r"bytes=(\d+)-(\d*)", ranged) if ranged and not head else None
        if found:  # "bytes=N-" (a resumed file) or "bytes=N-M" (fsspec's block reads)
            start = int(found.group(1))
            end = min(end, int(found.group(2))) if found.group(2) else end
        body = data[start:end + 1]
        self.send_response(206 if found else 200)
        self.send_header("X-Repo-Commit", repo.commit)
        self.send_header("ETag", f'"{repo.etags[name]}"')
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(len(body)))
        if found:
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        self.end_headers()
        if head:
            return
        cut_at = len(body) // 2 if hub.take(hub.cut_first, key) else None
        sent = self._send_body(body, cut_at)
        with hub._lock:
            hub.sent.append((key, start, sent))
        if cut_at is not None:
            self.close_connection = True

    def _send_body(self, body: bytes, cut_at: int | None) -> int:
        sent = 0
        began = time.perf_counter()
        limit = len(body) if cut_at is None else cut_at
        while sent < limit:
            chunk = body[sent:min(limit, sent + CHUNK)]
            try:
                self.wfile.write(chunk)
            except OSError:
                break
            sent += len(chunk)
            if self.hub.bytes_per_s:
                ahead = sent / self.hub.bytes_per_s - (time.perf_counter() - began)
                if ahead > 0:
                    time.sleep(ahead)
        return sent
