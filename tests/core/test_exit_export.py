"""The exit's export on every Python the package claims (issue 42): a start-up that exits
before ready() still reaches a real local receiver over OTLP/HTTP and OTLP/gRPC (the root
span and the metrics), or its file, with the host's exit status and nothing on its stderr.

Python 3.12 refuses new threads (and os.fork) once the exit has begun, atexit callbacks
included; on main the exit's export started one there and lost the root and the metrics,
printing a traceback. CI runs this file on 3.10, 3.11, 3.12 and 3.13
(scripts/test-python.sh)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from concurrent import futures

import pytest

from otel_coldstart import semconv
from otel_coldstart.analyze.readers import read_trace_file

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _otlp_collector import TraceCollector  # noqa: E402

pytestmark = pytest.mark.process

HOST = r"""
import otel_coldstart
otel_coldstart.instrument()
import sys, time
if sys.argv[2] == "at_once":  # before the monitor's first tick: the metrics are made at the exit
    sys.exit(0)
import torch
from safetensors.torch import load_file
state = load_file(sys.argv[1])
state = {k: v.to(torch.float16) for k, v in state.items()}
how = sys.argv[2]
if how == "after_ready":
    otel_coldstart.ready()
with otel_coldstart.phase("warmup"):
    time.sleep(0.2)
if how == "status":
    sys.exit(7)
sys.exit(0)
"""


def _env(tmp_path, **extra) -> dict:
    env = dict(os.environ)
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_TRACES_EXPORTER",
                 "OTEL_METRICS_EXPORTER", "OTEL_COLDSTART_SUMMARY", "PYTHONWARNINGS"):
        env.pop(name, None)
    env["OTEL_COLDSTART_OUTPUT_DIR"] = str(tmp_path / "traces")
    env["OTEL_SERVICE_NAME"] = "exit-export"
    env.update(extra)
    return env


def _host(tmp_path, checkpoint, how: str, env: dict) -> subprocess.CompletedProcess:
    # -X dev: every warning shown (a DeprecationWarning of ours too), and asyncio/threading debug.
    return subprocess.run([sys.executable, "-X", "dev", "-c", HOST, checkpoint, how], env=env, capture_output=True,
                          text=True, timeout=180, cwd=str(tmp_path))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    import torch
    from safetensors.torch import save_file

    path = tmp_path_factory.mktemp("ckpt") / "model.safetensors"
    save_file({f"layer{i}.weight": torch.randn(128, 128) for i in range(4)}, str(path))
    return str(path)


def _roots(span_names_and_attrs) -> list[dict]:
    return [attrs for name, attrs in span_names_and_attrs if name == semconv.SPAN_ROOT]


def _http_spans(collector: TraceCollector) -> list[tuple[str, dict]]:
    import json

    out = []
    if not collector.path.exists():
        return out
    for line in collector.path.read_text(encoding="utf-8").splitlines():
        for rs in json.loads(line).get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                for span in ss.get("spans", []):
                    attrs = {a["key"]: next(iter(a["value"].values()), None) for a in span.get("attributes", [])}
                    out.append((span["name"], attrs))
    return out


class GrpcCollector:
    """An OTLP/gRPC receiver on loopback: the Collector's own service definitions, served by
    grpcio, keeping every span and metric name it receives."""

    def __init__(self) -> None:
        import grpc
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

        self.lock = threading.Lock()
        self.spans: list[tuple[str, dict]] = []
        self.metric_names: list[str] = []
        collector = self

        class Traces(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request, context):
                with collector.lock:
                    for rs in request.resource_spans:
                        for ss in rs.scope_spans:
                            for span in ss.spans:
                                attrs = {a.key: getattr(a.value, a.value.WhichOneof("value") or "string_value")
                                         for a in span.attributes}
                                collector.spans.append((span.name, attrs))
                return trace_service_pb2.ExportTraceServiceResponse()

        class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
            def Export(self, request, context):
                with collector.lock:
                    collector.metric_names += [m.name for rm in request.resource_metrics for sm in rm.scope_metrics
                                               for m in sm.metrics]
                return metrics_service_pb2.ExportMetricsServiceResponse()

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), self.server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.stop(grace=1).wait(5)


def _assert_quiet(result: subprocess.CompletedProcess, status: int = 0) -> None:
    assert result.returncode == status, result.stderr
    # Nothing of ours on the host's stderr: no traceback, no internal error, no warning.
    assert "Traceback" not in result.stderr, result.stderr
    assert "otel-coldstart" not in result.stderr and "otel_coldstart" not in result.stderr, result.stderr
    assert "Warning" not in result.stderr, result.stderr


@pytest.mark.parametrize("how,status", [("before_ready", 0), ("status", 7), ("at_once", 0)])
def test_an_exit_before_ready_reaches_an_otlp_http_receiver_with_its_root_and_metrics(tmp_path, checkpoint, how,
                                                                                     status):
    with TraceCollector(tmp_path / "received.jsonl") as collector:
        result = _host(tmp_path, checkpoint, how, _env(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint,
                                                       OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf"))
        collector.shutdown()
    _assert_quiet(result, status)
    spans = _http_spans(collector)
    (root,) = _roots(spans)
    assert root[semconv.END_REASON] == semconv.END_EXIT
    assert root[semconv.READY] is False
    if how != "at_once":
        assert "warmup" in [attrs.get(semconv.PHASE) for _, attrs in spans]
    assert semconv.METRIC_STARTUP_DURATION in collector.metric_names, sorted(set(collector.metric_names))
    assert not (tmp_path / "traces").exists() or not list((tmp_path / "traces").iterdir())  # no fallback file


def test_an_exit_before_ready_reaches_an_otlp_grpc_receiver_with_its_root_and_metrics(tmp_path, checkpoint):
    collector = GrpcCollector()
    try:
        result = _host(tmp_path, checkpoint, "before_ready", _env(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint,
                                                                   OTEL_EXPORTER_OTLP_PROTOCOL="grpc"))
    finally:
        collector.close()
    _assert_quiet(result)
    (root,) = _roots(collector.spans)
    assert root[semconv.END_REASON] == semconv.END_EXIT
    assert semconv.METRIC_STARTUP_DURATION in collector.metric_names, sorted(set(collector.metric_names))


def test_an_exit_after_ready_sends_the_metrics_made_after_ready(tmp_path, checkpoint):
    with TraceCollector(tmp_path / "received.jsonl") as collector:
        result = _host(tmp_path, checkpoint, "after_ready", _env(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint,
                                                                 OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf"))
        collector.shutdown()
    _assert_quiet(result)
    (root,) = _roots(_http_spans(collector))
    assert root[semconv.READY] is True
    assert semconv.METRIC_STARTUP_DURATION in collector.metric_names, sorted(set(collector.metric_names))


def test_an_exit_before_ready_in_file_mode_writes_the_root(tmp_path, checkpoint):
    result = _host(tmp_path, checkpoint, "before_ready", _env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result.stderr
    (path,) = (tmp_path / "traces").glob("startup-*.otlp.jsonl")
    (root,) = [s for s in read_trace_file(str(path)) if s.name == semconv.SPAN_ROOT]
    assert root.attributes[semconv.END_REASON] == semconv.END_EXIT
