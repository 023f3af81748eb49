"""Jaeger JSON (the query API's ``/api/traces`` and the UI's "Download JSON") into spans.

Quirks handled: list attributes written as their JSON text (analyze/list_values.py); microsecond times; ids without leading zeros (Jaeger 1.x before Dec 2019);
CHILD_OF preferred over FOLLOWS_FROM, references into other traces ignored; typed tags
with int64 written as strings beyond 2^53; process tags become the resource; a span may
carry its process inline instead of a ``processID``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .. import semconv
from ._values import (
    TraceReadError,
    as_dict,
    as_list,
    coerce_string,
    duration_ns,
    failure_type,
    finite_float,
    hex_id,
    int64,
    unix_ns,
)
from .list_values import lists_from_text
from .model import Span


def is_jaeger_trace(doc: Any) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("spans"), list) and (
        "traceID" in doc or "processes" in doc or any(
            isinstance(s, dict) and "spanID" in s for s in doc["spans"][:1]))


def is_jaeger_envelope(doc: Any) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("data"), list)


def spans_from_jaeger_envelope(doc: dict) -> Iterator[Span]:
    for trace in doc["data"]:
        if not is_jaeger_trace(trace):
            raise TraceReadError("Jaeger document: an entry of data is not a trace")
        yield from spans_from_jaeger_trace(trace)


def spans_from_jaeger_trace(trace: dict) -> Iterator[Span]:
    processes = {key: _process(value) for key, value in as_dict(trace.get("processes")).items()}
    for raw in trace["spans"]:
        if not isinstance(raw, dict):
            raise TraceReadError("Jaeger trace: a span is not an object")
        inline = raw.get("process")
        process_id = raw.get("processID")
        if isinstance(inline, dict):
            resource = _process(inline)
        else:  # a hostile processID ([] or {}) is not a key: no process, not a TypeError
            resource = processes.get(process_id, {}) if isinstance(process_id, str) else {}
        yield _span(raw, resource)


def _process(raw: Any) -> dict:
    raw = as_dict(raw)
    resource = tags(raw.get("tags"))
    if isinstance(raw.get("serviceName"), str):
        resource["service.name"] = raw["serviceName"]
    return resource


def _span(raw: dict, resource: dict) -> Span:
    trace_id = hex_id(raw.get("traceID"), 32)
    span_id = hex_id(raw.get("spanID"), 16)
    if not span_id:
        raise TraceReadError("Jaeger span without a spanID")
    start = unix_ns(raw.get("startTime"), f"span {span_id} startTime", 1000)
    length = duration_ns(raw.get("duration"), f"span {span_id} duration", 1000)
    attrs = tags(raw.get("tags"))
    error = attrs.get("error") is True or attrs.get("otel.status_code") == "ERROR"
    if error:  # OTLP's status and exception event, as Jaeger's converter writes them: a tag and a log
        kind = failure_type(attrs.get(semconv.ERROR_TYPE), _exception_type(raw.get("logs")),
                            attrs.get("otel.status_description"))
        if kind is not None:
            attrs[semconv.ERROR_TYPE] = kind
    return Span(
        trace_id=trace_id,
        span_id=span_id,
        parent_id=_parent(raw, trace_id),
        name=str(raw.get("operationName") or ""),
        start_ns=start,
        end_ns=min(start + length, 2**63 - 1),
        attributes=attrs,
        resource=resource,
        status="error" if error else ("ok" if attrs.get("otel.status_code") == "OK" else "unset"),
    )


def _exception_type(logs: Any) -> Any:
    for log in as_list(logs):
        fields = tags(as_dict(log).get("fields"))
        if fields.get("event") == semconv.EXCEPTION_EVENT and fields.get(semconv.EXCEPTION_TYPE) is not None:
            return fields[semconv.EXCEPTION_TYPE]
    return None


def _parent(raw: dict, trace_id: str) -> str | None:
    refs = [as_dict(r) for r in as_list(raw.get("references"))]
    same_trace = [r for r in refs if hex_id(r.get("traceID"), 32) in (trace_id, "")]
    for kind in ("CHILD_OF", "FOLLOWS_FROM"):
        for ref in same_trace:
            if ref.get("refType", "CHILD_OF") == kind and ref.get("spanID"):
                return hex_id(ref["spanID"], 16)
    legacy = raw.get("parentSpanID")
    return hex_id(legacy, 16) if legacy and legacy != "0" else None


def tags(items: Any) -> dict:
    result = {}
    for item in as_list(items):
        if isinstance(item, dict) and isinstance(item.get("key"), str):
            result[item["key"]] = _tag_value(item.get("type"), item.get("value"))
    return lists_from_text(result)  # our list attributes, written as their JSON text


def _tag_value(kind: Any, value: Any) -> Any:
    if kind == "bool":
        return value in (True, "true")
    if kind == "int64":
        return int64(value)
    if kind == "float64":
        return finite_float(value)
    if isinstance(value, str) and kind is None:
        return coerce_string(value)
    if isinstance(value, float):
        return finite_float(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return int64(value)
    return value if isinstance(value, (str, bool)) else None
