"""Issue 39 item 9: list attributes read back from Jaeger and Zipkin. The Collector writes an
array value as its JSON text (``["torch","numpy"]``); on main the analyzer kept the string, so a
trace fetched from Jaeger lost the imports' packages and heaviest modules and the graph
capture sizes and times (``whatif --lever fewer-captures`` had nothing to work from), and the
same start-up read differently from OTLP, Jaeger and Zipkin.

The converters in tests/data/traces write Jaeger and Zipkin JSON as the Collector's
translators do (collector_values.py: ``Value.AsString()``), independently of the readers."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import math
import os
import re
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from _examples import examples
from analyze_records import aggregate, data_file, otlp_attr, root, shard
from otel_coldstart import semconv
from otel_coldstart.analyze.list_values import list_from_text
from otel_coldstart.analyze.read_jaeger import spans_from_jaeger_envelope
from otel_coldstart.analyze.read_otlp import any_value
from otel_coldstart.analyze.read_zipkin import spans_from_zipkin
from otel_coldstart.cli import main


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, data_file(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


to_jaeger, to_zipkin, collector = _module("otlp_to_jaeger"), _module("otlp_to_zipkin"), _module("collector_values")


def _convert(otlp_path: str, directory) -> dict:
    """{format: path} for the OTLP file, and the same start-up as Jaeger and Zipkin JSON."""
    with open(otlp_path, encoding="utf-8") as handle:
        lines = handle.readlines()
    paths = {"otlp": otlp_path}
    for name, module in (("jaeger", to_jaeger), ("zipkin", to_zipkin)):
        path = os.path.join(str(directory), f"trace.{name}.json")
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(module.convert(lines), handle)
        paths[name] = path
    return paths


def _cli(*argv) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    assert "Traceback" not in err.getvalue()
    return code, out.getvalue()


def _without_source(document: dict) -> dict:
    for source in document.get("sources", []):
        source.pop("source", None)
        source.pop("format", None)
    return document


# --- the same start-up, written by the plugin, read from the three formats -------------------

STARTUP = r"""
import sys
import otel_coldstart
otel_coldstart.instrument()
import torch, safetensors.torch
with otel_coldstart.phase("load"):
    for p in sys.argv[1:]:
        for tensor in safetensors.torch.load_file(p).values():
            tensor.to(torch.float16)
otel_coldstart.ready()
"""


def _to_microseconds(path: str, out: str) -> str:
    """The OTLP file with each span's start and length cut to whole microseconds: what Jaeger and
    Zipkin keep of them. Everything else as written."""
    with open(path, encoding="utf-8") as handle, open(out, "w", encoding="utf-8") as target:
        for line in handle:
            if not line.strip():
                continue
            document = json.loads(line)
            for resource_spans in document["resourceSpans"]:
                for scope_spans in resource_spans["scopeSpans"]:
                    for span in scope_spans["spans"]:
                        start, end = int(span["startTimeUnixNano"]), int(span["endTimeUnixNano"])
                        span["startTimeUnixNano"] = str(start // 1000 * 1000)
                        span["endTimeUnixNano"] = str(start // 1000 * 1000 + (end - start) // 1000 * 1000)
            target.write(json.dumps(document) + "\n")
    return out


@pytest.mark.process
def test_one_startup_reads_the_same_from_otlp_jaeger_and_zipkin(tmp_path, small_checkpoint):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update({"OTEL_COLDSTART_OUTPUT_DIR": str(tmp_path / "traces"), "OTEL_COLDSTART_SUMMARY": "0"})
    result = subprocess.run([sys.executable, "-c", STARTUP, *small_checkpoint], env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    (written,) = (tmp_path / "traces").glob("startup-*.otlp.jsonl")
    paths = _convert(_to_microseconds(str(written), str(tmp_path / "us.otlp.jsonl")), tmp_path)
    with open(paths["jaeger"], encoding="utf-8") as handle:
        assert '"[\\"torch\\"' in handle.read()  # the list as the Collector writes it: JSON text
    documents = {}
    for name, path in paths.items():
        code, out = _cli("analyze", path, "--format", "json")
        assert code == 0
        documents[name] = _without_source(json.loads(out))
    slow = documents["otlp"]["startups"][0]["imports"]["slow"]
    assert any(p["package"] == "torch" for i in slow for p in i["packages"]), slow
    assert any(i["heaviest"] for i in slow), slow
    assert documents["jaeger"] == documents["otlp"]  # main: packages and heaviest empty
    assert documents["zipkin"] == documents["otlp"]  # main: those, and the resource (host, pid) too
    texts = {name: re.sub(r"trace written to .*|\S+\.(json|jsonl)", "", _cli("analyze", path)[1])
             for name, path in paths.items()}
    assert texts["jaeger"] == texts["otlp"] == texts["zipkin"]

    # The file as written (nanoseconds): Jaeger keeps every list and every figure but the
    # sub-microsecond part of the times.
    (tmp_path / "original").mkdir()
    original = _convert(str(written), tmp_path / "original")
    reads = {name: _without_source(json.loads(_cli("analyze", path, "--format", "json")[1]))
             for name, path in original.items() if name != "zipkin"}
    lists = {name: [(i["module"], i["packages"], i["heaviest"]) for i in read["startups"][0]["imports"]["slow"]]
             for name, read in reads.items()}
    assert lists["jaeger"] == lists["otlp"] and any(packages for _, packages, _ in lists["otlp"])


# --- whatif --lever fewer-captures from a trace fetched from Jaeger ---------------------------

def _captures_trace(path) -> str:
    r = root(2000, **{semconv.THREAD_NAME: "MainThread"})
    spans = [r, shard(r, 0, 10, 200, 1 << 20, "warm"),
             aggregate(r, semconv.PHASE_GRAPH_CAPTURE, 300, 2000, 1700, 7, 0, **{
                 semconv.GRAPH_BATCH_SIZES: (1, 2, 4, 8, 16, 24, 32),
                 semconv.GRAPH_CAPTURE_TIMES_S: (0.1, 0.1, 0.1, 0.2, 0.3, 0.4, 0.5)})]
    lines = []
    for s in spans:
        raw = {"traceId": s.trace_id, "spanId": s.span_id, "name": s.name, "startTimeUnixNano": str(s.start_ns),
               "endTimeUnixNano": str(s.end_ns), "attributes": [otlp_attr(k, v) for k, v in s.attributes.items()]}
        if s.parent_id:
            raw["parentSpanId"] = s.parent_id
        lines.append(json.dumps({"resourceSpans": [{"resource": {"attributes": [otlp_attr("service.name", "svc")]},
                                                    "scopeSpans": [{"scope": {"name": "t"}, "spans": [raw]}]}]}))
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_fewer_captures_works_from_jaeger_and_zipkin(tmp_path):
    paths = _convert(_captures_trace(tmp_path / "captures.otlp.jsonl"), tmp_path)
    levers = {}
    for name, path in paths.items():
        code, out = _cli("whatif", path, "--lever", "fewer-captures", "--keep-capture-sizes", "1,2,4,8",
                         "--format", "json")
        assert code == 0
        (lever,) = [item for item in json.loads(out)["levers"] if item["lever"] == "fewer-captures"]
        levers[name] = lever
    saving = levers["otlp"]["saving_p50_s"]
    assert saving == pytest.approx(1.2, abs=0.001)  # 16, 24, 32 not kept: 0.3 + 0.4 + 0.5 s
    assert levers["jaeger"] == levers["otlp"] and levers["zipkin"] == levers["otlp"]  # main: no saving from Jaeger


# --- the rule: our list attributes only, and only a JSON array of their element type ---------

KIND_VALUES = {
    "string": st.text(max_size=12),
    "int": st.integers(min_value=-(2**63), max_value=2**63 - 1),
    "double": st.floats(allow_nan=False, allow_infinity=False),
}
KEYS_BY_KIND = {kind: [k for k, v in semconv.LIST_ATTRIBUTES.items() if v == kind] for kind in KIND_VALUES}
OTLP_KEY = {"string": "stringValue", "int": "intValue", "double": "doubleValue"}


@st.composite
def _list_attribute(draw):
    kind = draw(st.sampled_from(sorted(KIND_VALUES)))
    key = draw(st.sampled_from(KEYS_BY_KIND[kind]))
    values = draw(st.lists(KIND_VALUES[kind], max_size=6))
    otlp = {"arrayValue": {"values": [{OTLP_KEY[kind]: str(v) if kind == "int" else v} for v in values]}}
    return key, otlp


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_list_attribute())
def test_the_collectors_text_of_a_list_reads_back_as_otlp_gives_it(attribute):
    key, otlp = attribute
    expected = any_value(otlp)
    text = collector.as_string(otlp)
    parsed = list_from_text(key, text)
    assert parsed == expected and [type(v) for v in parsed] == [type(v) for v in expected], (text, parsed)
    # and through both readers, as a tag of a span
    jaeger = {"data": [{"traceID": "ab" * 16, "processes": {"p1": {"serviceName": "s", "tags": []}}, "spans": [
        {"traceID": "ab" * 16, "spanID": "cd" * 8, "operationName": "x", "startTime": 1, "duration": 1,
         "processID": "p1", "tags": [{"key": key, "type": "string", "value": text}]}]}]}
    (span,) = spans_from_jaeger_envelope(jaeger)
    assert span.attributes[key] == expected
    (span,) = spans_from_zipkin([{"traceId": "ab" * 16, "id": "cd" * 8, "timestamp": 1, "tags": {key: text}}])
    assert span.attributes[key] == expected


@settings(max_examples=examples(300), deadline=None)
@given(key=st.one_of(st.sampled_from(["http.route", "coldstart.file.path", "coldstart.phase", "error.type",
                                      "coldstart.import.module", "user.tags"]), st.text(max_size=20)),
       text=st.one_of(st.text(max_size=40), st.lists(st.text(max_size=5)).map(json.dumps)))
def test_a_string_of_any_other_attribute_is_never_changed(key, text):
    if key in semconv.LIST_ATTRIBUTES:
        return
    assert list_from_text(key, text) is text
    (span,) = spans_from_zipkin([{"traceId": "ab" * 16, "id": "cd" * 8, "timestamp": 1, "tags": {"user.tags": text}}])
    assert span.attributes["user.tags"] == text or not text.startswith("[")  # numbers and booleans get their type


@settings(max_examples=examples(400), deadline=None)
@given(key=st.sampled_from(sorted(semconv.LIST_ATTRIBUTES)),
       text=st.one_of(st.text(max_size=40), st.sampled_from(['[1,"a"]', "[true]", "[null]", "[[1]]", "[1e400]",
                                                             "[NaN]", "[Infinity]", '{"a":1}', "[", "[]", " [1] ",
                                                             "[" * 5000 + "]" * 5000, "[1.5]", "[1e3]"])))
def test_any_text_of_a_list_attribute_is_a_list_of_its_type_or_left_as_written(key, text):
    parsed = list_from_text(key, text)
    if parsed is text:
        return
    kind = semconv.LIST_ATTRIBUTES[key]
    assert isinstance(parsed, tuple)
    for value in parsed:
        if kind == "string":
            assert isinstance(value, str)
        elif kind == "int":
            assert type(value) is int and -(2**63) <= value < 2**63
        else:
            assert type(value) is float and math.isfinite(value)


def test_what_is_refused_and_what_is_read():
    sizes, times, names = semconv.GRAPH_BATCH_SIZES, semconv.GRAPH_CAPTURE_TIMES_S, semconv.IMPORT_PACKAGES
    assert list_from_text(sizes, "[1,2,4]") == (1, 2, 4)
    assert list_from_text(sizes, "[1e3]") == (1000,)  # a whole number, as JSON allows it
    assert list_from_text(times, "[0.5,1]") == (0.5, 1.0)  # Go writes the double 1.0 as 1
    assert list_from_text(names, '["torch","\\u003cmain\\u003e"]') == ("torch", "<main>")
    assert list_from_text(names, "[]") == ()
    for kept in ('[1,"a"]', "[1.5]", "[true]", "[NaN]", "torch", "[[1]]", '{"a": 1}'):
        assert list_from_text(sizes, kept) == kept
    assert list_from_text("http.route", '["torch"]') == '["torch"]'  # not a list of ours: as written
