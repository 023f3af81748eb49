"""The msgspec fast path for OTLP JSON Lines gives exactly the records of the general
reader: on the real trace files, and on generated lines with odd values (hypothesis), where
it either agrees or declines the line (and the general path reads it). "Exactly": equal
records, the same type for every attribute value (True == 1 and 1 == 1.0 would hide a
difference), and the same fields a record derives at construction (phase, thread, busy time),
which equality leaves out."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from _examples import examples
from analyze_records import data_file
from otel_coldstart import semconv
from otel_coldstart.analyze.model import Attributes, Span
from otel_coldstart.analyze.read_otlp import spans_from_otlp
from otel_coldstart.analyze.read_otlp_fast import spans_from_line
from otel_coldstart.analyze.readers import read_trace
from otel_coldstart.cli import main

REAL = ["demo-cold-first-shard.otlp.jsonl", "demo-warm.otlp.jsonl", "demo-two-ranks.otlp.jsonl"]


def _general(line: bytes):
    return list(spans_from_otlp(json.loads(line)))


def _exactly(spans) -> list:
    """What two readings must agree on, beyond Span equality."""
    return [(span, span.phase, span.thread_id, span.aggregate_busy_ns, span.is_aggregate, span.busy_ns,
             [(key, type(value), value) for key, value in span.attributes.items()],
             [(key, type(value), value) for key, value in span.resource.items()]) for span in spans]


def test_spans_with_stall_events_keep_them():
    line = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{
        "traceId": "ab" * 16, "spanId": "01" * 8, "name": "coldstart.progress", "startTimeUnixNano": "5",
        "endTimeUnixNano": "6", "events": [{"name": "coldstart.stall", "timeUnixNano": "6"}]}]}]}]}).encode()
    assert spans_from_line(line) is None  # declined: the general reader keeps the event
    assert _general(line)[0].events[0].name == "coldstart.stall"


def test_real_files_read_the_same_both_ways():
    for name in REAL:
        with open(data_file(name), "rb") as handle:
            for line in handle:
                if line.strip():
                    fast = spans_from_line(line)
                    assert fast is not None and _exactly(fast) == _exactly(_general(line))


values = st.one_of(
    st.fixed_dictionaries({"stringValue": st.one_of(st.text(max_size=8), st.none(), st.integers())}),
    st.fixed_dictionaries({"intValue": st.one_of(st.integers(-2**70, 2**70), st.text("0123456789-x +", max_size=6),
                                                 st.sampled_from(["99999999999999999999999", "1e3", "0x10"]))}),
    st.fixed_dictionaries({"boolValue": st.one_of(st.booleans(), st.sampled_from(["true", "false", "yes"]))}),
    st.fixed_dictionaries({"doubleValue": st.one_of(st.floats(allow_nan=False), st.sampled_from(["1.5", "NaN", "x"]))}),
    st.fixed_dictionaries({"arrayValue": st.fixed_dictionaries({"values": st.lists(
        st.fixed_dictionaries({"intValue": st.sampled_from(["1", "2"])}), max_size=3)})}),
    st.fixed_dictionaries({"kvlistValue": st.just({"values": []})}),
    st.none(), st.integers(),
)
ids = st.one_of(st.text("0123456789abcdefABCDEF", min_size=1, max_size=32), st.integers(0, 2**64), st.none(),
                st.just("AAAAAAAAAAE="))
times = st.one_of(st.integers(0, 2**63 - 1).map(str), st.integers(-5, 2**64), st.floats(0, 1e18),
                  st.sampled_from(["12abc", "1.5", " 7", "-3", "99999999999999999999"]), st.none())
span = st.fixed_dictionaries({
    "traceId": ids, "spanId": ids, "name": st.one_of(st.text(max_size=10), st.none(), st.integers()),
    "attributes": st.lists(st.fixed_dictionaries({"key": st.sampled_from(["a", "coldstart.phase", "b"]),
                                                  "value": values}), max_size=4),
}, optional={"events": st.lists(st.fixed_dictionaries({
    "name": st.sampled_from(["coldstart.stall", "exception"]), "timeUnixNano": times}), max_size=2),
    "startTimeUnixNano": times, "endTimeUnixNano": times, "parentSpanId": st.one_of(ids, st.just("")),
             "status": st.one_of(st.fixed_dictionaries({"code": st.sampled_from([0, 1, 2, "2", "STATUS_CODE_ERROR", 7])}),
                                 st.just("bad"))})
document = st.fixed_dictionaries({"resourceSpans": st.lists(st.fixed_dictionaries({
    "resource": st.one_of(st.none(), st.fixed_dictionaries({"attributes": st.lists(st.fixed_dictionaries(
        {"key": st.just("host.name"), "value": values}), max_size=2)})),
    "scopeSpans": st.lists(st.fixed_dictionaries({"spans": st.lists(span, max_size=3)}), max_size=2),
}), max_size=2)})


def _outcome(fn, *args):
    try:
        result = fn(*args)
        return ("ok", None if result is None else _exactly(result))
    except Exception as exc:  # compare failures as well: the same one-line error
        return ("error", type(exc).__name__, str(exc))


def _agrees_or_declines(doc) -> None:
    line = json.dumps(doc).encode()
    fast = _outcome(spans_from_line, line)
    if fast != ("ok", None):  # None: declined, the general path reads it
        assert fast == _outcome(_general, line)


@settings(max_examples=examples(600), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(document)
def test_fast_path_agrees_or_declines(doc):
    _agrees_or_declines(doc)


# Lines both paths take whole, with the values that need care: int64 in every notation
# (the decoder reads "1e3" and "1.0" as numbers, and so must the general path), ints past
# int64, doubles written as ints or strings, and the attributes a record derives fields from
# (phase, thread, aggregate, busy_s) holding the wrong types.
int_texts = st.one_of(
    st.integers(-2**64, 2**64).map(str),
    st.integers(-2**60, 2**60).flatmap(lambda n: st.sampled_from([f"{n}.0", f"{n}e0", f"{n}.000", f"{n}E0"])),
    st.floats(-1e20, 1e20, allow_nan=False).flatmap(lambda x: st.sampled_from([repr(x), f"{x:e}", f"{x:.3f}"])),
    st.from_regex(r"-?[0-9]{1,4}(\.[0-9]{0,3})?([eE][-+]?[0-9]{1,2})?", fullmatch=True),
    st.sampled_from(["1e3", "1.000000000000000000000000001", "9007199254740993.0", "9223372036854775807",
                     "-9223372036854775808", "9223372036854775808", "1e19", "00012", " 7", "+5", "1_000"]),
)
typed_values = st.one_of(
    st.fixed_dictionaries({"stringValue": st.one_of(st.text(max_size=6), st.sampled_from(["import", "h2d", "x" * 70]))}),
    st.fixed_dictionaries({"intValue": st.one_of(int_texts, st.integers(-2**64, 2**64))}),
    st.fixed_dictionaries({"boolValue": st.one_of(st.booleans(), st.sampled_from(["true", "false"]))}),
    st.fixed_dictionaries({"doubleValue": st.one_of(st.floats(allow_nan=False), st.floats(0, 5), st.integers(-10, 10),
                                                    st.sampled_from(["1.5", "-0.0", "Infinity", "1e400"]))}),
    st.none(),
)
keys = st.sampled_from([semconv.PHASE, semconv.THREAD_ID, semconv.AGGREGATE, semconv.BUSY_S, "thread.name", "a"])
hex_ids = lambda width: st.one_of(st.text("0123456789abcdef", min_size=width, max_size=width),  # noqa: E731
                                  st.text("0123456789ABCDEF", min_size=1, max_size=width))
nanos = st.one_of(st.integers(0, 2**63 - 1), st.integers(0, 10**10)).map(str)  # the second: busy_s < duration
clean_span = st.fixed_dictionaries({
    "traceId": hex_ids(32), "spanId": hex_ids(16), "name": st.sampled_from(["coldstart.h2d", "model.startup", ""]),
    "startTimeUnixNano": nanos, "endTimeUnixNano": nanos,
    "attributes": st.lists(st.fixed_dictionaries({"key": keys, "value": typed_values}), max_size=6),
}, optional={"parentSpanId": st.one_of(hex_ids(16), st.just("")), "status": st.fixed_dictionaries(
    {"code": st.sampled_from([0, 1, 2])}, optional={"message": st.sampled_from(["OSError: gone", ""])})})
clean_document = st.fixed_dictionaries({"resourceSpans": st.lists(st.fixed_dictionaries({
    "resource": st.fixed_dictionaries({"attributes": st.lists(st.fixed_dictionaries(
        {"key": st.sampled_from(["host.name", "process.pid"]), "value": typed_values}), max_size=2)}),
    "scopeSpans": st.lists(st.fixed_dictionaries({"spans": st.lists(clean_span, min_size=1, max_size=3)}),
                           min_size=1, max_size=2),
}), min_size=1, max_size=2)})


@settings(max_examples=examples(600), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clean_document)
def test_lines_both_paths_take_give_the_same_records_and_derived_fields(doc):
    _agrees_or_declines(doc)


def test_int_attributes_past_int64_are_absent_in_json_lines_too(tmp_path, capsys):
    # On the fast path these were kept as Python ints of any size, where the general path
    # drops them: a busy_s of 400 digits then failed building the record (OverflowError,
    # a traceback from analyze), and a uint64 byte count was summed as if real.
    def line(trace):
        return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [
            {"traceId": trace, "spanId": "2" * 16, "parentSpanId": "1" * 16, "name": "coldstart.h2d",
             "startTimeUnixNano": "2000000000", "endTimeUnixNano": "3000000000", "attributes": [
                 {"key": semconv.PHASE, "value": {"stringValue": "h2d"}},
                 {"key": semconv.AGGREGATE, "value": {"boolValue": True}},
                 {"key": semconv.BUSY_S, "value": {"intValue": "1" + "0" * 400}},
                 {"key": "coldstart.bytes", "value": {"intValue": "18446744073709551615"}},
                 {"key": "coldstart.calls", "value": {"intValue": -2**63 - 1}}]},
            {"traceId": trace, "spanId": "1" * 16, "name": semconv.SPAN_ROOT, "startTimeUnixNano": "1000000000",
             "endTimeUnixNano": "9000000000", "attributes": []}]}]}]})
    path = tmp_path / "t.jsonl"
    path.write_text(line("ab" * 16) + "\n" + line("cd" * 16) + "\n")
    for span in read_trace(str(path)).spans:
        if span.name == "coldstart.h2d":
            assert [span.attributes[k] for k in (semconv.BUSY_S, "coldstart.bytes", "coldstart.calls")] == [None] * 3
            assert span.aggregate_busy_ns == 10**9  # busy_s absent: the whole duration
    assert main(["analyze", str(path), "--format", "json"]) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in err and json.loads(out)["startups"]


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from([semconv.PHASE, semconv.THREAD_ID, semconv.AGGREGATE, semconv.BUSY_S, "a"]),
                       st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**63 - 1), st.floats(),
                                 st.floats(0, 2000), st.integers(0, 2000), st.text(max_size=3), st.just(())),
                       max_size=5),
       st.integers(0, 2**42), st.integers(0, 2**42))
def test_compact_attributes_derive_what_a_dict_does(attrs, start, end):
    # Span reads phase, thread and busy time at positions its layout knows (model.Layout)
    # when the attributes are a reader's compact mapping, by key otherwise: the same rules.
    compact = Attributes.build(tuple(attrs), tuple(attrs.values()))
    assert compact.__class__ is Attributes
    spans = [Span("ab" * 16, "01" * 8, None, "x", start, end, mapping) for mapping in (attrs, compact)]
    spans.append(dataclasses.replace(spans[1], end_ns=end + 7))  # a repair's new record derives again
    spans.append(pickle.loads(pickle.dumps(spans[1])))  # as --jobs hands results between processes
    derived = [(s.phase, s.thread_id, s.aggregate_busy_ns, s.is_aggregate, s.busy_ns - s.end_ns) for s in spans]
    expected = Span("ab" * 16, "01" * 8, None, "x", start, end + 7, attrs)
    assert derived[0] == derived[1] == derived[3]
    assert derived[2] == (expected.phase, expected.thread_id, expected.aggregate_busy_ns, expected.is_aggregate,
                          expected.busy_ns - expected.end_ns)


def test_an_id_that_is_empty_once_normalised_is_refused_however_often_it_comes():
    # The fast path checks an id once and remembers it (read_otlp_fast._ids); a blank parent
    # id remembered as "" must not let a span whose own id is blank through.
    def span(span_id, parent=None):
        return {"traceId": "ab" * 16, "spanId": span_id, "name": "s", "startTimeUnixNano": "1",
                "endTimeUnixNano": "2", **({"parentSpanId": parent} if parent else {})}
    line = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span("01" * 8, " "), span("")]}]}]}).encode()
    assert _outcome(spans_from_line, line) == _outcome(_general, line) == (
        "error", "TraceReadError", "OTLP span without a spanId")


def test_reader_uses_the_fast_path_and_keeps_formats(tmp_path):
    lines = open(data_file("demo-two-ranks.otlp.jsonl"), "rb").read().splitlines()
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\n".join(lines + lines) + b"\n")  # the same batches twice: two lines at least
    result = read_trace(str(path))
    general = [s for line in lines for s in _general(line)]
    assert result.format == "otlp-lines" and len(result.spans) == len(general)
    assert sorted(result.spans, key=lambda s: s.span_id) == sorted(general, key=lambda s: s.span_id)


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCHMARKS = os.path.join(REPO, "benchmarks")


def _analyzer_scale():
    sys.path.insert(0, BENCHMARKS)
    try:
        import analyzer_scale
    finally:
        sys.path.remove(BENCHMARKS)
    return analyzer_scale


def test_big_json_is_streamed_with_the_same_content(tmp_path, monkeypatch):
    import io

    from otel_coldstart.analyze import render_json as rj
    from otel_coldstart.analyze.breakdown import breakdowns
    from otel_coldstart.analyze.findings import find
    from otel_coldstart.analyze.report import Report
    analyzer_scale = _analyzer_scale()
    path = str(tmp_path / "t.jsonl")
    analyzer_scale.write_trace(path, 7000)  # 2333 shards: over the pretty limit
    results = breakdowns(read_trace(path).spans)
    findings = find(results)
    streamed = io.StringIO()
    rj.render_json(Report(results, findings), streamed)
    assert "\n  " not in streamed.getvalue()  # compact
    monkeypatch.setattr(rj, "PRETTY_LIMIT", 10**9)
    pretty = io.StringIO()
    rj.render_json(Report(results, findings), pretty)
    assert json.loads(streamed.getvalue()) == json.loads(pretty.getvalue())


@pytest.mark.process
def test_the_reading_benchmark_runs_against_another_checkout(tmp_path):
    analyzer_scale = _analyzer_scale()
    path = str(tmp_path / "t.jsonl")
    analyzer_scale.write_trace(path, 300)
    out = subprocess.run([sys.executable, os.path.join(BENCHMARKS, "read_cpu.py"), path, "--runs", "1",
                          "--against", REPO], capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.count(", 300 spans") == 2 and "median" in out and "ratio" in out
