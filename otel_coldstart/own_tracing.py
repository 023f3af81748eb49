"""Spans without the OpenTelemetry SDK, for when the plugin owns the export.

Importing the SDK (``opentelemetry.sdk.trace``, ``opentelemetry.sdk.resources`` with psutil
and the semantic conventions) costs about 20 ms, on the host's thread, before its first line
of work: a fifth of what a serverless start-up budget allows an observer. When the plugin
made the export itself (the embedded default file, OTLP from the environment, the exporters
``OTEL_TRACES_EXPORTER`` names), nobody but us ever sees our tracer provider, so it can be
this one: spans built on the OpenTelemetry *API* alone (``opentelemetry.trace`` is needed
anyway, for the context that users' and vLLM's spans nest through), with the SDK's
semantics for everything a span does, checked against the SDK by tests/core/test_own_tracing.py:

- trace flags as the SDK's default sampler (``ParentBased(ALWAYS_ON)``) sets them: a span
  under an unsampled parent is not recorded; random ids as the SDK's ``RandomIdGenerator``
  makes them, but from ``os.urandom`` (see :func:`_random_id`);
- attributes, events and links bounded and cleaned by the API's ``BoundedAttributes`` with
  the SDK's default limits (128 of each; values unbounded), exceptions recorded as the SDK
  records them, status rules, warnings on use after ``end()``;
- the resource as ``Resource.create`` builds it with the default detectors (service
  instance id, then ``OTEL_RESOURCE_ATTRIBUTES``/``OTEL_SERVICE_NAME``), sharing the SDK's
  per-process ``service.instance.id`` if the SDK is imported later;
- ended spans batched as the ``BatchSpanProcessor`` batches them (512 per export) and
  exported by a worker thread of ours within ``SCHEDULE_DELAY_S`` (1 s) of the first one
  waiting, at once when a batch is full (the worker is woken, as the SDK's is), or when
  something flushes (the in-flight monitor after each progress record, ``ready()``, exit).

Where the export needs the SDK (OTLP, console), the SDK and the exporter are imported on the
thread that flushes (never the host's: every flush runs on a thread of ours) and our spans
are handed over as SDK ``ReadableSpan`` objects. The local file needs no SDK at all: it is
written from these spans directly (:mod:`otel_coldstart.otlp_json`).

Whenever the environment asks the SDK for anything else (:func:`sdk_settings_in_environment`:
a sampler, an id generator, span limits, batch settings), or a resource detector is
configured, the SDK itself is used, as before.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from ._bounded import exit_has_begun as _exit_begins, exiting as _exit_has_begun

logger = logging.getLogger(__name__)

# The SDK's defaults (opentelemetry.sdk.trace: _DEFAULT_OTEL_*_LIMIT; BatchSpanProcessor).
_MAX_ATTRIBUTES = 128  # per span, per event, per link
_MAX_EVENTS = 128
_MAX_LINKS = 128
MAX_EXPORT_BATCH = 512
# W3C Trace Context level 2's random-trace-id flag, set by the SDK's sampler on the spans of a
# root it made; an API older than the flag (1.27, the oldest we support) has no such name.
_RANDOM_TRACE_ID = getattr(TraceFlags, "RANDOM_TRACE_ID", 0)
# A finished span is exported within this of its end (durable as it goes: a SIGKILL costs the
# last second, not the start-up). The SDK's processor waits 5 s; the worker only wakes when a
# span is waiting, so an idle start-up pays nothing for the shorter delay.
SCHEDULE_DELAY_S = 1.0
MAX_QUEUE = 2048  # after the start-up, as the SDK's processor
# During the start-up every span is kept in the session's ledger anyway (the summary is
# computed from it), so the export queue may hold as many: a burst of user phases is never
# dropped while the worker catches up. Beyond this, drops are counted on the root.
MAX_QUEUE_DURING_STARTUP = 1 << 16
# A thread that fills the queue of a local file sink waits at most this long for the worker's
# write in progress before writing itself; past it the span stays queued (never dropped).
LOCAL_BACKPRESSURE_WAIT_S = 5.0

# Variables that change what the SDK's tracer provider or batch processor does. With any of
# them set, the SDK is used: its reading of them is the definition, not ours.
_SDK_TRACE_SETTINGS = (
    "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_PYTHON_ID_GENERATOR",
    "OTEL_ATTRIBUTE_COUNT_LIMIT", "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT",
    "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT",
    "OTEL_SPAN_EVENT_COUNT_LIMIT", "OTEL_SPAN_LINK_COUNT_LIMIT",
    "OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT", "OTEL_LINK_ATTRIBUTE_COUNT_LIMIT",
    "OTEL_BSP_SCHEDULE_DELAY", "OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
    "OTEL_BSP_EXPORT_TIMEOUT", "OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED",
)
_RESOURCE_DETECTORS = "OTEL_EXPERIMENTAL_RESOURCE_DETECTORS"

# Held by our threads while they import the SDK and exporters (span exporters at the first
# flush, metrics after ready()): two threads importing the OTLP exporter package from
# different ends at once meet in its circular imports, and Python's deadlock avoidance then
# hands one of them a half-initialised module ("cannot import name 'OTLPExporterMixin'").
SDK_IMPORTS = threading.RLock()


_before_exit: list[Callable[[], None]] = []


def before_thread_pools_shut_down(callback: Callable[[], None]) -> None:
    """Run ``callback`` at the interpreter's exit while thread pools still work.

    The SDK and its exporters cannot be imported once the exit has begun: the gRPC exporter's
    import calls ``Resource.create``, which runs a ThreadPoolExecutor, and
    ``concurrent.futures`` refuses new work (or, not imported yet, refuses to be imported)
    from its own threading at-exit hook on. Exporters we make later (off the host's thread)
    must therefore be made before that hook runs, should the process exit first (it may end
    right after ``ready()``). Threading at-exit hooks run in reverse order of registration,
    and ``atexit``'s (where the exit's export happens) only after all of them: ours is
    registered after importing ``concurrent.futures.thread`` (1 ms), so it runs first. A
    callback given again is kept once."""
    if callback in _before_exit:
        return
    if not _before_exit:
        import concurrent.futures.thread  # noqa: F401  (registers its hook: before ours)

        register = getattr(threading, "_register_atexit", None)
        if register is None:  # not CPython 3.9+: the exit's export makes them, if it can
            return
        register(_run_before_exit)
    _before_exit.append(callback)


def _run_before_exit() -> None:
    _exit_begins()  # threading's at-exit hooks are the exit: no thread started from here on
    for callback in _before_exit:
        try:
            callback()
        except Exception:
            logger.debug("otel-coldstart: preparing the exit's export failed", exc_info=True)


def sdk_settings_in_environment() -> list[str]:
    """The SDK trace settings set in the environment (then the SDK is used), else []."""
    return [name for name in _SDK_TRACE_SETTINGS if os.environ.get(name, "").strip()]


# This module mirrors the SDK version by version (tests/core/test_own_tracing.py compares the
# two), and leans on these private names of the API and SDK. It is used only with an SDK at
# least OWN_PROVIDER_MIN_SDK (older ones differ in what they emit: no service.instance.id in
# the default resource, another BoundedAttributes); with an older SDK, or one where any of
# these names moved, the SDK's own provider is used instead (export.configure_tracing).
# tests/core/test_sdk_versions.py checks every name on the installed SDK; CI runs it on the
# newest SDK we pin and the oldest we support (pyproject's lower bound).
OWN_PROVIDER_MIN_SDK = (1, 45)
PRIVATE_NAMES = (
    ("opentelemetry.attributes", "BoundedAttributes", "_set_items"),  # set_attributes, as the SDK's span
    ("opentelemetry.attributes", "BoundedAttributes", "_immutable"),  # frozen at end(), as the SDK's span
    ("opentelemetry.trace", "Link", "_attributes"),  # bounded link attributes, as the SDK's span
    ("opentelemetry.sdk.resources", None, "_service_instance_id_lock"),  # share_instance_id_with_sdk
    ("opentelemetry.sdk.resources", None, "_service_instance_id"),
    ("opentelemetry.sdk.resources", None, "ServiceInstanceIdResourceDetector"),  # service_instance_id()
    ("opentelemetry.sdk.resources", None, "_DEFAULT_RESOURCE"),  # export.create_resource
    ("opentelemetry.sdk.resources", None, "_build_resource_detectors"),
)
_usable: bool | None = None


def usable() -> bool:
    """Whether the own provider may stand in for the SDK's with the installed SDK: its version
    (read from its one-line version module, not the SDK) is one we mirror, and the API's
    private names it uses are there (the SDK's are checked where used, and by the tests)."""
    global _usable
    if _usable is None:
        try:
            parts = tuple(int(p) for p in sdk_version().split(".")[:2])
            api_ok = hasattr(BoundedAttributes, "_set_items") and hasattr(Link(SpanContext(1, 1, False)),
                                                                          "_attributes")
            _usable = parts >= OWN_PROVIDER_MIN_SDK and api_ok
        except Exception:  # a version or an API we cannot read: the SDK's own provider
            _usable = False
    return _usable


# --- resource ---------------------------------------------------------------------------------


class OwnResource:
    """A resource as the exporters read it: ``attributes`` and ``schema_url``."""

    __slots__ = ("attributes", "schema_url")

    def __init__(self, attributes: Mapping[str, Any], schema_url: str = "") -> None:
        self.attributes = BoundedAttributes(attributes=attributes, immutable=True)
        self.schema_url = schema_url


_instance_lock = threading.Lock()
_instance: tuple[int, str] | None = None  # (pid, service.instance.id), as the SDK keeps it


def service_instance_id() -> str:
    """This process's ``service.instance.id``: the SDK's, if its resources module is loaded
    (so that our spans and the SDK's resources agree), else ours, which the SDK adopts if
    it is imported later (:func:`share_instance_id_with_sdk`). New after a fork, as the
    SDK's."""
    global _instance
    sdk_resources = _sdk_resources_module()
    if sdk_resources is not None:
        detected = sdk_resources.ServiceInstanceIdResourceDetector().detect()
        return str(detected.attributes[sdk_resources.SERVICE_INSTANCE_ID])
    import uuid

    with _instance_lock:
        pid = os.getpid()
        if _instance is None or _instance[0] != pid:
            _instance = (pid, str(uuid.uuid4()))
        return _instance[1]


def _sdk_resources_module():
    return sys.modules.get("opentelemetry.sdk.resources")


def share_instance_id_with_sdk(sdk_resources) -> None:
    """Post-import hook for ``opentelemetry.sdk.resources``: give it our instance id, if we
    made one in this process and it has none yet."""
    try:
        with _instance_lock:
            mine = _instance
        if mine is None or mine[0] != os.getpid():
            return
        with sdk_resources._service_instance_id_lock:
            if sdk_resources._service_instance_id is None:
                sdk_resources._service_instance_id = mine[1]
                sdk_resources._service_instance_id_pid = mine[0]
    except Exception:  # the SDK's private names moved: each keeps its own id
        pass


def sdk_default_resource_attributes() -> dict[str, Any] | None:
    """``Resource.create({})``'s attributes, before the caller's own are merged in, computed
    without importing the SDK's resources module; None when a resource detector is
    configured (then only the SDK knows what it detects)."""
    if os.environ.get(_RESOURCE_DETECTORS, "").strip():
        return None
    from urllib import parse

    attributes: dict[str, Any] = {
        "telemetry.sdk.language": "python",
        "telemetry.sdk.name": "opentelemetry",
        "telemetry.sdk.version": sdk_version(),
        "service.instance.id": service_instance_id(),  # ServiceInstanceIdResourceDetector
    }
    # OTELResourceDetector, verbatim in its parsing and its warning.
    items = os.environ.get("OTEL_RESOURCE_ATTRIBUTES")
    if items:
        for item in items.split(","):
            try:
                key, value = item.split("=", maxsplit=1)
            except ValueError as exc:
                logging.getLogger("opentelemetry.sdk.resources").warning(
                    "Invalid key value resource attribute pair %s: %s", item, exc)
                continue
            attributes[key.strip()] = parse.unquote(value.strip())
    service_name = os.environ.get("OTEL_SERVICE_NAME")
    if service_name:
        attributes["service.name"] = service_name
    return dict(BoundedAttributes(attributes=attributes))  # cleaned as Resource() cleans (an empty key goes)


def sdk_version() -> str:
    """The installed SDK's version, from its one-line version module (not the SDK itself)."""
    try:
        from opentelemetry.sdk.version import __version__
    except ImportError:  # an SDK without it: its distribution metadata
        from importlib import metadata

        return metadata.version("opentelemetry-sdk")
    return __version__


# --- spans ------------------------------------------------------------------------------------


class _BoundedList(list):
    """The SDK's BoundedList: keeps the newest ``maxlen`` items and counts the dropped."""

    __slots__ = ("maxlen", "dropped")

    def __init__(self, maxlen: int) -> None:
        super().__init__()
        self.maxlen = maxlen
        self.dropped = 0

    def add(self, item) -> None:
        if len(self) >= self.maxlen:
            del self[0]
            self.dropped += 1
        self.append(item)


class OwnEvent:
    __slots__ = ("name", "timestamp", "attributes")

    def __init__(self, name: str, attributes, timestamp: int | None) -> None:
        self.name = name
        self.timestamp = time.time_ns() if timestamp is None else timestamp
        self.attributes = attributes

    @property
    def dropped_attributes(self) -> int:
        return self.attributes.dropped if isinstance(self.attributes, BoundedAttributes) else 0


class OwnScope:
    """An instrumentation scope: what a tracer was asked for by name and version."""

    __slots__ = ("name", "version", "schema_url", "attributes")

    def __init__(self, name: str, version: str | None, schema_url: str | None, attributes) -> None:
        self.name = name
        self.version = version
        self.schema_url = schema_url
        self.attributes = BoundedAttributes(attributes=attributes, immutable=True)


def _ended_check(method):
    def guarded(self, *args, **kwargs):
        with self._lock:
            if self._end_time is None:
                method(self, *args, **kwargs)
                return
        logger.warning("Tried calling %s on an ended span.", method.__name__)

    guarded.__name__ = method.__name__
    return guarded


_SCALARS = (str, bool, int, float)


def _all_scalar(attributes: Mapping[str, Any]) -> bool:
    """Every key a non-empty string and every value a str, bool, int or float: what
    ``BoundedAttributes`` (no value length limit) stores as given."""
    for key, value in attributes.items():
        if type(key) is not str or not key or type(value) not in _SCALARS:
            return False
    return True


class OwnSpan(trace.Span):
    """An OpenTelemetry API span that behaves as the SDK's ``Span`` with default limits, and
    reads as the SDK's ``ReadableSpan`` once ended (what the exporters and
    :func:`~otel_coldstart.otlp_json.spans_to_otlp_json_line` read)."""

    def __init__(self, provider: OwnTracerProvider, scope: OwnScope, name: str, context: SpanContext,
                 parent: SpanContext | None, kind: SpanKind, attributes, links: Sequence[Link],
                 start_time: int | None, record_exception: bool, set_status_on_exception: bool) -> None:
        self._provider = provider
        self._lock = threading.Lock()
        self.instrumentation_scope = scope
        self._name = name
        self._context = context
        self.parent = parent
        self.kind = kind
        self._attributes = BoundedAttributes(_MAX_ATTRIBUTES, attributes, immutable=False, max_value_len=None)
        # Events and links are made with the first one: most of our spans have neither, and a
        # span waits in the export queue, tracked by the host's garbage collector, for up to
        # SCHEDULE_DELAY_S (a shared empty status likewise: Status is immutable).
        self._events: _BoundedList | None = None
        self._links: _BoundedList | None = None
        for link in links or ():
            if link and _is_valid_link(link.context, link.attributes):
                link._attributes = BoundedAttributes(_MAX_ATTRIBUTES, link.attributes, immutable=True)
                self._add_link_now(link)
        self._status = _UNSET_STATUS
        self._record_exception = record_exception
        self._set_status_on_exception = set_status_on_exception
        self._start_time = start_time if start_time is not None else time.time_ns()
        self._end_time: int | None = None

    # ReadableSpan, for the exporters
    name = property(lambda self: self._name)
    context = property(lambda self: self._context)
    resource = property(lambda self: self._provider.resource)
    attributes = property(lambda self: self._attributes)
    events = property(lambda self: tuple(self._events) if self._events else ())
    links = property(lambda self: tuple(self._links) if self._links else ())
    status = property(lambda self: self._status)
    start_time = property(lambda self: self._start_time)
    end_time = property(lambda self: self._end_time)
    dropped_attributes = property(lambda self: self._attributes.dropped)
    dropped_events = property(lambda self: self._events.dropped if self._events is not None else 0)
    dropped_links = property(lambda self: self._links.dropped if self._links is not None else 0)

    def get_span_context(self) -> SpanContext:
        return self._context

    def is_recording(self) -> bool:
        return self._end_time is None

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        with self._lock:
            if self._end_time is not None:
                logger.warning("Setting attribute on ended span.")
                return
            bounded = self._attributes
            if len(bounded) + len(attributes) <= _MAX_ATTRIBUTES and _all_scalar(attributes):
                # What the API's cleaning would keep unchanged (a file span's ~17 attributes:
                # its cleaning was a tenth of the plugin's per-file cost): set as they are.
                with bounded._lock:
                    items = bounded._dict
                    for key, value in attributes.items():
                        items.pop(key, None)  # re-inserted last, as _setitem_locked does
                        items[key] = value
                return
            bounded._set_items(attributes)

    def set_attribute(self, key: str, value: Any) -> None:
        with self._lock:
            if self._end_time is not None:
                logger.warning("Setting attribute on ended span.")
                return
            self._attributes[key] = value

    @_ended_check
    def _add_event(self, event: OwnEvent) -> None:
        if self._events is None:
            self._events = _BoundedList(_MAX_EVENTS)
        self._events.add(event)

    def add_event(self, name: str, attributes=None, timestamp: int | None = None) -> None:
        self._add_event(OwnEvent(name, BoundedAttributes(_MAX_ATTRIBUTES, attributes, immutable=True), timestamp))

    @_ended_check
    def _add_link(self, link: Link) -> None:
        self._add_link_now(link)

    def _add_link_now(self, link: Link) -> None:
        if self._links is None:
            self._links = _BoundedList(_MAX_LINKS)
        self._links.add(link)

    def add_link(self, context: SpanContext, attributes=None) -> None:
        if not _is_valid_link(context, attributes):
            return
        self._add_link(Link(context, BoundedAttributes(_MAX_ATTRIBUTES, attributes, immutable=True)))

    @_ended_check
    def update_name(self, name: str) -> None:
        self._name = name

    @_ended_check
    def set_status(self, status, description: str | None = None) -> None:
        # The SDK's rules: OK is final, UNSET is never set, a Status carries its own description.
        if isinstance(status, Status):
            if self._status and self._status.status_code is StatusCode.OK or status.status_code is StatusCode.UNSET:
                return
            if description is not None:
                logger.warning("Description %s ignored. Use either `Status` or `(StatusCode, Description)`",
                               description)
            self._status = status
        elif isinstance(status, StatusCode):
            if self._status and self._status.status_code is StatusCode.OK or status is StatusCode.UNSET:
                return
            self._status = Status(status, description)

    def record_exception(self, exception: BaseException, attributes=None, timestamp: int | None = None,
                         escaped: bool = False) -> None:
        import traceback

        module = type(exception).__module__
        qualname = type(exception).__qualname__
        attrs: dict[str, Any] = {
            "exception.type": f"{module}.{qualname}" if module and module != "builtins" else qualname,
            "exception.message": str(exception),
            "exception.stacktrace": "".join(traceback.format_exception(exception)),
            "exception.escaped": str(escaped),
        }
        if attributes:
            attrs.update(attributes)
        self.add_event("exception", attrs, timestamp)

    def end(self, end_time: int | None = None) -> None:
        with self._lock:
            if self._end_time is not None:
                logger.warning("Calling end() on an ended span.")
                return
            self._end_time = end_time if end_time is not None else time.time_ns()
            self._attributes._immutable = True
        self._provider._on_end(self)

    def __exit__(self, exc_type, exc_val, exc_tb) -> None:
        if exc_val is not None and self.is_recording():
            if self._record_exception:
                self.record_exception(exception=exc_val, escaped=True)
            if self._set_status_on_exception:
                self.set_status(Status(StatusCode.ERROR, f"{type(exc_val).__name__}: {exc_val}"))
        super().__exit__(exc_type, exc_val, exc_tb)

    def __repr__(self) -> str:
        return f'{type(self).__name__}(name="{self._name}", context={self._context})'


_UNSET_STATUS = Status(StatusCode.UNSET)
_TRACE_FLAGS: dict[int, TraceFlags] = {}


def _trace_flags(flags: int) -> TraceFlags:
    """One TraceFlags object per value (an int subclass, immutable), not one per span."""
    found = _TRACE_FLAGS.get(flags)
    if found is None:
        found = _TRACE_FLAGS.setdefault(flags, TraceFlags(flags))
    return found


def _is_valid_link(context: SpanContext, attributes) -> bool:
    return bool(context and (context.is_valid or (attributes or context.trace_state)))


def _random_id(bits: int) -> int:
    """A random id, never the invalid 0, from the OS's random source. The SDK's
    RandomIdGenerator draws from the ``random`` module, whose state the host owns: vLLM and
    training code seed it with the same value on every rank, after which the ranks of one
    trace would draw the same span ids."""
    nbytes = bits // 8
    value = int.from_bytes(os.urandom(nbytes), "big")
    while value == 0:
        value = int.from_bytes(os.urandom(nbytes), "big")
    return value


class OwnTracer(trace.Tracer):
    def __init__(self, provider: OwnTracerProvider, scope: OwnScope) -> None:
        self._provider = provider
        self._scope = scope

    def start_span(self, name: str, context=None, kind: SpanKind = SpanKind.INTERNAL, attributes=None,
                   links: Sequence[Link] | None = (), start_time: int | None = None, record_exception: bool = True,
                   set_status_on_exception: bool = True) -> trace.Span:
        parent: SpanContext | None = trace.get_current_span(context).get_span_context()
        if parent is not None and not isinstance(parent, SpanContext):
            raise TypeError("parent_span_context must be a SpanContext or None.")
        # ParentBased(ALWAYS_ON): a root is sampled; a child follows its parent's decision,
        # and carries its trace state.
        if parent is None or not parent.is_valid:
            parent = None
            trace_id, sampled, trace_state, random_trace_id = _random_id(128), True, None, True
        else:
            trace_id, sampled, trace_state = parent.trace_id, parent.trace_flags.sampled, parent.trace_state
            random_trace_id = getattr(parent.trace_flags, "random_trace_id", False)
        flags = TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT
        if random_trace_id and _RANDOM_TRACE_ID:
            flags |= _RANDOM_TRACE_ID
        span_context = SpanContext(trace_id, _random_id(64), is_remote=False, trace_flags=_trace_flags(flags),
                                   trace_state=trace_state)
        if not sampled:
            return NonRecordingSpan(span_context)
        return OwnSpan(self._provider, self._scope, name, span_context, parent, kind, attributes, links or (),
                       start_time, record_exception, set_status_on_exception)

    # The API types it with its private _agnosticcontextmanager; @contextmanager makes the same protocol.
    @contextmanager
    def start_as_current_span(self, name: str, context=None, kind: SpanKind = SpanKind.INTERNAL, attributes=None,  # type: ignore[override]
                              links: Sequence[Link] | None = (), start_time: int | None = None,
                              record_exception: bool = True, set_status_on_exception: bool = True,
                              end_on_exit: bool = True) -> Iterator[trace.Span]:
        span = self.start_span(name, context, kind, attributes, links, start_time, record_exception,
                               set_status_on_exception)
        with trace.use_span(span, end_on_exit=end_on_exit, record_exception=record_exception,
                            set_status_on_exception=set_status_on_exception) as current:
            yield current


# --- the provider: batching and export -------------------------------------------------------


class OwnTracerProvider(trace.TracerProvider):
    """Hands ended spans to ``sink.export(batch) -> bool`` in batches of 512, from a worker
    thread of its own (started with the first span) within ``SCHEDULE_DELAY_S`` of the first
    span waiting, at once when a batch is full (the worker is woken, as the SDK's batch
    processor wakes its own), at once when someone asks with :meth:`flush_on_worker` (the
    in-flight monitor after each record, ``ready()``), and from whichever thread calls
    :meth:`force_flush` (ours: the bounded flushes of exit and SIGTERM). At most
    ``MAX_QUEUE_DURING_STARTUP`` spans wait during the start-up, ``MAX_QUEUE`` after it.
    Beyond that, a local file sink (``sink.local``) is written by the thread that ends the
    span (no span is lost to a burst); spans for a network exporter are dropped and counted
    (``dropped_spans``), as the SDK drops them, since waiting on a network would stall the host."""

    def __init__(self, resource: OwnResource, sink) -> None:
        self.resource = resource
        self.sink = sink  # export(spans) -> bool, shutdown(): the local file, or SdkExporters
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)  # a span waits, a batch is full, or closing
        self._flush_lock = threading.Lock()  # one export at a time: batches go out in end order
        self._pending: list[OwnSpan] = []
        self._max_queue = MAX_QUEUE_DURING_STARTUP
        self.dropped_spans = 0
        self.failed_exports = 0  # batches the sink refused (an exporter that failed)
        self.last_export_ok: bool | None = None
        self._closed = False
        # The sink writes a local file (export never waits on a network): a full queue is
        # written by the thread that filled it instead of dropping (see _on_end).
        self._sink_is_local = bool(getattr(sink, "local", False))
        self._flushing_thread = 0
        self._worker: threading.Thread | None = None
        self._worker_pid = 0
        self._flush_requests()

    def get_tracer(self, instrumenting_module_name: str, instrumenting_library_version: str | None = None,
                   schema_url: str | None = None, attributes=None) -> trace.Tracer:
        if not instrumenting_module_name:
            logger.error("get_tracer called with missing module name.")
            instrumenting_module_name = ""
        return OwnTracer(self, OwnScope(instrumenting_module_name, instrumenting_library_version, schema_url,
                                        attributes))

    def _on_end(self, span: OwnSpan) -> None:
        if self._closed:
            return
        if self._worker is None or self._worker_pid != os.getpid():  # none yet, or forked
            self._start_worker()
        write_here = False
        with self._lock:
            if len(self._pending) >= self._max_queue:
                if (not self._sink_is_local or self._flushing_thread == threading.get_ident()
                        or self.last_export_ok is False or len(self._pending) >= 2 * self._max_queue):
                    # A network exporter, a span ended inside our own export, a file that
                    # refuses writes, or a writer stuck past the wait: memory stays bounded.
                    self.dropped_spans += 1
                    return
                # A local file never waits on a network: the thread that outruns the worker
                # writes a batch itself rather than lose a span (a burst pays for its own
                # export; a host that ends spans slower than a file takes them never does).
                write_here = True
            self._pending.append(span)
            waiting = len(self._pending)
            # Wake the worker for the first span (its delay starts) and for a full batch.
            if waiting == 1 or waiting == MAX_EXPORT_BATCH:
                self._ready.notify()
        if write_here:
            self.force_flush(timeout_millis=int(LOCAL_BACKPRESSURE_WAIT_S * 1000))

    def export_in_background(self) -> None:
        """The start-up is over: the queue is bounded as the SDK's processor bounds it."""
        with self._lock:
            self._max_queue = MAX_QUEUE

    def _flush_requests(self) -> None:
        # Flushes asked of the worker (flush_on_worker): a count of requests and of those
        # carried out, so each asker waits for an export that began after it asked.
        self._flushes_asked = 0
        self._flushes_done = 0
        self._flushed = threading.Condition(self._lock)

    def _start_worker(self) -> None:
        if _exit_has_begun():  # never a thread started at the exit (_bounded.py)
            return
        with self._lock:
            if self._worker is not None and self._worker_pid == os.getpid():
                return
            if self._worker_pid != os.getpid() and self._worker is not None:
                # A forked child: the parent's lock state and queue are not ours.
                self._lock = threading.Lock()
                self._ready = threading.Condition(self._lock)
                self._flush_lock = threading.Lock()
                self._flushing_thread = 0
                self._pending = []
                self._flush_requests()
            self._worker_pid = os.getpid()
            self._worker = threading.Thread(target=self._work, name="otel-coldstart-span-export", daemon=True)
        try:
            self._worker.start()
        except RuntimeError:
            # No new thread once the interpreter's exit has begun (3.12; a forked child whose
            # first span ends at its exit): the spans wait in the queue, and the exit's flush
            # writes them on its own thread (flush_on_worker).
            with self._lock:
                self._worker = None

    def _has_worker(self) -> bool:
        return self._worker is not None and self._worker_pid == os.getpid()

    def _work(self) -> None:
        while True:
            with self._lock:
                while not self._pending and not self._closed and self._flushes_done == self._flushes_asked:
                    self._ready.wait()
                if self._closed:
                    return
                # Gather what ends in the next moment into the same batch, unless one is full
                # or a flush is asked for.
                deadline = time.monotonic() + SCHEDULE_DELAY_S
                while (len(self._pending) < MAX_EXPORT_BATCH and not self._closed
                       and self._flushes_done == self._flushes_asked):
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._ready.wait(remaining)
                if self._closed:
                    return
                asked = self._flushes_asked
            try:
                self.force_flush()
            except Exception:  # an exporter's failure is the exporter's to log
                pass
            with self._lock:
                if asked != self._flushes_done:
                    self._flushes_done = asked
                    self._flushed.notify_all()

    def flush_on_worker(self, timeout_s: float) -> bool:
        """Have the worker export every span ended so far, and wait at most ``timeout_s`` for
        it (0: do not wait). True once it is written (or there was nothing to write); False
        when the wait ran out or the sink refused a batch.

        What the in-flight monitor does after each record, and ``ready()``: the export runs on
        the worker that exists anyway, so a flush starts no thread. A thread started per
        flush cost 0.2-0.3 ms of CPU on a quiet machine and up to 4 ms under load, each
        time, beside the host's intra-op threads; a short start-up writes a record every
        quarter second (benchmarks/RESULTS.md, seventh round). An export that hangs holds the
        worker, never the asker past ``timeout_s``."""
        if self._closed:
            return self.last_export_ok is not False
        if threading.current_thread() is self._worker:  # asked from inside an export: the worker
            return self.last_export_ok is not False  # is already at it, and must not wait on itself
        if self._worker is None or self._worker_pid != os.getpid():  # none yet, or forked
            if self._worker is None and not self._pending:
                return self.last_export_ok is not False  # nothing ended yet: no worker needed
            self._start_worker()
            if not self._has_worker():  # refused at the exit: this thread writes, within its wait
                return timeout_s > 0 and self.force_flush(timeout_millis=int(timeout_s * 1000))
        with self._lock:
            self._flushes_asked += 1
            ticket = self._flushes_asked
            self._ready.notify()
            if timeout_s <= 0:
                return True
            deadline = time.monotonic() + timeout_s
            while self._flushes_done < ticket and not self._closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._flushed.wait(remaining)
        return self.last_export_ok is not False

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        if not self._flush_lock.acquire(timeout=max(timeout_millis, 0) / 1000):
            return False
        self._flushing_thread = threading.get_ident()  # a span ended inside an export must not wait on itself
        try:
            while True:
                with self._lock:
                    batch, self._pending[:MAX_EXPORT_BATCH] = self._pending[:MAX_EXPORT_BATCH], []
                if not batch:
                    return self.last_export_ok is not False
                ok = bool(self.sink.export(batch))
                self.last_export_ok = ok
                if not ok:
                    self.failed_exports += 1
                    return False
        finally:
            self._flushing_thread = 0
            self._flush_lock.release()

    def shutdown(self) -> None:
        if self._closed:
            return
        self.force_flush()
        with self._lock:
            self._closed = True
            self._ready.notify_all()
            self._flushed.notify_all()
        self.sink.shutdown()


# --- handing spans to SDK exporters ----------------------------------------------------------


class SdkExporters:
    """SDK exporters made on first use, on the exporting thread (ours), fed our spans as
    SDK ``ReadableSpan`` objects. ``factories``: (name, make) pairs; one that fails to be
    made is left out with the warning the controller gives for it (``on_failure``)."""

    def __init__(self, factories: Sequence[tuple[str, Callable[[], Any]]],
                 on_failure: Callable[[str, Exception], None]) -> None:
        self._factories = list(factories)
        self._on_failure = on_failure
        self._exporters: list | None = None
        self._sdk_resource: Any = None  # the SDK's Resource, made on first use (the SDK is imported late)
        self._lock = threading.Lock()

    def exporters(self) -> list:
        """The exporters, made now if they were not yet (on the calling thread)."""
        with self._lock, SDK_IMPORTS:
            if self._exporters is None:
                # What readable() needs too, imported here under the same lock.
                import opentelemetry.sdk.resources  # noqa: F401
                import opentelemetry.sdk.trace  # noqa: F401
                import opentelemetry.sdk.util.instrumentation  # noqa: F401

                exporters = []
                for name, make in self._factories:
                    try:
                        exporters.append(make())
                    except Exception as exc:
                        self._on_failure(name, exc)
                self._exporters = exporters
            return self._exporters

    def export(self, spans: Sequence[OwnSpan]) -> bool:
        exporters = self.exporters()
        if not exporters:
            return True
        readable = [self.readable(span) for span in spans]
        from opentelemetry.sdk.trace.export import SpanExportResult

        ok = True
        for exporter in exporters:
            try:
                ok = exporter.export(readable) is SpanExportResult.SUCCESS and ok
            except Exception:
                logger.exception("Exception while exporting Span batch.")
                ok = False
        return ok

    def shutdown(self) -> None:
        with self._lock:
            exporters = self._exporters or []
        for exporter in exporters:
            try:
                exporter.shutdown()
            except Exception:
                logger.exception("Exception while shutting down exporter.")

    def readable(self, span: OwnSpan):
        """The SDK ``ReadableSpan`` an SDK span with the same history would have produced."""
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import Event, ReadableSpan
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        if self._sdk_resource is None:
            self._sdk_resource = Resource(span.resource.attributes, span.resource.schema_url)
        scope = span.instrumentation_scope
        return ReadableSpan(
            name=span.name, context=span.context, parent=span.parent, resource=self._sdk_resource,
            attributes=span.attributes,
            events=_bounded([Event(e.name, e.attributes, e.timestamp) for e in span._events or ()], span._events,
                            _MAX_EVENTS),
            links=_bounded(list(span._links or ()), span._links, _MAX_LINKS),
            kind=span.kind, status=span.status, start_time=span.start_time, end_time=span.end_time,
            instrumentation_scope=InstrumentationScope(scope.name, scope.version, scope.schema_url,
                                                       dict(scope.attributes)),
        )


def _bounded(items: list, like: _BoundedList | None, maxlen: int):
    """An SDK BoundedList holding ``items``, with ``like``'s dropped count (none made: 0)."""
    from opentelemetry.sdk.util import BoundedList

    bounded = BoundedList.from_seq(like.maxlen if like is not None else maxlen, items)
    bounded.dropped = like.dropped if like is not None else 0
    return bounded
