"""OTLP/JSON for finished SDK spans, without protobuf.

The embedded default file is one ``ExportTraceServiceRequest`` per line in the protobuf
JSON mapping with hex ids (as the Collector's file exporter writes it). Going through
``encode_spans`` and ``google.protobuf.json_format.MessageToDict`` costs ~30 ms of imports
(protobuf, the generated OTLP messages) on the start-up's own time when the file is written
at ``ready()``; this module writes the same document from the spans directly.

It mirrors ``opentelemetry.exporter.otlp.proto.common`` exactly: the same grouping
(resource, then instrumentation scope, first-seen order), fields in field-number order,
proto3 defaults omitted (empty strings, zero counts, unset status code), 64-bit integers as
decimal strings, enums as integers, NaN/Infinity as strings, bytes as base64, and an
attribute protobuf would refuse (an int outside int64, an unknown type) dropped with a log
line as the SDK encoder drops it. tests/core/test_otlp_json.py checks it byte for byte
against the protobuf path.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

_logger = logging.getLogger(__name__)

_INFINITY = float("inf")
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
# SpanFlags: SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK, SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK.
_HAS_IS_REMOTE = 0x100
_IS_REMOTE = 0x200
# opentelemetry.trace.SpanKind values are 0..4 (INTERNAL..CONSUMER); OTLP's are 1..5.
_KIND_OFFSET = 1


class _Unencodable(Exception):
    pass


def _double(value: float) -> Any:
    if value != value:  # NaN (math.isnan without importing math: this module is on the start-up's path)
        return "NaN"
    if value in (_INFINITY, -_INFINITY):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def _any_value(value: Any) -> dict:
    if value is None:
        return {}
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, int):
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise _Unencodable(f"int {value} is outside int64")
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": _double(value)}
    if isinstance(value, bytes):
        import base64  # here: bytes attributes are rare; the module is ~1 ms on instrument()'s path

        return {"bytesValue": base64.b64encode(value).decode("ascii")}
    if isinstance(value, Sequence):
        values = [_any_value(v) for v in value]
        return {"arrayValue": {"values": values} if values else {}}
    if isinstance(value, Mapping):
        pairs = [_key_value(str(k), v) for k, v in value.items()]
        return {"kvlistValue": {"values": pairs} if pairs else {}}
    raise _Unencodable(f"Invalid type {type(value)} of value {value}")


def _key_value(key: str, value: Any) -> dict:
    pair: dict[str, Any] = {}
    if key:
        pair["key"] = key
    pair["value"] = _any_value(value)
    return pair


def _attributes(attributes) -> list[dict]:
    if not attributes:
        return []
    encoded = []
    for key, value in attributes.items():
        try:
            encoded.append(_key_value(key, value))
        except _Unencodable as error:  # the SDK encoder logs and drops it too
            _logger.exception("Failed to encode key %s: %s", key, error)
    return encoded


def _flags(parent) -> int:
    flags = _HAS_IS_REMOTE
    if parent is not None and parent.is_remote:
        flags |= _IS_REMOTE
    return flags


def _put(record: dict, key: str, value: Any) -> None:
    """Set a scalar field unless it holds its proto3 default (then protobuf omits it)."""
    if value:
        record[key] = value


def _put_u64(record: dict, key: str, value: int | None) -> None:
    if value:
        record[key] = str(value)


def _span(span) -> dict:
    context = span.get_span_context()
    record: dict[str, Any] = {
        "traceId": format(context.trace_id, "032x"),
        "spanId": format(context.span_id, "016x"),
    }
    if context.trace_state is not None:
        _put(record, "traceState", ",".join(f"{k}={v}" for k, v in context.trace_state.items()))
    if span.parent is not None:
        record["parentSpanId"] = format(span.parent.span_id, "016x")
    _put(record, "name", span.name)
    _put(record, "kind", span.kind.value + _KIND_OFFSET)
    _put_u64(record, "startTimeUnixNano", span.start_time)
    _put_u64(record, "endTimeUnixNano", span.end_time)
    _put(record, "attributes", _attributes(span.attributes))
    _put(record, "droppedAttributesCount", span.dropped_attributes)
    if span.events:
        events = []
        for event in span.events:
            encoded: dict[str, Any] = {}
            _put_u64(encoded, "timeUnixNano", event.timestamp)
            _put(encoded, "name", event.name)
            _put(encoded, "attributes", _attributes(event.attributes))
            _put(encoded, "droppedAttributesCount", event.dropped_attributes)
            events.append(encoded)
        record["events"] = events
    _put(record, "droppedEventsCount", span.dropped_events)
    if span.links:
        links = []
        for link in span.links:
            encoded = {"traceId": format(link.context.trace_id, "032x"),
                       "spanId": format(link.context.span_id, "016x")}
            _put(encoded, "attributes", _attributes(link.attributes))
            _put(encoded, "droppedAttributesCount", link.dropped_attributes)
            encoded["flags"] = _flags(link.context)
            links.append(encoded)
        record["links"] = links
    _put(record, "droppedLinksCount", span.dropped_links)
    if span.status is not None:
        status: dict[str, Any] = {}
        _put(status, "message", span.status.description)
        _put(status, "code", span.status.status_code.value)
        record["status"] = status
    record["flags"] = _flags(span.parent)
    return record


def _scope(scope) -> dict:
    if scope is None:
        return {}
    encoded: dict[str, Any] = {}
    _put(encoded, "name", scope.name)
    _put(encoded, "version", scope.version)
    _put(encoded, "attributes", _attributes(scope.attributes))
    return encoded


def spans_to_otlp_json_line(spans: Sequence) -> str:
    """The OTLP/JSON ``ExportTraceServiceRequest`` for finished SDK spans (``ReadableSpan``),
    as one compact line of text: what ``MessageToDict(encode_spans(spans),
    use_integers_for_enums=True)`` gives, with hex trace and span ids (the OTLP spec's one
    deviation from the protobuf JSON mapping), dumped with ``separators=(",", ":")``.

    Built one span at a time: each span's dicts are turned into text and freed before the
    next is built. The whole batch built as one document kept a few hundred container
    objects alive at once, and a flush on a thread of ours then set off collections of the
    host's young objects inside the host's load (docs/decisions.md, seventh round)."""
    import json  # first needed at the first write, on a thread of ours

    dumps = json.JSONEncoder(separators=(",", ":")).encode
    grouped: dict = {}
    for span in spans:
        text = dumps(_span(span))
        grouped.setdefault(span.resource, {}).setdefault(span.instrumentation_scope or None, []).append(text)
    if not grouped:
        return "{}"
    resource_texts = []
    for resource, scopes in grouped.items():
        scope_texts = []
        for scope, texts in scopes.items():
            schema_url = scope.schema_url if scope is not None else None
            scope_texts.append('{"scope":' + dumps(_scope(scope)) + ',"spans":[' + ",".join(texts) + "]"
                               + (',"schemaUrl":' + dumps(schema_url) if schema_url else "") + "}")
        attributes = _attributes(resource.attributes)
        resource_texts.append('{"resource":' + dumps({"attributes": attributes} if attributes else {})
                              + ',"scopeSpans":[' + ",".join(scope_texts) + "]"
                              + (',"schemaUrl":' + dumps(resource.schema_url) if resource.schema_url else "")
                              + "}")
    return '{"resourceSpans":[' + ",".join(resource_texts) + "]}"

