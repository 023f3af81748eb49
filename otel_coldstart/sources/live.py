"""Live sources: fetch start-up traces from Jaeger's or Tempo's query API over HTTP.

Only the standard library, through :mod:`.bounded_http`: ``timeout`` bounds each whole
request (redirects and a server that drips its answer included), credentials from the URL
go to that origin only, only http(s) redirects are followed, and the bytes fetched by one
command are capped (``max_bytes``, in all). Failures become
:class:`LiveSourceError` with one line that names the server without any credentials
(a ``user:password@`` in the URL is never printed). Responses are JSON documents for the
readers; nothing here interprets spans.
"""

from __future__ import annotations

import base64
import http.client
import json
import time
import urllib.parse
from typing import Any

from ..semconv import SPAN_ROOT
from . import DEFAULT_LIMIT, DEFAULT_TIMEOUT_S, bounded_http
from .bounded_http import ByteBudget, FetchError, origin

MAX_RESPONSE_BYTES = 256 * 1024 * 1024  # in all, for one command (--max-input-mb)


class LiveSourceError(Exception):
    """One line. ``kind``: ``too_large`` when the answers went over the byte limit, else
    ``unavailable``."""

    def __init__(self, message: str, kind: str = "unavailable") -> None:
        super().__init__(" ".join(str(message).split()))
        self.kind = kind


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


def fetch_json(url: str, timeout: float = DEFAULT_TIMEOUT_S, budget: ByteBudget | None = None) -> Any:
    """GET ``url`` and parse the JSON answer. ``timeout`` bounds the whole request,
    redirects included; ``budget`` caps the bytes fetched (shared by a command's requests)."""
    shown = redact(url)
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a port out of range
    except ValueError:
        raise LiveSourceError(f"{shown}: not a valid URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise LiveSourceError(f"{shown}: not an http(s) URL")
    headers = {"Accept": "application/json", "User-Agent": "otel-coldstart"}
    credentials = None
    if parts.username is not None:  # basic auth from the URL: sent to this origin only, never printed
        token = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
        credentials = (origin(url), "Basic " + base64.b64encode(token.encode()).decode())
        host = parts.hostname + (f":{parts.port}" if parts.port else "")
        if ":" in parts.hostname:  # an IPv6 literal
            host = f"[{parts.hostname}]" + (f":{parts.port}" if parts.port else "")
        url = urllib.parse.urlunsplit((parts.scheme, host, parts.path, parts.query, ""))
    if budget is None:
        budget = ByteBudget(MAX_RESPONSE_BYTES)
    try:
        body = bounded_http.get(url, headers, deadline=time.monotonic() + timeout, budget=budget,
                                credentials=credentials)
    except FetchError as exc:
        if exc.kind == "timeout":
            raise LiveSourceError(f"{shown}: no answer within {timeout:g} s") from None
        if exc.kind == "http" and exc.status is not None:
            reason = http.client.responses.get(exc.status, "")
            raise LiveSourceError(f"{shown}: HTTP {exc.status} {reason}") from None
        if exc.kind == "too_large":
            raise LiveSourceError(f"{shown}: {exc} (raise it with --max-input-mb)", "too_large") from None
        raise LiveSourceError(f"{shown}: {exc}") from None
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
                     timeout: float = DEFAULT_TIMEOUT_S, max_bytes: int = MAX_RESPONSE_BYTES) -> list[Any]:
    """Jaeger query API (v1 ``/api/traces``): one trace by id, or the latest ``limit``
    traces of ``service`` that contain a ``model.startup`` span."""
    budget = ByteBudget(max_bytes)
    if trace_id:
        return [fetch_json(_join(base, "/api/traces/" + urllib.parse.quote(trace_id)), timeout, budget)]
    if not service:
        raise LiveSourceError("Jaeger needs --service NAME or --trace-id ID")
    query = {"service": service, "operation": SPAN_ROOT, "limit": limit, "lookback": lookback}
    return [fetch_json(_join(base, "/api/traces", query), timeout, budget)]


def tempo_documents(base: str, *, trace_id: str | None = None, service: str | None = None,
                    limit: int = DEFAULT_LIMIT, timeout: float = DEFAULT_TIMEOUT_S,
                    max_bytes: int = MAX_RESPONSE_BYTES) -> list[Any]:
    """Tempo HTTP API: one trace by id, or a TraceQL search for ``model.startup`` roots
    (optionally of one service) followed by a fetch of each trace found."""
    budget = ByteBudget(max_bytes)
    if trace_id:
        return [fetch_json(_join(base, "/api/traces/" + urllib.parse.quote(trace_id)), timeout, budget)]
    traceql = f'{{ name = "{SPAN_ROOT}"'
    if service:
        traceql += f' && resource.service.name = "{service}"'
    traceql += " }"
    found = fetch_json(_join(base, "/api/search", {"q": traceql, "limit": limit}), timeout, budget)
    traces = found.get("traces") if isinstance(found, dict) else None
    if not isinstance(traces, list):
        raise LiveSourceError(f"{redact(base)}: the search answer has no trace list")
    ids = [t["traceID"] for t in traces if isinstance(t, dict) and isinstance(t.get("traceID"), str)]
    return [fetch_json(_join(base, "/api/traces/" + urllib.parse.quote(i)), timeout, budget) for i in ids[:limit]]
