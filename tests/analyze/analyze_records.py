"""Hand-built span records for the analyzer's unit tests: a start-up is written as a list
of (name, phase, start_ms, end_ms, attributes) relative to the root, so each test reads as
the timeline it checks."""

from __future__ import annotations

import itertools
import os

from otel_coldstart import semconv
from otel_coldstart.analyze.breakdown import Breakdown, breakdowns
from otel_coldstart.analyze.model import Span

DATA = os.path.join(os.path.dirname(__file__), "..", "data", "traces")
MS = 1_000_000
T0 = 1_700_000_000_000_000_000
_ids = itertools.count(1)


def data_file(name: str) -> str:
    return os.path.join(DATA, name)


def span_id() -> str:
    return f"{next(_ids):016x}"


def root(duration_ms: float, trace: str = "ab" * 16, rank: int | None = None, resource: dict | None = None,
         **attrs) -> Span:
    attributes = {semconv.READY: True, semconv.THREAD_ID: 1, **attrs}
    if rank is not None:
        attributes[semconv.RANK] = rank
    return Span(trace, span_id(), None, semconv.SPAN_ROOT, T0, T0 + int(duration_ms * MS),
                attributes, resource or {})


def child(parent: Span, name: str, phase: str | None, start_ms: float, end_ms: float, thread: int = 1,
          **attrs) -> Span:
    attributes = {semconv.THREAD_ID: thread, **attrs}
    if phase is not None:
        attributes[semconv.PHASE] = phase
    return Span(parent.trace_id, span_id(), parent.span_id, name, T0 + int(start_ms * MS),
                T0 + int(end_ms * MS), attributes, parent.resource)


def shard(parent: Span, index: int, start_ms: float, end_ms: float, size: int, state: str,
          read_bytes: int | None = None, fmt: str = "safetensors", count: int = 4) -> Span:
    attrs = {semconv.FILE_PATH: f"/ckpt/model-{index + 1:05d}.{'safetensors' if fmt == 'safetensors' else 'bin'}",
             semconv.FILE_SIZE: size, semconv.FILE_FORMAT: fmt, semconv.SHARD_INDEX: index,
             semconv.SHARD_COUNT: count, semconv.CACHE_STATE: state, semconv.BYTES: size}
    if read_bytes is not None:
        attrs[semconv.IO_READ_BYTES] = read_bytes
    return child(parent, "coldstart.deserialize", semconv.PHASE_DESERIALIZE, start_ms, end_ms, **attrs)


def aggregate(parent: Span, phase: str, start_ms: float, end_ms: float, busy_ms: float, calls: int,
              nbytes: int, **attrs) -> Span:
    return child(parent, f"coldstart.{phase}", phase, start_ms, end_ms, **{
        semconv.AGGREGATE: True, semconv.CALLS: calls, semconv.BUSY_S: busy_ms / 1000,
        semconv.BYTES: nbytes, **attrs})


def otlp_value(value) -> dict:
    """One OTLP JSON attribute value, as the plugin writes it (ints as decimal strings)."""
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, (list, tuple)):
        return {"arrayValue": {"values": [otlp_value(v) for v in value]}}
    return {"stringValue": str(value)}


def otlp_attr(key: str, value) -> dict:
    """One OTLP JSON attribute, as the plugin writes it."""
    return {"key": key, "value": otlp_value(value)}


def only(spans: list[Span]) -> Breakdown:
    results = breakdowns(spans)
    assert len(results) == 1, results
    return results[0]


def write_otlp(path, spans) -> str:
    """Records as the OTLP JSON Lines file the plugin writes."""
    import json

    lines = []
    for s in spans:
        raw = {"traceId": s.trace_id, "spanId": s.span_id, "name": s.name, "startTimeUnixNano": str(s.start_ns),
               "endTimeUnixNano": str(s.end_ns),
               "attributes": [otlp_attr(k, v) for k, v in s.attributes.items()]}
        if s.parent_id:
            raw["parentSpanId"] = s.parent_id
        resource = [otlp_attr(k, v) for k, v in s.resource.items()]
        lines.append(json.dumps({"resourceSpans": [{"resource": {"attributes": resource},
                                                    "scopeSpans": [{"scope": {"name": "t"}, "spans": [raw]}]}]}))
    path.write_text("\n".join(lines) + "\n")
    return str(path)
