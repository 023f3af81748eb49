"""What one start-up records: real loads in this process read back through an in-memory
reader, the pure facts on hand-built spans, and the OTLP push at ready() and at exit."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
import torch
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from safetensors.torch import load_file, save_file

import otel_coldstart
from _otlp_collector import TraceCollector
from metrics_testlib import HERE, STARTUP_TIMEOUT_S
from otel_coldstart import metrics as coldstart_metrics, semconv
from otel_coldstart.analyze.breakdown import compute_breakdown
from otel_coldstart.analyze.model import Span

SHARDS = 3
TENSORS_PER_SHARD = 4


def _write_checkpoint(directory) -> tuple[list[str], int]:
    generator = torch.Generator().manual_seed(1)
    paths, total = [], 0
    for shard in range(SHARDS):
        state = {f"layers.{shard}.w{i}": torch.randn(64, 32, generator=generator).to(torch.bfloat16)
                 for i in range(TENSORS_PER_SHARD)}
        total += sum(t.nbytes for t in state.values())
        path = os.path.join(directory, f"model-{shard + 1:05d}-of-{SHARDS:05d}.safetensors")
        save_file(state, path)
        paths.append(path)
    return paths, total


class _Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList()
        for _ in range(SHARDS):
            layer = torch.nn.Module()
            for i in range(TENSORS_PER_SHARD):
                layer.register_parameter(f"w{i}", torch.nn.Parameter(torch.empty(64, 32, dtype=torch.bfloat16)))
            self.layers.append(layer)


class _Recorded(dict):
    """Metric name -> metric, plus the start-up duration's exemplars from every collection."""

    exemplars: list


class _KeepingReader(InMemoryMetricReader):
    """Keeps every collection: ready()'s flush collects first, and an exemplar is reported
    in the collection that follows its measurement only."""

    def __init__(self) -> None:
        super().__init__()
        self.collections = []

    def _receive_metrics(self, metrics_data, timeout_millis: float = 10_000, **kwargs) -> None:
        super()._receive_metrics(metrics_data, timeout_millis, **kwargs)
        if metrics_data is not None:
            self.collections.append(metrics_data)


@pytest.fixture
def recorded(tmp_path):
    """A real start-up in this process: 3 shards read, copied into a model, cast, ready()."""
    paths, total_bytes = _write_checkpoint(tmp_path)
    otel_coldstart.uninstrument()
    reader = _KeepingReader()
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider(resource=Resource.create({
        "service.name": "recording-test", "host.type": "cpu-unit", "coldstart.model.name": "unit-model",
        "service.instance.id": "instance-1",
    }))
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    meter_provider = MeterProvider(metric_readers=[reader])
    otel_coldstart.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider,
                              start_at="instrument", summary=False, handle_sigterm=False,
                              metric_attributes={"deployment.environment.name": "test",
                                                 semconv.FILE_PATH: str(tmp_path)})
    try:
        model = _Model()
        with otel_coldstart.phase("build_model"):
            state = {}
        for path in paths:
            state.update(load_file(path))
        model.load_state_dict(state)
        model.to(torch.float16)
        root_context = otel_coldstart.ColdstartInstrumentor().session.root_context
        otel_coldstart.ready()
        data = reader.get_metrics_data()
        collections = list(reader.collections)
    finally:
        otel_coldstart.uninstrument()
        meter_provider.shutdown()
    found = {}
    for resource_metrics in data.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                found[metric.name] = metric
    exemplars = [exemplar for collection in collections for rm in collection.resource_metrics
                 for sm in rm.scope_metrics for metric in sm.metrics if metric.name == semconv.METRIC_STARTUP_DURATION
                 for point in metric.data.data_points for exemplar in point.exemplars]
    found = _Recorded(found)
    found.exemplars = exemplars
    return found, total_bytes, format(root_context.trace_id, "032x"), str(tmp_path)


def _points(found, name):
    return list(found[name].data.data_points)


def test_every_metric_is_recorded_with_its_unit(recorded):
    found, _, _, _ = recorded
    units = {name: found[name].unit for name in found}
    assert units == {
        semconv.METRIC_STARTUP_DURATION: "s", semconv.METRIC_PHASE_DURATION: "s",
        semconv.METRIC_SHARD_DURATION: "s", semconv.METRIC_BYTES: "By", semconv.METRIC_COPY_BYTES: "By",
        semconv.METRIC_COPY_THROUGHPUT: "By/s", semconv.METRIC_GRAPH_CAPTURES: "{graph}",
        semconv.METRIC_GRAPH_CAPTURE_TIME: "s", semconv.METRIC_LAZY_UNREAD: "By", semconv.METRIC_FIRST_USE_BYTES: "By",
        # No download in this start-up: 0 bytes and 0 requests recorded, no per-file durations.
        semconv.METRIC_DOWNLOAD_BYTES: "By", semconv.METRIC_DOWNLOAD_METADATA_REQUESTS: "{request}",
    }


def test_histograms_use_the_start_up_buckets(recorded):
    found, _, _, _ = recorded
    for name in (semconv.METRIC_STARTUP_DURATION, semconv.METRIC_PHASE_DURATION, semconv.METRIC_SHARD_DURATION):
        for point in _points(found, name):
            assert tuple(point.explicit_bounds) == tuple(float(b) for b in coldstart_metrics.DURATION_BUCKETS_S)
    assert coldstart_metrics.DURATION_BUCKETS_S[-1] >= 1800  # tens of minutes
    for point in _points(found, semconv.METRIC_COPY_THROUGHPUT):
        assert tuple(point.explicit_bounds) == tuple(coldstart_metrics.THROUGHPUT_BUCKETS_BPS)


def test_duration_point_carries_the_root_trace_as_exemplar(recorded):
    found, _, trace_id, _ = recorded
    (point,) = _points(found, semconv.METRIC_STARTUP_DURATION)
    exemplars = found.exemplars
    assert {format(e.trace_id, "032x") for e in exemplars} == {trace_id}
    assert [e.value for e in exemplars] == [point.sum]


def test_phases_add_up_to_the_start_up(recorded):
    """Single-threaded start-up: per-phase time plus unattributed is the root's duration."""
    found, _, _, _ = recorded
    (duration,) = _points(found, semconv.METRIC_STARTUP_DURATION)
    phases = {p.attributes[semconv.PHASE]: p.sum for p in _points(found, semconv.METRIC_PHASE_DURATION)}
    assert {"deserialize", "h2h", "cast", "build_model", "unattributed"} <= set(phases)
    assert sum(phases.values()) == pytest.approx(duration.sum, abs=1e-6)
    assert duration.attributes[semconv.READY] is True


def test_bytes_copies_shards_and_graphs(recorded):
    found, total_bytes, _, _ = recorded
    by_phase = {p.attributes[semconv.PHASE]: p.value for p in _points(found, semconv.METRIC_BYTES)}
    assert by_phase["deserialize"] == total_bytes
    assert by_phase["h2h"] == total_bytes  # load_state_dict copies every tensor once
    assert by_phase["cast"] == total_bytes  # bf16 -> fp16 reads every source byte
    copies = {(p.attributes[semconv.PHASE], p.attributes[semconv.COPY_MEMORY]): p.value
              for p in _points(found, semconv.METRIC_COPY_BYTES)}
    assert copies == {("h2h", "unknown"): total_bytes}  # pinning is only asked for h2d
    # Host copies and host casts are synchronous: their busy time is their bandwidth's time.
    throughputs = {p.attributes[semconv.PHASE]: p for p in _points(found, semconv.METRIC_COPY_THROUGHPUT)}
    assert set(throughputs) == {"h2h", "cast"}
    assert all(p.count == 1 and p.sum > 0 for p in throughputs.values())
    positions = sorted((p.attributes[semconv.SHARD_POSITION], p.count) for p in _points(found, semconv.METRIC_SHARD_DURATION))
    assert [c for pos, c in positions if pos == "first"] == [1]
    assert sum(c for pos, c in positions if pos == "rest") == SHARDS - 1
    assert [p.value for p in _points(found, semconv.METRIC_GRAPH_CAPTURES)] == [0]
    assert [p.value for p in _points(found, semconv.METRIC_GRAPH_CAPTURE_TIME)] == [0]


def test_every_point_carries_identifying_and_no_unbounded_attributes(recorded):
    found, _, _, directory = recorded
    points = [p for name in found for p in _points(found, name)]
    assert len(points) > 10
    for point in points:
        attrs = dict(point.attributes)
        assert attrs[semconv.MODEL_NAME] == "unit-model" and attrs["host.type"] == "cpu-unit"
        assert attrs["service.name"] == "recording-test" and attrs["deployment.environment.name"] == "test"
        assert not coldstart_metrics.UNBOUNDED_ATTRIBUTES & set(attrs), attrs
        assert not any(directory in str(v) for v in attrs.values())


# --- pure functions on hand-built spans ------------------------------------------------------

def _span(span_id, parent, phase, start, end, **attrs):
    attributes = {semconv.PHASE: phase, semconv.THREAD_ID: 1, **attrs} if phase else {semconv.THREAD_ID: 1}
    return Span("ab" * 16, span_id, parent, f"coldstart.{phase}" if phase else semconv.SPAN_ROOT, start, end,
                attributes)


def _root(end=100):
    return Span("ab" * 16, "r" * 16, None, semconv.SPAN_ROOT, 0, end, {semconv.READY: True, semconv.THREAD_ID: 1})


def test_graph_captures_count_leaves_and_aggregate_calls():
    root = _root()
    spans = [
        _span("g1", root.span_id, "graph_capture", 10, 40),  # a torch.cuda.graph span ...
        _span("g2", "g1", "graph_capture", 12, 38, **{semconv.AGGREGATE: True, semconv.CALLS: 5,
                                                      semconv.BUSY_S: 20e-9}),  # ... around 5 captures
        _span("g3", root.span_id, "graph_capture", 50, 60),  # one capture on its own
        _span("g4", root.span_id, "graph_capture", 150, 160),  # after ready: not this start-up's
    ]
    facts = coldstart_metrics.startup_facts(compute_breakdown(root, spans), spans)
    assert facts.graph_captures == 6
    assert facts.graph_capture_ns == 30 + 10  # the phase's busy time, as the breakdown counts it


def test_copy_facts_split_pinned_pageable_and_unknown():
    root = _root()
    aggregate = {semconv.AGGREGATE: True}
    spans = [
        _span("c1", root.span_id, "h2d", 10, 20, **aggregate, **{
            semconv.BYTES: 1000, semconv.BUSY_S: 4e-9, semconv.COPY_PINNED_BYTES: 600,
            semconv.COPY_PAGEABLE_BYTES: 400}),
        _span("c2", root.span_id, "h2d", 30, 40, **aggregate, **{
            semconv.BYTES: 1000, semconv.BUSY_S: 6e-9, semconv.COPY_PAGEABLE_BYTES: 1000}),
        _span("c3", root.span_id, "h2h", 50, 60, **aggregate, **{semconv.BYTES: 500, semconv.BUSY_S: 5e-9}),
        _span("c4", root.span_id, "cast", 60, 70, **aggregate, **{semconv.BYTES: 999, semconv.BUSY_S: 5e-9}),
    ]
    facts = coldstart_metrics.startup_facts(compute_breakdown(root, spans), spans)
    copies = {c.direction: c for c in facts.copies}
    assert set(copies) == {"h2d", "h2h", "cast"}  # casts for their bandwidth only, not copy bytes
    assert (copies["h2d"].pinned_bytes, copies["h2d"].pageable_bytes, copies["h2d"].unknown_bytes) == (600, 1400, 0)
    assert copies["h2d"].throughput == pytest.approx(2000 / 10e-9)
    assert copies["h2h"].unknown_bytes == 500


def test_phase_labels_stay_words():
    assert coldstart_metrics.phase_label("deserialize") == "deserialize"
    assert coldstart_metrics.phase_label("build_model") == "build_model"
    assert coldstart_metrics.phase_label("/data/ckpt/model-00001.safetensors") == "other"
    assert coldstart_metrics.phase_label("load " + "x" * 60) == "other"


def test_identifying_attributes_keep_deploy_facts_only():
    resource = {"service.name": "s", "service.version": "1", "host.type": "g6.xlarge", "host.name": "node-17",
                "process.pid": 42, "service.instance.id": "abc", "coldstart.model.name": "m", "k8s.pod.name": "p-1"}
    attrs = coldstart_metrics.identifying_attributes(resource, {"team": "serving", "trace_id": "ff" * 16})
    assert attrs == {"service.name": "s", "service.version": "1", "host.type": "g6.xlarge",
                     "coldstart.model.name": "m", "team": "serving"}


# --- OTLP push at ready() and at exit ----------------------------------------------------------

def _startup_durations(collector: TraceCollector) -> list[tuple[float, dict]]:
    """``model.startup.duration`` points the collector received: (sum, attributes)."""
    out = []
    for request in list(collector.metric_requests):
        for rm in request.resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    if metric.name == semconv.METRIC_STARTUP_DURATION:
                        for point in metric.histogram.data_points:
                            attrs = {a.key: a.value for a in point.attributes}
                            out.append((point.sum, attrs))
    return out


def _otlp_env(endpoint: str, tmp_path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update({"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                "OTEL_RESOURCE_ATTRIBUTES": "coldstart.model.name=otlp-model",
                "OTEL_COLDSTART_OUTPUT_DIR": str(tmp_path), "OTEL_COLDSTART_SUMMARY": "0"})
    return env


def _app(checkpoint, end: str, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, os.path.join(HERE, "startup_app.py"), checkpoint, end], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


@pytest.mark.process
def test_metrics_are_pushed_at_ready_while_the_process_lives(checkpoint_dir, tmp_path):
    directory, _ = checkpoint_dir
    with TraceCollector(tmp_path / "collector.jsonl") as collector:
        process = _app(directory, "ready", _otlp_env(collector.endpoint, tmp_path))
        try:
            # The periodic reader's own interval is 60 s: a push now can only be ready()'s flush.
            got = collector.got_metrics.wait(STARTUP_TIMEOUT_S)
            assert got, process.stderr.read() if process.poll() is not None else "no push within the timeout"
            assert process.poll() is None, "the push must come before exit"
            ((seconds, attrs),) = _startup_durations(collector)
            assert attrs[semconv.READY].bool_value is True
            assert attrs[semconv.MODEL_NAME].string_value == "otlp-model" and seconds > 0
        finally:
            process.communicate(timeout=60)  # closes stdin: the app's signal to stop serving


@pytest.mark.process
def test_a_start_up_that_never_becomes_ready_is_pushed_at_exit(checkpoint_dir, tmp_path):
    directory, _ = checkpoint_dir
    with TraceCollector(tmp_path / "collector.jsonl") as collector:
        process = _app(directory, "exit", _otlp_env(collector.endpoint, tmp_path))
        _, err = process.communicate(timeout=STARTUP_TIMEOUT_S)
        assert process.returncode == 0, err
        durations = _startup_durations(collector)
        assert durations and all(attrs[semconv.READY].bool_value is False for _, attrs in durations)


@pytest.mark.process
def test_exit_does_not_hang_on_a_collector_that_never_answers(checkpoint_dir, tmp_path):
    """A collector that accepts connections and never replies: the exit export is bounded by
    export_timeout_s, so the process still ends (a hang would hit the subprocess timeout)."""
    directory, _ = checkpoint_dir
    with socket.socket() as black_hole:
        black_hole.bind(("127.0.0.1", 0))
        black_hole.listen(16)
        env = _otlp_env(f"http://127.0.0.1:{black_hole.getsockname()[1]}", tmp_path)
        process = _app(directory, "exit", env)
        _, err = process.communicate(timeout=STARTUP_TIMEOUT_S)
        assert process.returncode == 0, err


# --- the embedded default ------------------------------------------------------------------------

@pytest.fixture
def clean_otel_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith("OTEL_EXPORTER_") or name == "OTEL_METRICS_EXPORTER":
            monkeypatch.delenv(name)
    return monkeypatch


def test_a_passed_meter_provider_is_used_as_it_is(clean_otel_env):
    provider = MeterProvider()
    setup = coldstart_metrics.configure_metrics(provider)
    assert setup.provider is provider and not setup.owned


def test_nothing_configured_means_the_global_api(clean_otel_env):
    setup = coldstart_metrics.configure_metrics(None)
    assert not setup.owned and setup.prometheus_address is None


def test_otel_metrics_exporter_none_turns_the_default_off(clean_otel_env):
    clean_otel_env.setenv("OTEL_METRICS_EXPORTER", "none")
    clean_otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    assert not coldstart_metrics.configure_metrics(None).owned


def test_prometheus_port_option_serves_until_uninstrument(clean_otel_env):
    clean_otel_env.setenv("OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1")
    otel_coldstart.uninstrument()
    otel_coldstart.instrument(tracer_provider=TracerProvider(), start_at="instrument", summary=False,
                              handle_sigterm=False, prometheus_port=0)
    try:
        setup = otel_coldstart.controller.CONTROLLER.startup.metrics
        host, port = setup.prometheus_address
        otel_coldstart.ready()
        with socket.create_connection((host, port), timeout=10) as conn:
            conn.sendall(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
            body = b""
            while chunk := conn.recv(65536):
                body += chunk
        assert b"model_startup_duration_seconds_count" in body
    finally:
        otel_coldstart.uninstrument()
    with pytest.raises(OSError):
        socket.create_connection((host, port), timeout=5).close()


def test_a_taken_port_is_logged_not_raised(clean_otel_env, caplog):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        clean_otel_env.setenv("OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1")
        setup = coldstart_metrics.configure_metrics(None, prometheus_port=taken.getsockname()[1])
        try:
            assert setup.prometheus_address is None
            assert "no Prometheus endpoint" in caplog.text
        finally:
            setup.close(1.0)


def test_flushing_a_users_provider_skips_its_prometheus_reader(clean_otel_env):
    """Collecting a Prometheus reader outside a scrape would make its next scrape list every
    series twice; the push readers beside it are flushed."""
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry()
    pull, push = PrometheusMetricReader(registry=registry), InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[pull, push])
    try:
        provider.get_meter("t").create_counter("c").add(1)
        coldstart_metrics.flush(coldstart_metrics.configure_metrics(provider), 10.0)
        assert push.get_metrics_data() is not None
        assert generate_latest(registry).decode().count("\nc_total") == 1
    finally:
        provider.shutdown()
