"""The hand-written OTLP/JSON encoder (otlp_json.py) writes, byte for byte, what the
protobuf path (encode_spans + MessageToDict, hex ids) writes: real SDK spans with every
field the SDK can set, and hypothesis over attribute values."""

from __future__ import annotations

import base64
import json
import math

from google.protobuf.json_format import MessageToDict
from hypothesis import HealthCheck, given, settings, strategies as st
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
)

from _examples import examples
from otel_coldstart.otlp_json import spans_to_otlp_json_line


def _protobuf_document(spans) -> dict:
    document = MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    for resource_spans in document.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                for record in [span, *span.get("links", [])]:
                    for field in ("traceId", "spanId", "parentSpanId"):
                        if record.get(field):
                            record[field] = base64.b64decode(record[field]).hex()
    return document


def _line(document: dict) -> str:
    return json.dumps(document, separators=(",", ":"))


def _provider(resource: Resource | None = None):
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=resource or Resource.create({"service.name": "t", "n": 3}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def test_every_span_field_matches_protobuf_byte_for_byte():
    provider, exporter = _provider()
    tracer = provider.get_tracer("otel_coldstart", "0.1.0", schema_url="https://opentelemetry.io/schemas/1.21.0")
    other = provider.get_tracer("user.lib")
    remote = SpanContext(0x1234, 0x99, is_remote=True, trace_flags=TraceFlags(1),
                         trace_state=TraceState([("vendor", "a=b"), ("x", "1")]))
    with tracer.start_as_current_span("model.startup", start_time=1_700_000_000_000_000_001,
                                      context=trace.set_span_in_context(NonRecordingSpan(remote)),
                                      attributes={"coldstart.ready": False, "coldstart.rank": 0,
                                                  "big": 2**62, "neg": -5, "f": 0.0, "g": 1.5,
                                                  "nan": math.nan, "inf": -math.inf, "s": "",
                                                  "list": ["a", "b"], "ints": [1, 2], "empty": [],
                                                  "bools": [True, False], "floats": [1.0, math.inf]}):
        with other.start_as_current_span("user.step", kind=SpanKind.CLIENT,
                                         links=[Link(remote, {"why": "launcher"}), Link(remote)]) as span:
            span.add_event("coldstart.stall", {"stack": "frame\nframe", "n": 1}, timestamp=5)
            span.add_event("bare")
            span.set_status(Status(StatusCode.ERROR, "RuntimeError: boom"))
        with tracer.start_as_current_span("ok") as span:
            span.set_status(Status(StatusCode.OK))
        tracer.start_span("never-ended-attrs", attributes={}).end(end_time=7)
    spans = exporter.get_finished_spans()
    assert len(spans) == 4
    assert spans_to_otlp_json_line(spans) == _line(_protobuf_document(spans))


def test_several_resources_and_scopes_group_as_protobuf_does():
    provider_a, exporter_a = _provider(Resource.create({"service.name": "a"}))
    provider_b, exporter_b = _provider(Resource({"service.name": "b"}, schema_url="https://example/s"))
    for provider in (provider_a, provider_b, provider_a):
        for scope in ("one", "two", "one"):
            provider.get_tracer(scope).start_span(f"{scope}-span").end()
    spans = [exporter_a.get_finished_spans()[0], exporter_b.get_finished_spans()[0],
             *exporter_a.get_finished_spans()[1:], *exporter_b.get_finished_spans()[1:]]
    assert spans_to_otlp_json_line(spans) == _line(_protobuf_document(spans))
    assert json.loads(spans_to_otlp_json_line([])) == _protobuf_document([]) == {}
    assert spans_to_otlp_json_line([]) == "{}"


_scalars = (st.booleans() | st.text(max_size=20) | st.integers(min_value=-(2**64), max_value=2**64)
            | st.floats(allow_nan=True, allow_infinity=True) | st.binary(max_size=8))
_values = _scalars | st.lists(st.integers(min_value=-(2**64), max_value=2**64), max_size=4) | st.lists(
    st.text(max_size=5), max_size=4) | st.lists(st.floats(), max_size=3) | st.lists(st.booleans(), max_size=3)


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(attributes=st.dictionaries(st.text(max_size=12), _values, max_size=6),
       name=st.text(max_size=15), description=st.none() | st.text(max_size=10))
def test_any_attribute_value_matches_protobuf(attributes, name, description):
    provider, exporter = _provider(Resource.create({"r": 1}))
    span = provider.get_tracer("fuzz").start_span(name, attributes=attributes)
    span.add_event(name, attributes)
    if description is not None:
        span.set_status(Status(StatusCode.ERROR, description))
    span.end()
    spans = exporter.get_finished_spans()
    assert spans_to_otlp_json_line(spans) == _line(_protobuf_document(spans))
