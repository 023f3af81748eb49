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

When the plugin makes the export itself (the last three cases), its tracer provider is
:class:`~otel_coldstart.own_tracing.OwnTracerProvider`: the SDK's semantics without importing
the SDK on the host's thread (the file needs no SDK at all; OTLP and console exporters are
made by the thread of ours that first exports). Any SDK setting in the environment (a
sampler, span limits, ``OTEL_BSP_*``...) or an exporter named by entry point brings the SDK's
own provider back (:func:`own_tracing.sdk_settings_in_environment`).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Sequence

from opentelemetry import trace

from . import _otel_env, own_tracing
from ._bounded import run_bounded
from .otlp_json import spans_to_otlp_json_line

DEFAULT_OUTPUT_DIR = "otel-coldstart-traces"
FILE_SUFFIX = ".otlp.jsonl"


class OtlpJsonFile:
    """Appends each batch of finished spans (ours or the SDK's ``ReadableSpan``) as one line
    of OTLP JSON. Creates the file exclusively: an existing file is never overwritten."""

    # Export never waits on a network: the tracer provider may write a full queue from the
    # thread that filled it rather than drop spans (own_tracing.OwnTracerProvider._on_end).
    local = True

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._created = False
        # What happened, for the summary: it must never claim a write that failed.
        self.batches_written = 0
        self.batches_failed = 0
        self.error: str | None = None  # the first failure, one line

    def export(self, spans: Sequence) -> bool:
        if not spans:
            return True
        try:
            line = spans_to_otlp_json_line(spans)
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
            return False
        return True

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


def __getattr__(name: str):
    # OtlpJsonFileExporter is the file as an SDK SpanExporter, for SDK tracer providers (the
    # GPU check, tests, users): defined on first use, so that importing this module never
    # imports the SDK.
    if name == "OtlpJsonFileExporter":
        return _sdk_file_exporter_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _sdk_file_exporter_class():
    made = globals().get("OtlpJsonFileExporter")  # made once: isinstance() keeps working
    if made is not None:
        return made
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class OtlpJsonFileExporter(SpanExporter):
        """:class:`OtlpJsonFile` as an SDK span exporter."""

        def __init__(self, path: str) -> None:
            self.file = OtlpJsonFile(path)
            self.path = path

        def export(self, spans) -> SpanExportResult:
            return SpanExportResult.SUCCESS if self.file.export(spans) else SpanExportResult.FAILURE

        def outcome(self) -> str:
            return self.file.outcome()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return True

    globals()["OtlpJsonFileExporter"] = OtlpJsonFileExporter
    return OtlpJsonFileExporter


def default_trace_path(output_dir: str | None = None) -> str:
    """A new trace file's path: the UTC time, the pid and the nanoseconds, so that two
    start-ups of one process (uninstrument() then instrument() within a second), or of two
    processes, never share a name. The file is still created exclusively (never overwritten)."""
    directory = output_dir or os.environ.get("OTEL_COLDSTART_OUTPUT_DIR") or DEFAULT_OUTPUT_DIR
    now_ns = time.time_ns()
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now_ns // 1_000_000_000))
    name = f"startup-{stamp}.{now_ns % 1_000_000_000:09d}Z-{os.getpid()}{FILE_SUFFIX}"
    return os.path.abspath(os.path.join(directory, name))


def default_resource():
    """``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES``, plus the facts that tell processes
    apart: what ``Resource.create`` makes of them, without the SDK's resources module when no
    resource detector is configured (:class:`own_tracing.OwnResource`)."""
    # os.uname().nodename is what socket.gethostname() returns on Linux (glibc's gethostname
    # reads uname), without importing socket.
    attributes = {"process.pid": os.getpid(), "host.name": os.uname().nodename}
    if not own_tracing.usable():  # an SDK we do not mirror: its own Resource.create
        return create_resource(attributes)
    detected = own_tracing.sdk_default_resource_attributes()
    if detected is None:  # a detector is configured: only the SDK knows what it detects
        return create_resource(attributes)
    detected.update(attributes)
    if not detected.get("service.name"):
        detected["service.name"] = "unknown_service" + (f":{os.path.basename(sys.executable)}" if sys.executable else "")
    return own_tracing.OwnResource(detected)


def sdk_resource(resource):
    """``resource`` as an SDK ``Resource``, for an SDK provider of ours (the SDK path, metrics,
    vLLM's): every one is built from this."""
    # The SDK's TracerProvider re-runs process-dependent detectors in a forked child, through
    # a ThreadPoolExecutor, from an at-fork hook. concurrent.futures.thread holds its global
    # lock across fork() and re-creates it in the child from its own at-fork hook; hooks run
    # in the order they were registered, so its module must be imported before the provider
    # registers its hook, or a forked child deadlocks (Resource.create used to import it).
    import concurrent.futures.thread  # noqa: F401

    from opentelemetry.sdk.resources import Resource

    return resource if isinstance(resource, Resource) else Resource(resource.attributes, resource.schema_url)


def create_resource(attributes: dict):
    """What ``Resource.create(attributes)`` returns, with its detectors run on this thread.

    ``Resource.create`` runs the detectors on a new thread pool and waits for them: two
    thread starts on the host's start-up path, 10-20 ms on a loaded machine. Same
    detectors, same order, same merging and the same error handling, without the pool;
    anything unexpected (an SDK whose internals moved) falls back to ``Resource.create``
    itself."""
    import concurrent.futures.thread  # noqa: F401  (before any SDK provider: see sdk_resource)

    from opentelemetry.sdk.resources import Resource

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
    except Exception:  # the SDK's internals moved: its own Resource.create
        return Resource.create(attributes)


class ExportSetup:
    """Where spans go (a plain class: ``dataclasses`` is 0.4 ms of import on the start-up's path)."""

    __slots__ = ("provider", "owned", "file_path", "description", "file_exporter", "exports")

    def __init__(self, provider: trace.TracerProvider, owned: bool, file_path: str | None, description: str,
                 file_exporter: OtlpJsonFile | None = None, exports: bool = True) -> None:
        self.provider = provider
        self.owned = owned  # we made it: we flush and shut it down
        self.file_path = file_path  # the OTLP JSON file, when that is where spans go
        self.description = description
        self.file_exporter = file_exporter  # what wrote file_path
        self.exports = exports  # False when OTEL_TRACES_EXPORTER=none (or OTEL_SDK_DISABLED): spans go nowhere

    def start_up_over(self) -> None:
        """The start-up ended: spans that end from now on go out without anyone flushing
        (an SDK provider's batch processor does that already)."""
        export_in_background = getattr(self.provider, "export_in_background", None)
        if self.owned and export_in_background is not None:
            export_in_background()


def configure_tracing(tracer_provider: trace.TracerProvider | None, output_dir: str | None) -> ExportSetup:
    """Where spans go (see the module's docstring): a host's provider as it is, else the
    provider :func:`build_provider` makes for what the environment chose."""
    if tracer_provider is not None:
        return ExportSetup(tracer_provider, False, None, "the tracer provider passed to instrument()")
    global_provider = trace.get_tracer_provider()
    if not isinstance(global_provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        return ExportSetup(global_provider, False, None, "the globally configured tracer provider")
    if _otel_env.sdk_disabled():
        return ExportSetup(trace.NoOpTracerProvider(), False, None, "nowhere (OTEL_SDK_DISABLED=true)",
                           exports=False)
    chosen = _otel_env.chosen_exporters("traces")
    if chosen is not None:
        return build_provider(*chosen)
    path = default_trace_path(output_dir)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return build_provider([], "the embedded default", path)


def _exporter_factory(name: str):
    """Makes the span exporter ``name`` when called (on our export thread, at the first export)."""
    return lambda: _otel_env.exporter_class("traces", name)()


def build_provider(names: list[str], chosen_by: str, file_path: str | None = None) -> ExportSetup:
    """Our tracer provider, exporting to the exporters ``names`` (those that can be made; the
    setting ``chosen_by`` chose them) or to the OTLP JSON file at ``file_path``. It is
    :class:`own_tracing.OwnTracerProvider` (no SDK on the host's thread; exporters made on our
    thread at the first export) unless the environment sets something only the SDK can
    honour, or names an exporter we do not know."""
    known = _otel_env.KNOWN_EXPORTERS["traces"]
    if (own_tracing.usable() and not own_tracing.sdk_settings_in_environment()
            and all(name in known for name in names)):
        names = [name for name in names if _otel_env.exporter_installed("traces", name)]
        file = OtlpJsonFile(file_path) if file_path else None
        sink = file or own_tracing.SdkExporters(
            [(name, _exporter_factory(name)) for name in names],
            lambda name, exc: _otel_env.exporter_left_out("traces", name, exc))
        provider: trace.TracerProvider = own_tracing.OwnTracerProvider(default_resource(), sink)
    else:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        provider = TracerProvider(resource=sdk_resource(default_resource()), shutdown_on_exit=False)
        file = None
        if file_path:
            exporters = [_sdk_file_exporter_class()(file_path)]
            file = exporters[0].file
        else:
            made = [(name, _otel_env.make_exporter("traces", name)) for name in names]
            names = [name for name, exporter in made if exporter is not None]
            exporters = [exporter for _, exporter in made if exporter is not None]
        for exporter in exporters:
            provider.add_span_processor(BatchSpanProcessor(exporter))
    description = f"OTLP JSON file {file_path}" if file_path else f"{', '.join(names) or 'no exporter'} ({chosen_by})"
    return ExportSetup(provider, True, file_path, description, file, exports=bool(names or file_path))


def flush(setup: ExportSetup, timeout_s: float, *, wait: bool = True) -> None:
    """Push out what is buffered, giving the exporter ``timeout_s``; wait for it only if
    ``wait`` (never longer than ``timeout_s``). Our own provider exports on its worker
    (no thread started per flush); the SDK's is flushed from a thread of ours."""
    on_worker = getattr(setup.provider, "flush_on_worker", None)
    if on_worker is not None:
        on_worker(timeout_s if wait else 0.0)
        return
    force_flush = getattr(setup.provider, "force_flush", None)
    if force_flush is not None:
        millis = int(max(timeout_s, 0.001) * 1000)
        run_bounded(lambda: force_flush(millis), timeout_s if wait else 0.0)


def finish(setup: ExportSetup, timeout_s: float) -> bool:
    """The end of what we export: flush, and shut down the provider if we made it. Blocks up
    to ~timeout_s. False when the start-up may not have been delivered: the flush did not
    return within ``timeout_s`` (a collector that is not there or never answers), or our own
    provider's exporter refused a batch at any time. A provider that returns False at once
    (the host shut it down already, and flushed it then) is not evidence of a loss."""
    returned: list = []
    on_worker = getattr(setup.provider, "flush_on_worker", None)
    force_flush = getattr(setup.provider, "force_flush", None)
    if on_worker is not None:
        # Our own provider: the export runs on its worker, a thread that exists already (at
        # the exit no thread may be started: _bounded.py); the wait is ours, bounded.
        if on_worker(timeout_s) and timeout_s > 0:  # 0: asked for, not confirmed
            returned.append(True)
    elif force_flush is not None:
        millis = int(max(timeout_s, 0.001) * 1000)
        run_bounded(lambda: returned.append(force_flush(millis)), timeout_s)
    shutdown = getattr(setup.provider, "shutdown", None)
    # A flush still running (a collector that never answers) holds what shutdown waits on:
    # leave it to the daemon worker rather than wait on it past the deadline on the exit's thread.
    if setup.owned and shutdown is not None and (returned or on_worker is None):
        run_bounded(shutdown, timeout_s)
    refused = getattr(setup.provider, "failed_exports", 0)
    return bool(returned or force_flush is None) and not (isinstance(refused, int) and refused > 0)


def write_records(path: str, kept: Sequence, resource: dict) -> bool:
    """Write spans the session kept (session._Kept) to ``path`` as one OTLP JSON line: the
    fallback when the configured exporter did not take them. False if it could not."""
    from .own_tracing import OwnResource, OwnScope
    from .package import __version__

    own_resource = OwnResource(resource)
    scope = OwnScope("otel_coldstart", __version__, None, None)
    return OtlpJsonFile(path).export([_KeptSpan(k, own_resource, scope) for k in kept])


class _KeptSpan:
    """A kept span as the OTLP JSON encoder reads a finished span."""

    __slots__ = ("name", "start_time", "end_time", "attributes", "resource", "instrumentation_scope", "parent",
                 "_context", "status")
    kind = trace.SpanKind.INTERNAL
    events = ()
    links = ()
    dropped_attributes = dropped_events = dropped_links = 0

    def __init__(self, kept, resource, scope) -> None:
        from opentelemetry.trace import SpanContext, Status, StatusCode, TraceFlags

        self.name = kept.name
        self.start_time = kept.start_ns
        self.end_time = kept.end_ns
        self.attributes = kept.attributes
        self.resource = resource
        self.instrumentation_scope = scope
        flags = TraceFlags(TraceFlags.SAMPLED)
        self._context = SpanContext(kept.trace_id, kept.span_id, False, flags)
        self.parent = SpanContext(kept.trace_id, kept.parent_id, False, flags) if kept.parent_id else None
        self.status = Status(StatusCode.ERROR) if kept.status == "error" else Status(StatusCode.UNSET)

    @property
    def context(self):
        return self._context

    def get_span_context(self):
        return self._context


def otlp_endpoint(signal: str = "traces") -> tuple[str, int] | None:
    """(host, port) of the OTLP collector the standard variables send ``signal`` to, as the
    SDK's exporters read them (the signal's endpoint, else the general one, else the
    protocol's default port on localhost); None when no OTLP exporter is named or configured."""
    names, _ = _otel_env.chosen_exporters(signal) or ([], "")
    otlp = [n for n in names if n in (_otel_env.OTLP_GRPC, _otel_env.OTLP_HTTP)]
    if not otlp:
        return None
    grpc = otlp[0] == _otel_env.OTLP_GRPC
    url = (os.environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
           or ("http://localhost:4317" if grpc else "http://localhost:4318")).strip()
    from urllib.parse import urlsplit

    parts = urlsplit(url if "://" in url else f"http://{url}")
    try:
        port = parts.port
    except ValueError:
        return None
    default_port = 443 if parts.scheme == "https" else (4317 if grpc else 4318)
    return (parts.hostname or "localhost"), (port or default_port)


def collector_refuses(signal: str = "traces", timeout_s: float = 0.25) -> bool:
    """True when nothing listens where OTLP ``signal`` goes (the connection is refused): the
    exporter's retries (10 s by default) cannot succeed, so nobody should wait for them. Any
    other answer (accepted, timed out, a name that does not resolve) is False: wait as usual."""
    endpoint = otlp_endpoint(signal)
    if endpoint is None:
        return False
    import socket

    try:
        for family, kind, proto, _, address in socket.getaddrinfo(*endpoint, type=socket.SOCK_STREAM):
            with socket.socket(family, kind, proto) as sock:
                sock.settimeout(timeout_s)
                try:
                    sock.connect(address)
                    return False
                except ConnectionRefusedError:
                    continue
        return True
    except OSError:
        return False


def skip_sdk_exit_shutdown(*providers) -> None:
    """Take SDK providers' own exit-time ``shutdown`` off the ``atexit`` list (they register
    their bound ``shutdown``; ``atexit.unregister`` compares equal bound methods): after our
    flush ran past the deadline, their shutdown would export the same batch again and hold
    the exit for the exporters' own retry budget (10 s each for traces and metrics)."""
    import atexit

    for provider in providers:
        shutdown = getattr(provider, "shutdown", None)
        if shutdown is not None:
            atexit.unregister(shutdown)
