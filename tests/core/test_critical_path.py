"""The start-up's critical path: what the plugin imports and builds on the host's thread,
and that the trace is the same for it. Timings are in benchmarks/ (RESULTS.md), not here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from opentelemetry.sdk.resources import Resource

from otel_coldstart import export

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("env", [
    {},
    {"OTEL_SERVICE_NAME": "vllm-serve", "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod,model=llama"},
    {"OTEL_RESOURCE_ATTRIBUTES": "service.name=from-attributes,k=v"},
    {"OTEL_EXPERIMENTAL_RESOURCE_DETECTORS": "process"},
])
def test_resource_without_thread_pool_equals_resource_create(monkeypatch, env):
    for name in ("OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_EXPERIMENTAL_RESOURCE_DETECTORS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    attributes = {"process.pid": os.getpid(), "host.name": "h"}
    ours = export.create_resource(attributes)
    theirs = Resource.create(attributes)
    assert ours.attributes == theirs.attributes and ours.schema_url == theirs.schema_url
    assert ours.attributes["process.pid"] == os.getpid()


def _fresh(code: str, tmp_path, **env) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TRACEPARENT"))}
    full_env.update(PYTHONPATH=REPO, OTEL_COLDSTART_OUTPUT_DIR=str(tmp_path), **env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env, capture_output=True,
                          text=True, timeout=120)


def test_default_file_start_up_keeps_protobuf_asyncio_and_exporters_off_the_host(tmp_path):
    """import + instrument() + ready() with the embedded file exporter: the file is written
    (OTLP JSON) and none of protobuf, the OTLP exporters, asyncio, the propagator or
    packaging was imported to do it."""
    result = _fresh("""
        import json, sys
        import otel_coldstart
        otel_coldstart.instrument(summary=False)
        with otel_coldstart.phase("build"):
            pass
        otel_coldstart.ready()
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("google", "asyncio", "packaging", "grpc")
                       or m.startswith(("opentelemetry.exporter", "opentelemetry.proto",
                                        "opentelemetry.trace.propagation.tracecontext", "ctypes.util")))
        print(json.dumps({"heavy": heavy, "file": otel_coldstart.trace_file()}))
    """, tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["heavy"] == []
    with open(report["file"], encoding="utf-8") as handle:
        names = [span["name"] for line in handle for rs in json.loads(line)["resourceSpans"]
                 for ss in rs["scopeSpans"] for span in ss["spans"]]
    assert {"model.startup", "coldstart.build"} <= set(names)


def test_user_tracer_span_inside_phase_nests_under_model_startup(tmp_path):
    """A user's tracer from the global provider, inside phase(), during the start-up: in the
    exported trace its span's parent is the phase, whose parent is model.startup."""
    result = _fresh("""
        import json
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from otel_coldstart.export import OtlpJsonFileExporter
        import otel_coldstart, os, sys
        path = os.path.join(sys.argv[1] if len(sys.argv) > 1 else os.environ["OTEL_COLDSTART_OUTPUT_DIR"], "t.jsonl")
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(OtlpJsonFileExporter(path)))
        trace.set_tracer_provider(provider)
        otel_coldstart.instrument(summary=False)
        user = trace.get_tracer("user.code")
        with otel_coldstart.phase("build"):
            with user.start_as_current_span("user.step"):
                pass
        otel_coldstart.ready()
        print(json.dumps({"file": path}))
    """, tmp_path)
    assert result.returncode == 0, result.stderr
    path = json.loads(result.stdout.strip().splitlines()[-1])["file"]
    spans = {}
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            for rs in json.loads(line)["resourceSpans"]:
                for ss in rs["scopeSpans"]:
                    for span in ss["spans"]:
                        spans[span["name"]] = span
    root, build, step = spans["model.startup"], spans["coldstart.build"], spans["user.step"]
    assert step["parentSpanId"] == build["spanId"]
    assert build["parentSpanId"] == root["spanId"]
    assert step["traceId"] == build["traceId"] == root["traceId"]


def test_user_tracer_before_any_provider_carries_the_phase_context(tmp_path):
    """No provider anywhere (the plugin owns the export): a user's tracer is the API's no-op,
    and the span it gives inside phase() carries the phase's context, so whatever the user
    propagates from there (a subprocess's TRACEPARENT) lands under model.startup."""
    result = _fresh("""
        import json
        from opentelemetry import trace
        import otel_coldstart
        otel_coldstart.instrument(summary=False)
        user = trace.get_tracer("user.code")
        with otel_coldstart.phase("build"):
            with user.start_as_current_span("user.step") as span:
                inside = span.get_span_context()
        otel_coldstart.ready()
        print(json.dumps({"file": otel_coldstart.trace_file(), "span_id": format(inside.span_id, "016x"),
                          "trace_id": format(inside.trace_id, "032x")}))
    """, tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    spans = {}
    with open(report["file"], encoding="utf-8") as handle:
        for line in handle:
            for rs in json.loads(line)["resourceSpans"]:
                for ss in rs["scopeSpans"]:
                    for span in ss["spans"]:
                        spans[span["name"]] = span
    assert report["span_id"] == spans["coldstart.build"]["spanId"]
    assert report["trace_id"] == spans["model.startup"]["traceId"]
    assert spans["coldstart.build"]["parentSpanId"] == spans["model.startup"]["spanId"]
