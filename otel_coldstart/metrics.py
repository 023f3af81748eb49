"""Start-up metrics, recorded once when the start-up ends, from the same breakdown the
summary shows (so traces, summary and dashboards agree by construction).

Every name and unit comes from :mod:`otel_coldstart.semconv`; ``docs/metrics.md`` lists what
Prometheus sees. Each process records one start-up, so every series of a process appears
once, when its start-up ends, and keeps its value while the process lives.

Labels are bounded by construction: the phase, the cache state, the copy direction and
memory kind, the shard position, the outcome, and a few identifying attributes the user
sets once (model, version, instance type). Never file paths, tensor names, thread or
process ids, or trace ids: a trace is reached through the exemplar that each histogram
point carries (the root span's trace id), not through a label.

:func:`configure_metrics` is the embedded default for metrics, alongside
:func:`otel_coldstart.export.configure_tracing` for spans.
"""

from __future__ import annotations

import functools
import os
import re
import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import metrics, trace as otel_trace
from opentelemetry.trace import NonRecordingSpan, SpanContext

from . import _otel_env, semconv, verdicts
from ._bounded import exiting, run_bounded
from ._errors import logger
from .analyze.breakdown import LINK_PHASES, Breakdown, bandwidth_sample, link_of
from .analyze.model import Span
from .analyze.units import per_second

# Start-ups take milliseconds (a cached small model) to tens of minutes (a cold 400B one).
DURATION_BUCKETS_S = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 45, 60, 90, 120, 180,
    300, 450, 600, 900, 1200, 1800, 3600,
)
# Achieved copy bandwidth: from a slow network disk behind a pageable copy (MB/s) through
# PCIe gen3..gen5 (12..55 GB/s) to device-to-device HBM copies (TB/s).
THROUGHPUT_BUCKETS_BPS = (
    1e6, 1e7, 5e7, 1e8, 2.5e8, 5e8, 1e9, 2e9, 4e9, 8e9, 12e9, 16e9, 24e9, 32e9, 48e9, 64e9,
    1e11, 2.5e11, 5e11, 1e12, 2e12, 4e12,
)

COPY_PHASES = (semconv.PHASE_H2D, semconv.PHASE_D2H, semconv.PHASE_D2D, semconv.PHASE_H2H)
# The bandwidth histogram also has casts (bytes read from the source per second), which like
# copies may be queued device work: their figure is from device time too.
BANDWIDTH_PHASES = COPY_PHASES + (semconv.PHASE_CAST,)

# Resource attributes that identify a deploy rather than a process: these are copied onto
# every series so dashboards can group by them (the Prometheus exporters put resource
# attributes on ``target_info`` only). Per-process ones (service.instance.id, host.name,
# process.pid) are deliberately absent: the scrape's ``instance`` label already tells
# processes apart, and copying them would multiply series with every restart.
IDENTIFYING_RESOURCE_ATTRIBUTES = (
    semconv.MODEL_NAME,
    "service.name",
    "service.namespace",
    "service.version",
    "deployment.environment.name",
    "deployment.environment",
    "host.type",
    "cloud.provider",
    "cloud.region",
)
# Attributes that would make a series per file, tensor, thread, process or trace: refused
# even when a user passes them in ``metric_attributes``.
UNBOUNDED_ATTRIBUTES = frozenset({
    semconv.FILE_PATH, semconv.THREAD_ID, semconv.THREAD_NAME, semconv.SHARD_INDEX,
    "process.pid", "service.instance.id", "host.name", "host.id", "trace_id", "span_id",
    "trace.id", "span.id", "file.path", "code.filepath",
})
_PHASE_LABEL = re.compile(r"^[A-Za-z0-9_.\-]{1,48}$")
OTHER_PHASE = "other"
UNATTRIBUTED_PHASE = semconv.UNATTRIBUTED
UNKNOWN = "unknown"


def identifying_attributes(resource: Mapping[str, Any] | None,
                           metric_attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    """The attributes every series carries: identifying resource attributes (from
    ``OTEL_RESOURCE_ATTRIBUTES`` or the tracer provider's resource), then the user's
    ``metric_attributes`` on top, minus anything unbounded."""
    attrs: dict[str, Any] = {}
    for key in IDENTIFYING_RESOURCE_ATTRIBUTES:
        value = (resource or {}).get(key)
        if isinstance(value, (str, bool, int, float)) and value != "":
            attrs[key] = value
    for key, value in (metric_attributes or {}).items():
        if isinstance(key, str) and key not in UNBOUNDED_ATTRIBUTES and isinstance(value, (str, bool, int, float)):
            attrs[key] = value
    return attrs


def phase_label(phase: str) -> str:
    """A phase name fit for a label: built-in phases and short user names (``phase("x")``)
    as they are; anything that looks like data (a path, a long generated name) as "other"."""
    if phase in semconv.BUILTIN_PHASES or phase == UNATTRIBUTED_PHASE:
        return phase
    return phase if _PHASE_LABEL.match(phase) else OTHER_PHASE


@dataclass(frozen=True)
class CopyFacts:
    """The copies of one direction (h2d, d2h, d2d, h2h), or the casts, summed over their
    aggregate spans."""

    direction: str
    bytes: int = 0
    busy_ns: int = 0
    pinned_bytes: int = 0
    pageable_bytes: int = 0
    # The bytes whose transfer time is known and that time: device time of queued work,
    # host time of synchronous work (analyze.breakdown.bandwidth_sample).
    timed_bytes: int = 0
    timed_ns: int = 0
    bound_bps: float | None = None  # h2d/d2h: the host link's bound

    @property
    def unknown_bytes(self) -> int:
        """Bytes whose source memory was not asked (only host-to-device copies ask)."""
        return max(0, self.bytes - self.pinned_bytes - self.pageable_bytes)

    @property
    def throughput(self) -> float | None:
        """Achieved bytes per second: over device time for queued work, host time for
        synchronous work; None when no byte's time is known (never launch speed)."""
        return per_second(self.timed_bytes, self.timed_ns)

    @property
    def above_bound(self) -> bool:
        rate = self.throughput
        return self.bound_bps is not None and rate is not None and rate > self.bound_bps


@dataclass(frozen=True)
class StartupFacts:
    """What the metrics need beyond the breakdown; a pure function of the span records."""

    copies: tuple[CopyFacts, ...] = ()
    graph_captures: int = 0
    graph_capture_ns: int = 0
    shard_positions: tuple[str, ...] = field(default_factory=tuple)  # per breakdown.shards


def startup_facts(breakdown: Breakdown, records: Iterable[Span]) -> StartupFacts:
    root = breakdown.root
    window = [s for s in records if not s.is_root and verdicts.in_startup_window(s, root)]

    sums: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for span in window:
        if span.phase in BANDWIDTH_PHASES and span.is_aggregate:
            entry = sums[span.phase]
            entry["bytes"] += verdicts.positive_int(span.attributes, semconv.BYTES)
            entry["busy_ns"] += span.busy_ns
            entry["pinned"] += verdicts.positive_int(span.attributes, semconv.COPY_PINNED_BYTES)
            entry["pageable"] += verdicts.positive_int(span.attributes, semconv.COPY_PAGEABLE_BYTES)
            sample = bandwidth_sample(span)
            if sample is not None:
                entry["timed_bytes"] += sample[0]
                entry["timed_ns"] += sample[1]
    _, bound = link_of(s for s in window if s.phase == semconv.PHASE_RUNTIME_INIT)
    copies = tuple(
        CopyFacts(direction, e["bytes"], e["busy_ns"], e["pinned"], e["pageable"], e["timed_bytes"], e["timed_ns"],
                  bound if direction in LINK_PHASES else None)
        for direction, e in sorted(sums.items())
    )

    count = verdicts.capture_count(window)  # the graph-capture finding counts the same way
    capture_phase = breakdown.phase(semconv.PHASE_GRAPH_CAPTURE)

    positions = tuple("first" if i == 0 else "rest" for i in range(len(breakdown.shards)))
    return StartupFacts(copies, count, capture_phase.busy_ns if capture_phase else 0, positions)


class StartupMetrics:
    """The instruments. Creating them twice on one provider returns the same instruments."""

    def __init__(self, meter_provider: metrics.MeterProvider | None = None) -> None:
        from .package import __version__

        provider = meter_provider or metrics.get_meter_provider()
        meter = provider.get_meter("otel_coldstart", __version__)
        self.startup_duration = meter.create_histogram(
            semconv.METRIC_STARTUP_DURATION, unit="s",
            description="Wall time from process start to ready() (or exit)",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS_S,
        )
        self.phase_duration = meter.create_histogram(
            semconv.METRIC_PHASE_DURATION, unit="s",
            description="Busy time per start-up phase (self time, summed over threads)",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS_S,
        )
        self.shard_duration = meter.create_histogram(
            semconv.METRIC_SHARD_DURATION, unit="s",
            description="Time to read one checkpoint file, by page-cache state and position",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS_S,
        )
        self.bytes = meter.create_counter(
            semconv.METRIC_BYTES, unit="By", description="Bytes handled per start-up phase",
        )
        self.copy_bytes = meter.create_counter(
            semconv.METRIC_COPY_BYTES, unit="By",
            description="Bytes copied per direction, by source memory (pinned, pageable, unknown)",
        )
        self.copy_throughput = meter.create_histogram(
            semconv.METRIC_COPY_THROUGHPUT, unit="By/s",
            description="Achieved copy (and cast) bandwidth per start-up and direction: device time of queued "
                        "work, host time of synchronous work",
            explicit_bucket_boundaries_advisory=THROUGHPUT_BUCKETS_BPS,
        )
        self.graph_captures = meter.create_counter(
            semconv.METRIC_GRAPH_CAPTURES, unit="{graph}",
            description="CUDA graphs captured during the start-up (0 when none)",
        )
        self.graph_capture_time = meter.create_counter(
            semconv.METRIC_GRAPH_CAPTURE_TIME, unit="s",
            description="Time spent capturing CUDA graphs during the start-up (0 when none)",
        )
        self.lazy_unread = meter.create_counter(
            semconv.METRIC_LAZY_UNREAD, unit="By",
            description="Checkpoint bytes still mapped and not in the page cache at ready(): what the first "
                        "requests read from storage (0 when none)",
        )
        self.download_bytes = meter.create_counter(
            semconv.METRIC_DOWNLOAD_BYTES, unit="By",
            description="Bytes the start-up's downloads received from the network (the hub, S3; 0 when none)",
        )
        self.download_duration = meter.create_histogram(
            semconv.METRIC_DOWNLOAD_DURATION, unit="s",
            description="Time per file the start-up fetched or found in the local cache",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS_S,
        )
        self.download_metadata_requests = meter.create_counter(
            semconv.METRIC_DOWNLOAD_METADATA_REQUESTS, unit="{request}",
            description="Metadata requests the start-up made to the hub (HEAD, repo info, revision; 0 when none)",
        )
        self.first_use_bytes = meter.create_counter(
            semconv.METRIC_FIRST_USE_BYTES, unit="By",
            description="Bytes of those files read from storage after ready(), as the follow-up sees them come in "
                        "(0 when none)",
        )

    def record(self, breakdown: Breakdown, attributes: Mapping[str, Any] | None = None,
               records: Sequence[Span] = (), trace_context: SpanContext | None = None) -> None:
        """Record one start-up. ``records`` are its spans (for copies and graph captures);
        ``trace_context`` is the root span's, so histogram points carry it as an exemplar."""
        base = {k: v for k, v in (attributes or {}).items() if k not in UNBOUNDED_ATTRIBUTES}
        ctx = None
        if trace_context is not None and trace_context.is_valid:
            ctx = otel_trace.set_span_in_context(NonRecordingSpan(trace_context))
        facts = startup_facts(breakdown, records)

        self.startup_duration.record(breakdown.duration_ns / 1e9, {**base, semconv.READY: breakdown.ready},
                                     context=ctx)
        phase_busy: dict[str, int] = defaultdict(int)
        phase_bytes: dict[str, int] = defaultdict(int)
        for phase in breakdown.phases:
            label = phase_label(phase.phase)
            phase_busy[label] += phase.busy_ns
            phase_bytes[label] += phase.bytes
        if breakdown.unattributed_ns:
            phase_busy[UNATTRIBUTED_PHASE] += breakdown.unattributed_ns
        for label, busy_ns in phase_busy.items():
            labels = {**base, semconv.PHASE: label}
            self.phase_duration.record(busy_ns / 1e9, labels, context=ctx)
            if phase_bytes[label]:
                self.bytes.add(phase_bytes[label], labels)

        for shard, position in zip(breakdown.shards, facts.shard_positions):
            self.shard_duration.record(shard.duration_ns / 1e9, {
                **base, semconv.CACHE_STATE: shard.state or UNKNOWN, semconv.SHARD_POSITION: position,
            }, context=ctx)

        for copy in facts.copies:
            for memory, nbytes in ((semconv.MEMORY_PINNED, copy.pinned_bytes),
                                   (semconv.MEMORY_PAGEABLE, copy.pageable_bytes),
                                   (UNKNOWN, copy.unknown_bytes)):
                if nbytes and copy.direction in COPY_PHASES:
                    self.copy_bytes.add(nbytes, {**base, semconv.PHASE: copy.direction,
                                                 semconv.COPY_MEMORY: memory})
            if copy.above_bound and copy.throughput is not None and copy.bound_bps is not None:
                # Faster than the host link carries: a timing error, not a bandwidth. A
                # dashboard would show it as one, so it is left out, and said.
                logger.warning("otel-coldstart: %s bandwidth %.1f GB/s is above the host link's bound "
                               "(%.1f GB/s): not recorded in %s", copy.direction, copy.throughput / 1e9,
                               copy.bound_bps / 1e9, semconv.METRIC_COPY_THROUGHPUT)
            elif copy.throughput is not None:
                self.copy_throughput.record(copy.throughput, {**base, semconv.PHASE: copy.direction},
                                            context=ctx)

        # Always recorded, 0 included: "captured no graphs" is a fact a dashboard can show,
        # and it tells a start-up without graphs from a process that reported nothing.
        self.graph_captures.add(facts.graph_captures, base)
        self.graph_capture_time.add(facts.graph_capture_ns / 1e9, base)
        self._record_downloads(breakdown, base, ctx)
        if breakdown.ready:  # what ready() left on storage; the first use adds to its counter later
            from .analyze.lazy import lazy_files

            self.lazy_unread.add(sum(f.unread_bytes for f in lazy_files(breakdown)), base)
            self.first_use_bytes.add(0, base)

    def _record_downloads(self, breakdown: Breakdown, base: dict, ctx) -> None:
        """The start-up's downloads (analyze/downloads.py): 0 bytes and 0 requests recorded
        when there were none, so a dashboard tells a cached start from a silent process."""
        from .analyze.downloads import downloads

        found = downloads(breakdown)
        by_source: dict[str, int] = defaultdict(int)
        for item in found.items if found is not None else ():
            source = item.source or UNKNOWN
            by_source[source] += item.bytes
            self.download_duration.record(item.duration_ns / 1e9, {
                **base, semconv.DOWNLOAD_SOURCE: source, semconv.DOWNLOAD_CACHE_HIT: item.cached}, context=ctx)
        if not by_source:
            self.download_bytes.add(0, base)
        for source, nbytes in by_source.items():
            self.download_bytes.add(nbytes, {**base, semconv.DOWNLOAD_SOURCE: source})
        self.download_metadata_requests.add(found.metadata_requests if found is not None else 0, base)

    def add_first_use(self, nbytes: int, attributes: Mapping[str, Any] | None = None) -> None:
        """Bytes read from storage after ready() by the first requests (first_use.py)."""
        if nbytes > 0:
            self.first_use_bytes.add(nbytes, {k: v for k, v in (attributes or {}).items()
                                              if k not in UNBOUNDED_ATTRIBUTES})


# --- the embedded default ---------------------------------------------------------------

DEFAULT_PROMETHEUS_HOST = "localhost"
DEFAULT_PROMETHEUS_PORT = 9464


@dataclass
class MetricsSetup:
    provider: metrics.MeterProvider
    owned: bool  # we made it: we flush and shut it down
    description: str
    prometheus_address: tuple[str, int] | None = None
    push_readers: list = field(default_factory=list)  # the readers a flush should push (OTLP)
    _server: Any = None

    def close(self, timeout_s: float) -> None:
        """Flush and shut down what we own, waiting at most ``timeout_s`` in all."""
        if not self.owned:
            return
        server, self._server = self._server, None
        for reader in self.push_readers:
            if getattr(reader, "_export_interval_millis", None) == float("inf"):
                # Made at the exit without a thread (periodic_reader): its shutdown exports
                # nothing, so its one export happens here, on this thread.
                run_bounded(functools.partial(reader.force_flush, timeout_millis=timeout_s * 1000), timeout_s)
        shutdown = getattr(self.provider, "shutdown", None)
        if shutdown is not None:
            run_bounded(lambda: shutdown(timeout_millis=timeout_s * 1000), timeout_s)
        if server is not None:
            server.shutdown()
            server.server_close()


def configure_metrics(meter_provider: metrics.MeterProvider | None,
                      prometheus_port: int | None = None) -> MetricsSetup:
    """Where metrics go.

    - A meter provider passed to ``instrument()``, or one set globally, is used as it is.
    - ``OTEL_METRICS_EXPORTER`` set: exactly the exporters it names, as the SDK reads it
      (``none``, ``console``, ``otlp``: grpc unless ``OTEL_EXPORTER_OTLP_[METRICS_]PROTOCOL``
      says ``http/protobuf``, ``prometheus``, or an installed exporter's name), whether or not
      an endpoint is set; ``prometheus_port`` adds a Prometheus endpoint.
    - Unset (the embedded default): an OTLP exporter when ``OTEL_EXPORTER_OTLP_[METRICS_]ENDPOINT``
      is set (``http/protobuf`` unless the protocol variable says ``grpc``), and a Prometheus
      endpoint when ``prometheus_port`` is given.
    - Prometheus: ``OTEL_EXPORTER_PROMETHEUS_HOST``/``_PORT``, default localhost:9464, on a
      registry of our own.
    - With none of these, metrics go to the global API's provider (a no-op until the user sets one).
    """
    if meter_provider is not None:
        return MetricsSetup(meter_provider, False, "the meter provider passed to instrument()")
    global_provider = metrics.get_meter_provider()
    if _is_sdk_provider(global_provider):
        return MetricsSetup(global_provider, False, "the globally configured meter provider")
    names, chosen_by = _otel_env.chosen_exporters("metrics") or ([], None)
    if chosen_by and not names:
        return MetricsSetup(global_provider, False, "OTEL_METRICS_EXPORTER=none")
    readers = []
    described = []
    address = registry = None
    if "prometheus" in names or prometheus_port is not None:
        try:
            from opentelemetry.exporter.prometheus import PrometheusMetricReader
            from prometheus_client import CollectorRegistry
        except ImportError:
            logger.warning("otel-coldstart: a Prometheus endpoint was asked for, but "
                           "opentelemetry-exporter-prometheus is not installed")
        else:
            # A registry of our own: the host's prometheus_client default registry stays its own.
            registry = CollectorRegistry()
            readers.append(PrometheusMetricReader(registry=registry))
            host = os.environ.get("OTEL_EXPORTER_PROMETHEUS_HOST") or DEFAULT_PROMETHEUS_HOST
            port = prometheus_port if prometheus_port is not None else int(
                os.environ.get("OTEL_EXPORTER_PROMETHEUS_PORT") or DEFAULT_PROMETHEUS_PORT)
            address = (host, port)
    for name in names:
        if name != "prometheus":
            reader = _otel_env.make_exporter("metrics", name, _reader_for)
            if reader is not None:
                readers.append(reader)
                described.append(f"{name} ({chosen_by})")
    if not readers:
        return MetricsSetup(global_provider, False, "the global meter provider (none configured)")

    from opentelemetry.sdk.metrics import MeterProvider

    provider = MeterProvider(metric_readers=readers, resource=metrics_resource(), shutdown_on_exit=False)
    setup = MetricsSetup(provider, True, " and ".join(described))
    setup.push_readers = [r for r in readers if not _is_pull_reader(r)]
    if address is not None and registry is not None:  # (set together)
        from prometheus_client import start_http_server

        try:
            server, _thread = start_http_server(address[1], addr=address[0], registry=registry)
        except OSError as exc:  # the port is taken: a configuration problem, not ours to raise
            logger.warning("otel-coldstart: no Prometheus endpoint on %s:%s (%s); metrics still "
                           "go to the other exporters", address[0], address[1], exc)
        else:
            setup._server = server
            setup.prometheus_address = (address[0], server.server_address[1])
            described.append(f"Prometheus endpoint http://{address[0]}:{setup.prometheus_address[1]}/metrics")
            setup.description = " and ".join(described)
    return setup


def metrics_resource():
    """The tracing default resource plus a ``service.instance.id``: a collector keys series
    by it, and without one every restart of a service would overwrite the last one's."""
    from opentelemetry.sdk.resources import Resource

    from .export import default_resource, sdk_resource

    return Resource({"service.instance.id": str(uuid.uuid4())}).merge(sdk_resource(default_resource()))


def _is_pull_reader(reader) -> bool:
    # Collecting into the Prometheus reader outside a scrape queues a second copy of every
    # series for the next scrape (the exporter emits each queued collection): pull readers
    # are never flushed.
    return type(reader).__name__ == "PrometheusMetricReader"


def _is_sdk_provider(provider: metrics.MeterProvider) -> bool:
    from opentelemetry.metrics._internal import _ProxyMeterProvider

    return not isinstance(provider, (metrics.NoOpMeterProvider, _ProxyMeterProvider))


def periodic_reader(exporter):
    """The SDK's periodic reader for a push exporter. One made once the exit has begun (metrics
    first needed at the exit: the process ended before the monitor's first tick) gets no
    thread: Python 3.12 refuses to start one there, and the SDK's reader starts it in its
    constructor. It exports when :meth:`MetricsSetup.close` flushes it (issue 42)."""
    import math

    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    if exiting():
        return PeriodicExportingMetricReader(exporter, export_interval_millis=math.inf)
    return PeriodicExportingMetricReader(exporter)


def _reader_for(made):
    """What the SDK makes of a metrics exporter: a pull reader as it is, a push exporter
    behind a periodic reader."""
    from opentelemetry.sdk.metrics.export import MetricReader

    return made if isinstance(made, MetricReader) else periodic_reader(made)


def flush(setup: MetricsSetup | None, timeout_s: float, *, wait: bool = True) -> None:
    """Push buffered metrics out now (OTLP), giving the export ``timeout_s``; wait for it
    only if ``wait`` (never longer than ``timeout_s``)."""
    if setup is None:
        return
    if setup.owned:
        targets = setup.push_readers
    else:
        # The SDK provider's readers where they can be seen (a private attribute, read
        # defensively): flushing a Prometheus reader would double the next scrape.
        readers = getattr(setup.provider, "_metric_readers", None)
        if isinstance(readers, (list, tuple)) and all(hasattr(r, "force_flush") for r in readers):
            targets = [r for r in readers if not _is_pull_reader(r)]
        else:
            targets = [setup.provider] if hasattr(setup.provider, "force_flush") else []
    millis = max(timeout_s, 1.0) * 1000  # the export itself gets time even when we do not wait
    for target in targets:
        run_bounded(functools.partial(target.force_flush, timeout_millis=millis), timeout_s if wait else 0.0)
