"""Where spans go, and the embedded default when the user configured nothing.

- A tracer provider passed to ``instrument()``, or one set globally, is used as it is.
- ``OTEL_SDK_DISABLED=true``: nowhere (``instrument()`` does nothing at all).
- ``OTEL_TRACES_EXPORTER`` set: exactly the exporters it names, as the OpenTelemetry SDK
  reads it (:mod:`otel_coldstart._otel_env`): ``none`` for none, ``console``, ``otlp``
  (grpc unless ``OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL`` says ``http/protobuf``), or any
  installed exporter's name; a comma-separated list for several. No local file then.
- Otherwise (the embedded default), if the standard ``OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT``
  is set, spans are exported over OTLP there (``OTEL_EXPORTER_OTLP_PROTOCOL``:
  ``http/protobuf``, the spec's default, or ``grpc``).
- Otherwise they are written as OTLP JSON, one ``ExportTraceServiceRequest`` per line
  (the protobuf JSON mapping with hex ids, as the Collector's file exporter writes it), to
  ``./otel-coldstart-traces/`` or ``OTEL_COLDSTART_OUTPUT_DIR``.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import Sequence

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from . import _otel_env
from ._bounded import run_bounded
from .otlp_json import spans_to_otlp_json  # noqa: F401  (re-exported: readers and tests use it here)

DEFAULT_OUTPUT_DIR = "otel-coldstart-traces"
FILE_SUFFIX = ".otlp.jsonl"


class OtlpJsonFileExporter(SpanExporter):
    """Appends each batch as one line of OTLP JSON. Creates the file exclusively: an existing
    file is never overwritten."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._created = False
        # What happened, for the summary: it must never claim a write that failed.
        self.batches_written = 0
        self.batches_failed = 0
        self.error: str | None = None  # the first failure, one line

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if not spans:
            return SpanExportResult.SUCCESS
        try:
            line = json.dumps(spans_to_otlp_json(spans), separators=(",", ":"))
            with self._lock:
                mode = "a" if self._created else "x"
                with open(self.path, mode, encoding="utf-8") as handle:
                    handle.write(line + "\n")
                self._created = True
                self.batches_written += 1
        except OSError as exc:
            with self._lock:
                self.batches_failed += 1
                if self.error is None:
                    self.error = exc.strerror or type(exc).__name__
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def outcome(self) -> str:
        """One line saying what was written: for the summary printed at the end."""
        with self._lock:
            written, failed, error = self.batches_written, self.batches_failed, self.error
        if failed and not written:
            return f"trace NOT written: cannot write {self.path}: {error}"
        if failed:
            return f"trace written only in part to {self.path}: {failed} of {written + failed} batches failed ({error})"
        if not written:
            return f"no trace written: no span reached {self.path}"
        return f"trace written to {self.path}"

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def default_trace_path(output_dir: str | None = None) -> str:
    directory = output_dir or os.environ.get("OTEL_COLDSTART_OUTPUT_DIR") or DEFAULT_OUTPUT_DIR
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return os.path.abspath(os.path.join(directory, f"startup-{stamp}-{os.getpid()}{FILE_SUFFIX}"))


def otlp_endpoint_configured(signal: str = "traces") -> bool:
    """Whether the standard variables name an OTLP endpoint for ``signal`` (traces, metrics)."""
    specific = f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT"
    return bool(os.environ.get(specific) or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def default_resource() -> Resource:
    """OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES, plus the facts that tell processes apart."""
    return create_resource({"process.pid": os.getpid(), "host.name": socket.gethostname()})


def create_resource(attributes: dict) -> Resource:
    """What ``Resource.create(attributes)`` returns, with its detectors run on this thread.

    ``Resource.create`` runs the detectors (by default two quick ones that read the
    environment) on a new thread pool and waits for them: two thread starts on the host's
    start-up path, 10-20 ms on a loaded machine. Same detectors, same order, same merging
    and the same error handling, without the pool; anything unexpected (an SDK whose
    internals moved) falls back to ``Resource.create`` itself."""
    # The SDK's TracerProvider re-runs process-dependent detectors in a forked child, through
    # a ThreadPoolExecutor, from an at-fork hook. concurrent.futures.thread holds its global
    # lock across fork() and re-creates it in the child from its own at-fork hook; hooks run
    # in the order they were registered, so its module must be imported before the provider
    # registers its hook (Resource.create imported it for us), or a forked child deadlocks.
    import concurrent.futures.thread  # noqa: F401

    try:
        from opentelemetry.sdk import resources

        merged = resources._DEFAULT_RESOURCE
        for detector in resources._build_resource_detectors():
            detected = Resource.get_empty()
            try:
                detected = detector.detect()
            except Exception as error:
                if detector.raise_on_error:
                    raise
                resources.logger.warning("Exception %s in detector %s, ignoring", error, detector)
            merged = merged.merge(detected)
        resource = merged.merge(Resource(attributes))
        if not resource.attributes.get(resources.SERVICE_NAME):
            default_service_name = "unknown_service"
            if sys.executable:
                default_service_name += f":{os.path.basename(sys.executable)}"
            resource = resource.merge(Resource({resources.SERVICE_NAME: default_service_name}))
        return resource
    except Exception:
        return Resource.create(attributes)


@dataclass
class ExportSetup:
    provider: trace.TracerProvider
    owned: bool  # we made it: we flush and shut it down
    file_path: str | None  # the OTLP JSON file, when that is where spans go
    description: str
    file_exporter: "OtlpJsonFileExporter | None" = None  # what wrote file_path
    exports: bool = True  # False when OTEL_TRACES_EXPORTER=none (or OTEL_SDK_DISABLED): spans go nowhere


def configure_tracing(tracer_provider: trace.TracerProvider | None, output_dir: str | None) -> ExportSetup:
    if tracer_provider is not None:
        return ExportSetup(tracer_provider, False, None, "the tracer provider passed to instrument()")
    global_provider = trace.get_tracer_provider()
    if not isinstance(global_provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        return ExportSetup(global_provider, False, None, "the globally configured tracer provider")
    if _otel_env.sdk_disabled():
        return ExportSetup(trace.NoOpTracerProvider(), False, None, "nowhere (OTEL_SDK_DISABLED=true)",
                           exports=False)
    provider = TracerProvider(resource=default_resource(), shutdown_on_exit=False)
    named = _otel_env.exporter_names("traces")
    if named is not None:  # the user chose: exactly those exporters, as the SDK would
        exporters = [e for e in (_named_span_exporter(name) for name in named) if e is not None]
        for exporter in exporters:
            provider.add_span_processor(BatchSpanProcessor(exporter))
        described = ", ".join(type(e).__name__ for e in exporters) or "no exporter"
        return ExportSetup(provider, True, None, f"{described} (OTEL_TRACES_EXPORTER)", exports=bool(exporters))
    if otlp_endpoint_configured():
        exporter = _otlp_exporter()
        provider.add_span_processor(BatchSpanProcessor(exporter))
        return ExportSetup(provider, True, None, f"OTLP ({type(exporter).__module__.split('.')[-2]})")
    path = default_trace_path(output_dir)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    file_exporter = OtlpJsonFileExporter(path)
    provider.add_span_processor(BatchSpanProcessor(file_exporter))
    return ExportSetup(provider, True, path, f"OTLP JSON file {path}", file_exporter)


def _named_span_exporter(name: str) -> SpanExporter | None:
    """One exporter named in ``OTEL_TRACES_EXPORTER`` (after ``otlp`` was resolved), made
    with no arguments as the SDK makes it (it reads its own ``OTEL_EXPORTER_*`` variables)."""
    try:
        if name == "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter as exporter_class
        elif name == _otel_env.OTLP_GRPC:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as exporter_class
        elif name == _otel_env.OTLP_HTTP:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as exporter_class
        else:
            exporter_class = _otel_env.load_exporter_class("traces", name)
            if exporter_class is None:
                return None
        return exporter_class()
    except Exception as exc:  # not installed, or refuses its configuration: leave it out
        _otel_env.logger.warning("otel-coldstart: OTEL_TRACES_EXPORTER: cannot make exporter %r (%s: %s): "
                                 "it is left out", name, type(exc).__name__, exc)
        return None


def _otlp_exporter() -> SpanExporter:
    protocol = (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "http/protobuf").strip().lower()
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    return OTLPSpanExporter()


def flush(setup: ExportSetup, timeout_s: float, *, wait: bool = True) -> None:
    """Push out what is buffered, giving the exporter ``timeout_s``; wait for it only if
    ``wait`` (never longer than ``timeout_s``)."""
    force_flush = getattr(setup.provider, "force_flush", None)
    if force_flush is not None:
        millis = int(max(timeout_s, 0.001) * 1000)
        run_bounded(lambda: force_flush(millis), timeout_s if wait else 0.0)


def finish(setup: ExportSetup, timeout_s: float) -> None:
    """The exit: flush, and shut down the provider if we made it. Blocks up to ~timeout_s."""
    flush(setup, timeout_s)
    shutdown = getattr(setup.provider, "shutdown", None)
    if setup.owned and shutdown is not None:
        run_bounded(shutdown, timeout_s)
