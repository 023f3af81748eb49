"""Readers: trace files in, :class:`Span` records out.

This first reader understands OTLP JSON (the protobuf JSON mapping with hex ids) as one
document or as JSON Lines, which is what otel-coldstart's file exporter and the
Collector's file exporter write.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

from .model import Span


class TraceReadError(Exception):
    """The input is not a trace this reader understands; the message is one line."""


def read_trace_file(path: str) -> list[Span]:
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise TraceReadError(f"cannot read {path}: {exc.strerror or exc}") from None
    return parse_otlp_json(data.decode("utf-8", errors="replace"), source=path)


def parse_otlp_json(text: str, source: str = "<input>") -> list[Span]:
    documents = _json_documents(text, source)
    spans: list[Span] = []
    for doc in documents:
        spans.extend(_spans_from_request(doc))
    return spans


def _json_documents(text: str, source: str) -> list[Any]:
    stripped = text.strip()
    if not stripped:
        raise TraceReadError(f"{source}: empty file")
    try:
        return [json.loads(stripped)]
    except json.JSONDecodeError:
        pass
    docs = []
    for number, line in enumerate(stripped.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            docs.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise TraceReadError(f"{source}: line {number} is not JSON ({exc.msg})") from None
    return docs


def _spans_from_request(doc: Any) -> Iterable[Span]:
    if not isinstance(doc, dict):
        raise TraceReadError("not an OTLP trace document (expected an object)")
    for resource_spans in doc.get("resourceSpans") or []:
        resource = _attributes((resource_spans.get("resource") or {}).get("attributes"))
        for scope_spans in resource_spans.get("scopeSpans") or []:
            for raw in scope_spans.get("spans") or []:
                yield _span(raw, resource)


def _span(raw: dict, resource: dict) -> Span:
    parent = raw.get("parentSpanId") or None
    status = (raw.get("status") or {}).get("code", 0)
    status_name = {0: "unset", 1: "ok", 2: "error"}.get(status, "unset")
    return Span(
        trace_id=str(raw.get("traceId", "")).lower(),
        span_id=str(raw.get("spanId", "")).lower(),
        parent_id=parent.lower() if isinstance(parent, str) else None,
        name=str(raw.get("name", "")),
        start_ns=int(raw.get("startTimeUnixNano", 0)),
        end_ns=int(raw.get("endTimeUnixNano", 0)),
        attributes=_attributes(raw.get("attributes")),
        resource=resource,
        status=status_name,
    )


def _attributes(items: Any) -> dict:
    result = {}
    for item in items or []:
        if isinstance(item, dict) and "key" in item:
            result[item["key"]] = _any_value(item.get("value") or {})
    return result


def _any_value(value: dict) -> Any:
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "arrayValue" in value:
        return tuple(_any_value(v) for v in (value["arrayValue"].get("values") or []))
    return None
