"""OTLP JSON and its relatives, into :class:`Span` records.

Handles the protobuf JSON mapping as the SDKs, the Collector's file exporter and Jaeger v2
write it (hex ids in either case, ``kind``/``status.code`` as integers, nanosecond strings)
and as Tempo's gogo jsonpb writes it (``batches``, base64 ids, enum names, the pre-0.15
``instrumentationLibrarySpans``). Wrappers (``{"result": ...}``, ``{"trace": ...}``) are
removed by the caller (readers.py).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

from .. import semconv
from ._values import TraceReadError, as_dict, as_list, failure_type, finite_float, hex_id, int64, unix_ns
from .model import Span, SpanEvent

_STATUS = {0: "unset", 1: "ok", 2: "error", "STATUS_CODE_UNSET": "unset",
           "STATUS_CODE_OK": "ok", "STATUS_CODE_ERROR": "error"}


def is_otlp(doc: Any) -> bool:
    return isinstance(doc, dict) and ("resourceSpans" in doc or "batches" in doc)


def spans_from_otlp(doc: dict) -> Iterator[Span]:
    batches = doc.get("resourceSpans", doc.get("batches"))
    if batches is None:
        return
    if not isinstance(batches, list):
        raise TraceReadError("OTLP document: resourceSpans is not a list")
    for resource_spans in batches:
        resource_spans = as_dict(resource_spans)
        resource = attributes(as_dict(resource_spans.get("resource")).get("attributes"))
        scopes = resource_spans.get("scopeSpans", resource_spans.get("instrumentationLibrarySpans"))
        for scope_spans in as_list(scopes):
            for raw in as_list(as_dict(scope_spans).get("spans")):
                if not isinstance(raw, dict):
                    raise TraceReadError("OTLP document: a span is not an object")
                yield _span(raw, resource)


def _span(raw: dict, resource: dict) -> Span:
    span_id = hex_id(raw.get("spanId"), 16)
    if not span_id:
        raise TraceReadError("OTLP span without a spanId")
    parent = raw.get("parentSpanId")
    raw_status = as_dict(raw.get("status"))
    status = _STATUS.get(raw_status.get("code", 0), "unset")
    attrs = attributes(raw.get("attributes"))
    if status == "error":
        with_failure(attrs, _exception_type(raw.get("events")), raw_status.get("message"))
    return Span(
        trace_id=hex_id(raw.get("traceId"), 32),
        span_id=span_id,
        parent_id=hex_id(parent, 16) if parent else None,
        name=str(raw.get("name") or ""),
        start_ns=unix_ns(raw.get("startTimeUnixNano"), f"span {span_id} startTimeUnixNano"),
        end_ns=unix_ns(raw.get("endTimeUnixNano"), f"span {span_id} endTimeUnixNano"),
        attributes=attrs,
        resource=resource,
        status=status,
        events=_our_events(raw.get("events"), span_id) if raw.get("events") else (),
    )


def with_failure(attrs: dict, exception_type: object, message: object) -> dict:
    """A failed span's attributes with ``error.type`` filled in where the span says its type
    only in its exception event or status message (_values.failure_type)."""
    kind = failure_type(attrs.get(semconv.ERROR_TYPE), exception_type, message)
    if kind is not None:
        attrs[semconv.ERROR_TYPE] = kind
    return attrs


def _exception_type(events: Any) -> Any:
    for item in as_list(events):
        if isinstance(item, dict) and item.get("name") == semconv.EXCEPTION_EVENT:
            found = attributes(as_dict(item).get("attributes")).get(semconv.EXCEPTION_TYPE)
            if found is not None:
                return found
    return None


MAX_EVENTS_PER_SPAN = 64  # ours are one per stall (at most 16); a hostile file gets no more


def _our_events(items: Any, span_id: str) -> tuple:
    """The span's ``coldstart.*`` events (stalls), in time order. Other tools' events (logs,
    exceptions) are not analysed and are not kept: a large trace stays small in memory."""
    events = []
    for item in as_list(items):
        if not isinstance(item, dict):
            continue
        name = item.get("name")
        if not isinstance(name, str) or not name.startswith("coldstart."):
            continue
        time_ns = unix_ns(item.get("timeUnixNano"), f"span {span_id} event timeUnixNano")
        events.append(SpanEvent(sys.intern(name), time_ns, attributes(item.get("attributes"))))
        if len(events) >= MAX_EVENTS_PER_SPAN:
            break
    return tuple(sorted(events, key=lambda e: e.time_ns))


def attributes(items: Any) -> dict:
    result = {}
    for item in as_list(items):
        if isinstance(item, dict) and isinstance(item.get("key"), str):
            value = any_value(item.get("value"))
            if isinstance(value, str) and len(value) <= 64:
                value = sys.intern(value)  # phases, thread names, cache states repeat on every span
            result[sys.intern(item["key"])] = value
    return result


def any_value(value: Any, depth: int = 0) -> Any:
    if not isinstance(value, dict) or depth > 8:
        return None
    if "stringValue" in value:
        return str(value["stringValue"])
    if "boolValue" in value:
        return value["boolValue"] in (True, "true")
    if "intValue" in value:
        return int64(value["intValue"])
    if "doubleValue" in value:
        return finite_float(value["doubleValue"])
    if "arrayValue" in value:
        items = as_list(as_dict(value["arrayValue"]).get("values"))
        return tuple(any_value(v, depth + 1) for v in items)
    if "bytesValue" in value:
        return str(value["bytesValue"])
    return None
