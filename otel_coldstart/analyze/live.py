"""Live sources: fetch start-up traces from Jaeger's or Tempo's query API over HTTP.

Only the standard library (urllib) with a timeout on every request. Failures become
:class:`LiveSourceError` with one line that names the server without any credentials
(a ``user:password@`` in the URL is never printed). Responses are JSON documents for the
readers; nothing here interprets spans.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from ..semconv import SPAN_ROOT

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_LIMIT = 20
MAX_RESPONSE_BYTES = 256 * 1024 * 1024


class LiveSourceError(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


def redact(url: str) -> str:
    """The URL as it may be printed: no userinfo, no query string (tokens live there)."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
        return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))
    except ValueError:
        return "<invalid URL>"


def fetch_json(url: str, timeout: float = DEFAULT_TIMEOUT_S) -> Any:
    shown = redact(url)
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a port out of range
    except ValueError:
        raise LiveSourceError(f"{shown}: not a valid URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise LiveSourceError(f"{shown}: not an http(s) URL")
    headers = {"Accept": "application/json", "User-Agent": "otel-coldstart"}
    if parts.username is not None:  # basic auth from the URL, sent but never printed

        token = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
        headers["Authorization"] = "Basic " + base64.b64encode(token.encode()).decode()
        host = parts.hostname + (f":{parts.port}" if parts.port else "")
        url = urllib.parse.urlunsplit((parts.scheme, host, parts.path, parts.query, ""))
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout) as response:
            body = response.read(MAX_RESPONSE_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise LiveSourceError(f"{shown}: HTTP {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, (socket.timeout, TimeoutError)):
            raise LiveSourceError(f"{shown}: no answer within {timeout:g} s") from None
        raise LiveSourceError(f"{shown}: cannot connect ({getattr(reason, 'strerror', None) or reason})") from None
    except (socket.timeout, TimeoutError):
        raise LiveSourceError(f"{shown}: no answer within {timeout:g} s") from None
    except (http.client.HTTPException, OSError) as exc:
        raise LiveSourceError(f"{shown}: connection failed ({type(exc).__name__})") from None
    if len(body) > MAX_RESPONSE_BYTES:
        raise LiveSourceError(f"{shown}: response larger than {MAX_RESPONSE_BYTES >> 20} MiB")
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        raise LiveSourceError(f"{shown}: the response is not JSON") from None


def _join(base: str, path: str, query: dict | None = None) -> str:
    """``base`` may carry a path prefix (behind a proxy) and its own query (a token)."""
    try:
        parts = urllib.parse.urlsplit(base)
    except ValueError:
        raise LiveSourceError(f"{redact(base)}: not a valid URL") from None
    params = urllib.parse.parse_qsl(parts.query) + list((query or {}).items())
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/") + path,
                                    urllib.parse.urlencode(params), ""))


def jaeger_documents(base: str, *, trace_id: str | None = None, service: str | None = None,
                     limit: int = DEFAULT_LIMIT, lookback: str = "24h",
                     timeout: float = DEFAULT_TIMEOUT_S) -> list[Any]:
    """Jaeger query API (v1 ``/api/traces``): one trace by id, or the latest ``limit``
    traces of ``service`` that contain a ``model.startup`` span."""
    if trace_id:
        return [fetch_json(_join(base, "/api/traces/" + urllib.parse.quote(trace_id)), timeout)]
    if not service:
        raise LiveSourceError("Jaeger needs --service NAME or --trace-id ID")
    query = {"service": service, "operation": SPAN_ROOT, "limit": limit, "lookback": lookback}
    return [fetch_json(_join(base, "/api/traces", query), timeout)]


def tempo_documents(base: str, *, trace_id: str | None = None, service: str | None = None,
                    limit: int = DEFAULT_LIMIT, timeout: float = DEFAULT_TIMEOUT_S) -> list[Any]:
    """Tempo HTTP API: one trace by id, or a TraceQL search for ``model.startup`` roots
    (optionally of one service) followed by a fetch of each trace found."""
    if trace_id:
        return [fetch_json(_join(base, "/api/traces/" + urllib.parse.quote(trace_id)), timeout)]
    traceql = f'{{ name = "{SPAN_ROOT}"'
    if service:
        traceql += f' && resource.service.name = "{service}"'
    traceql += " }"
    found = fetch_json(_join(base, "/api/search", {"q": traceql, "limit": limit}), timeout)
    traces = found.get("traces") if isinstance(found, dict) else None
    if not isinstance(traces, list):
        raise LiveSourceError(f"{redact(base)}: the search answer has no trace list")
    ids = [t["traceID"] for t in traces if isinstance(t, dict) and isinstance(t.get("traceID"), str)]
    return [fetch_json(_join(base, "/api/traces/" + urllib.parse.quote(i)), timeout) for i in ids[:limit]]
