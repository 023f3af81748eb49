"""What the tests against a real Prometheus share: a free port for it, and its query API."""

from __future__ import annotations

import json
import socket
import urllib.parse
import urllib.request


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def query(base: str, expr: str) -> list:
    """An instant query's result vector (``base``: http://127.0.0.1:PORT)."""
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.loads(answer.read())["data"]["result"]
