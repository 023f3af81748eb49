"""An OTLP/HTTP receiver on loopback, for tests that export traces and metrics over OTLP as
users do."""

from __future__ import annotations

import base64
import http.server
import json
import pathlib
import threading
import time

from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


class TraceCollector(http.server.ThreadingHTTPServer):
    """An OTLP/HTTP receiver on loopback that writes every trace request it gets as a line of
    OTLP JSON (hex ids), as a Collector's file exporter would, and keeps the metric requests
    it receives (``got_metrics`` is set at the first)."""

    daemon_threads = True

    def __init__(self, path) -> None:
        self.lock = threading.Lock()
        self.path = pathlib.Path(path)
        self.metric_requests: list = []  # ExportMetricsServiceRequest, as received
        self.got_metrics = threading.Event()
        self.busy = 0  # requests being handled now
        self.last_request = time.monotonic()
        out_path = path

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                with server.lock:
                    server.busy += 1
                    server.last_request = time.monotonic()
                try:
                    self._handle()
                finally:
                    with server.lock:
                        server.busy -= 1
                        server.last_request = time.monotonic()

            def _handle(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path.endswith("/v1/metrics"):
                    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

                    metrics_request = ExportMetricsServiceRequest()
                    metrics_request.ParseFromString(body)
                    with server.lock:
                        server.metric_requests.append(metrics_request)
                    server.got_metrics.set()
                if self.path.endswith("/v1/traces"):
                    request = ExportTraceServiceRequest()
                    request.ParseFromString(body)
                    document = MessageToDict(request, use_integers_for_enums=True)
                    for resource_spans in document.get("resourceSpans", []):
                        for scope_spans in resource_spans.get("scopeSpans", []):
                            for span in scope_spans.get("spans", []):
                                for field in ("traceId", "spanId", "parentSpanId"):
                                    if span.get(field):
                                        span[field] = base64.b64decode(span[field]).hex()
                    with server.lock, open(out_path, "a", encoding="utf-8") as handle:
                        handle.write(json.dumps(document) + "\n")
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        server = self
        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    @property
    def metric_names(self) -> list[str]:
        with self.lock:
            requests = list(self.metric_requests)
        return [m.name for request in requests for rm in request.resource_metrics for sm in rm.scope_metrics
                for m in sm.metrics]

    def __enter__(self) -> TraceCollector:
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
        self.server_close()

    def shutdown(self, quiet_s: float = 0.3, limit_s: float = 10.0) -> None:
        """Stop, once no request is being handled and none came for ``quiet_s``: a request a
        killed process sent just before dying may still sit in the socket or in a handler
        thread, and the test reads the file right after (bounded by ``limit_s``)."""
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            with self.lock:
                idle = self.busy == 0 and time.monotonic() - self.last_request >= quiet_s
            if idle:
                break
            time.sleep(0.02)
        super().shutdown()

    def span_names(self) -> list[str]:
        """The names of every span received so far, in order."""
        with self.lock:
            if not self.path.exists():
                return []
            lines = self.path.read_text(encoding="utf-8").splitlines()
        return [span["name"] for line in lines for rs in json.loads(line).get("resourceSpans", [])
                for ss in rs.get("scopeSpans", []) for span in ss.get("spans", [])]
