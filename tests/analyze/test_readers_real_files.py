"""Real files written by Jaeger, the Collector/SDKs, Tempo and Zipkin (tests/data/traces,
origins in ORIGIN.md): format detected, quirks handled, no start-up -> exit 5."""

from __future__ import annotations

import collections

import pytest

from analyze_records import data_file
from otel_coldstart.analyze.readers import read_trace
from otel_coldstart.cli import main

REAL = {
    # file: (format, spans after repair, distinct traces)
    "ui-trace.json": ("jaeger", 2, 1),
    "2992f2a5b5d037a8aabffd08ef384237.json": ("jaeger", 2, 1),
    "ui_01.json": ("jaeger", 5, 1),
    "otlp2jaeger-out.json": ("jaeger", 1, 1),
    "trace.json": ("otlp", 1, 1),
    "otlp2jaeger-multi-in.json.txt": ("otlp-lines", 4, 1),
    "error_timeout_masked.json": ("otlp", 26, 1),
    "getTrace-response.json": ("otlp", 40, 1),
    "responseTrace.json": ("tempo", 8, 1),
    "trace-with-failed-requests.json": ("tempo", 15, 1),
    "trace-with-queue-database.json": ("otlp", 19, 1),
    "trace-with-virtual-nodes.json": ("otlp", 3, 2),
    "zipkin-smartthings-oauth-authorization.json": ("zipkin", 175, 1),
    "zipkin-skew.json": ("zipkin", 4, 1),
    "zipkin-messaging.json": ("zipkin", 4, 1),
    "zipkin-messaging2.json": ("zipkin", 11, 1),
}


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_file_parses_with_detected_format(name):
    result = read_trace(data_file(name))
    fmt, count, traces = REAL[name]
    assert result.format == fmt
    assert len(result.spans) == count
    assert len({s.trace_id for s in result.spans}) == traces
    for span in result.spans:
        assert len(span.trace_id) == 32 and span.trace_id == span.trace_id.lower()
        assert span.end_ns >= span.start_ns > 1_400_000_000 * 10**9


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_file_without_startup_exits_5_with_message(name, capsys):
    assert main(["analyze", data_file(name)]) == 5
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "no model.startup span" in err and "Traceback" not in err


def by_id(name):
    return {s.span_id: s for s in read_trace(data_file(name)).spans}


def test_jaeger_ids_without_leading_zero_are_padded_and_linked():
    spans = by_id("ui-trace.json")
    assert set(spans) == {"2db17286b3e6b148", "0ec2b4e0bcea566d"}
    assert spans["0ec2b4e0bcea566d"].parent_id == "2db17286b3e6b148"
    assert spans["2db17286b3e6b148"].trace_id == "0000000000000000" "2db17286b3e6b148"
    assert spans["2db17286b3e6b148"].attributes["http.status_code"] == 200
    assert spans["2db17286b3e6b148"].start_ns == 1571326774777373 * 1000


def test_jaeger_follows_from_is_the_parent_and_key_order_does_not_matter():
    spans = by_id("2992f2a5b5d037a8aabffd08ef384237.json")
    child = next(s for s in spans.values() if s.name == "thread")
    assert child.parent_id in spans and spans[child.parent_id].parent_id is None


def test_jaeger_bare_trace_typed_tags_duplicate_ids_and_foreign_references():
    spans = by_id("ui_01.json")
    assert "0000000000000002#2" in spans  # two different spans shared one id
    tagged = next(s for s in spans.values() if "javascript_limit" in s.attributes)
    assert tagged.attributes["javascript_limit"] == 9223372036854775222  # int64 written as a string
    assert tagged.attributes["temperature"] == 72.5 and tagged.attributes["error"] is True
    assert tagged.status == "error" and tagged.resource["service.name"] == "service-x"
    reference_test = next(s for s in spans.values() if s.name == "reference-test")
    assert reference_test.parent_id == "0000000000000002"  # not the CHILD_OF into trace 0xff


def test_otlp_uppercase_ids_lines_empty_parent_and_exact_nanoseconds():
    assert next(iter(by_id("trace.json"))) == "eee19b7ec3c1b174"
    spans = read_trace(data_file("otlp2jaeger-multi-in.json.txt")).spans
    main_span = next(s for s in spans if s.name == "main")
    assert main_span.parent_id is None
    assert any(s.end_ns == 1711138247024460625 for s in spans)  # 19 digits, not rounded by float


def test_jaeger_v2_result_wrapper_and_otlp_status():
    spans = read_trace(data_file("getTrace-response.json")).spans
    assert sum(1 for s in spans if s.status == "error") == 3
    assert len({s.resource["service.name"] for s in spans}) == 6


def test_tempo_base64_ids_enum_names_and_old_scope_names():
    spans = by_id("responseTrace.json")
    assert "49cd77d1f9dcd936" in spans  # base64 "Sc130fnc2TY="
    assert next(iter(spans.values())).trace_id == "3ba55609c3cde49649cd77d1f9dcd936"
    failed = read_trace(data_file("trace-with-failed-requests.json")).spans
    assert sum(1 for s in failed if s.status == "error") == 3
    assert any(s.status == "ok" for s in failed)


def test_zipkin_shared_span_copies_become_a_client_server_hop():
    spans = by_id("zipkin-skew.json")
    server = spans["74280ae0c10d8062"]
    client = spans["74280ae0c10d8062.client"]
    assert server.parent_id == client.span_id and client.parent_id == "bf396325699c84bf"
    big = read_trace(data_file("zipkin-smartthings-oauth-authorization.json")).spans
    assert sum(1 for s in big if s.span_id.endswith(".client")) == 41  # 41 shared ids (one with 5 server copies)
    assert sum(1 for s in big if s.duration_ns == 0) >= 19  # no duration: shown as instants


def test_zipkin_missing_parents_are_warned_not_fatal():
    result = read_trace(data_file("zipkin-messaging2.json"))
    assert any("not in the input" in w for w in result.warnings)
    counts = collections.Counter(s.parent_id for s in result.spans)
    assert counts["0153a596db406c83"] >= 1
