"""The first request: from ready() to the first token.

A cold start, as an autoscaler's users measure it, ends at the first token, not at
``ready()``: the first request pays what the start-up left undone (pages of lazily mapped
weights, a lazy compilation or graph capture for a new shape, allocator growth). This module
records that request once per process, for ``otel_coldstart.first_request()`` (the package
face) and the vLLM plugin (patches/vllm.py):

- **One span under the root, after it.** ``coldstart.first_request`` is a child of
  ``model.startup`` in the start-up's trace (the analyzer finds it with the start-up), though
  the root ended at ``ready()``: a child may outlive its parent in OTel, and only in this
  trace does the analyzer see what the first request did with what the start-up left. It is
  never made the OTel-current span: the host's own request spans (a web framework's) stay in
  their own traces. Our spans made during it on its thread (a graph capture, a compilation
  after ready()) nest under it through an ambient parent (session.AmbientParent), as inside a
  ``safe_open`` handle. Its ``coldstart.first_request.request_trace_id`` names the host's
  request trace when one is current.
- **Durable as it goes.** A zero-length ``coldstart.first_request.begun`` record is written
  (and flushed, without waiting) when it begins: a process killed during its first request
  still says that it had begun, and when. An exit or SIGTERM handled by us while it runs ends
  it marked ``coldstart.interrupted`` (Startup.finish, before the exporters are drained).
- **The metric** ``model.startup.time_to_first_token`` (process start to the request's end,
  successful requests only) is recorded on a thread of ours: the metrics SDK may not even be
  imported yet (metrics only we push are made after ready()).
- **Before ready()**: a request served means the model serves; the start-up ends there as
  ``ready()`` would end it (the root says ``coldstart.ready.by=first_request``), then the
  request is recorded. So the first token never comes before ready.

Nothing here runs after the first request: the face (``otel_coldstart.first_request``)
checks one module global and calls the host's function.
"""

from __future__ import annotations

import os
import threading
import time

from opentelemetry import trace

from . import export, semconv, session as _session
from ._bounded import in_background
from ._errors import internal_errors

SOURCE_API = "first_request()"
SOURCE_VLLM = "vllm"
_STATE = "first_request"


class _State:
    """Per start-up: whether its first request was claimed, and the one running."""

    __slots__ = ("claimed", "running")

    def __init__(self) -> None:
        self.claimed = False
        self.running: FirstRequest | None = None


_claim_lock = threading.Lock()


class FirstRequest:
    """The first request of one start-up, from :func:`begin` to :meth:`end`."""

    __slots__ = ("session", "container", "ambient", "start_ns", "_ended", "_lock")

    def __init__(self, session, container, ambient, start_ns: int) -> None:
        self.session = session
        self.container = container
        self.ambient = ambient
        self.start_ns = start_ns
        self._ended = False
        self._lock = threading.Lock()

    def end(self, error: BaseException | None = None, *, reason: str | None = None) -> None:
        """The request ended (``error``: what it raised), or the process is ending while it
        runs (``reason``: semconv.END_*): end the span once, record the metric, flush."""
        with self._lock:
            if self._ended:
                return
            self._ended = True
        end_ns = time.time_ns()
        session = self.session
        self.ambient.open = False
        state = session.state(_STATE, _State)
        state.running = None
        ttft_s = max(0, end_ns - session.start_ns) / 1e9
        attrs = {semconv.FIRST_REQUEST_TTFT_S: round(ttft_s, 6)}
        if reason is not None:
            attrs[semconv.INTERRUPTED] = True
            attrs[semconv.FIRST_REQUEST_END] = reason
        self.container.finish(attrs, error=error, end_ns=end_ns, detach=False)  # never attached: nothing to detach
        startup = session.startup
        if startup is None:
            return
        if error is None and reason is None and (startup.metrics is not None or startup.metrics_later):
            in_background(lambda: _record_metric(startup, ttft_s), name="otel-coldstart-first-request")
        if reason is None:  # an ending drains the exporters itself
            _flush(startup)


def begin(session, source: str = SOURCE_API) -> FirstRequest | None:
    """Begin the first request of ``session``'s start-up; None when it was claimed already,
    the start-up ended otherwise than ready() (exit, uninstrument()), or this is a forked
    copy. Before ready(), ends the start-up first (see the module's docstring)."""
    if session.pid != os.getpid():
        return None
    state = session.state(_STATE, _State)
    with _claim_lock:
        if state.claimed:
            return None
        state.claimed = True
    if not session.ended:
        session.root_attributes[semconv.READY_BY] = semconv.PHASE_FIRST_REQUEST
        from .controller import CONTROLLER

        CONTROLLER.ready()
    if session.end_reason != semconv.END_READY:
        return None
    start = time.time_ns()
    host_span = trace.get_current_span().get_span_context()
    attrs = {semconv.FIRST_REQUEST_SOURCE: source,
             semconv.FIRST_REQUEST_AFTER_READY_S: round(max(0, start - (session.end_ns or start)) / 1e9, 6)}
    if host_span.is_valid and host_span.trace_id != session.root_context.trace_id:
        attrs[semconv.FIRST_REQUEST_REQUEST_TRACE_ID] = format(host_span.trace_id, "032x")
    session.emit_record(semconv.SPAN_FIRST_REQUEST_BEGUN, session.root_context, start, dict(attrs))
    container = session.start_container(semconv.PHASE_FIRST_REQUEST, attrs, name=semconv.SPAN_FIRST_REQUEST,
                                        start_ns=start, make_current=False, parent=session.root_context)
    # Our spans made on this thread while the host's current span is the one current now
    # (graph captures, compilations) nest under the first request.
    ambient = _session.push_ambient_parent(_session.current_span_id(), container.span_context, session)
    request = FirstRequest(session, container, ambient, start)
    state.running = request
    if session.startup is not None:
        _flush(session.startup)
    return request


def end_running(session, reason: str) -> None:
    """The process is ending (exit, SIGTERM, ``uninstrument()``) while the first request runs:
    end it marked interrupted with ``reason``. Called by Startup._drain, first."""
    state = session.state(_STATE, _State)
    running = state.running
    if running is not None:
        running.end(reason=reason)


def _flush(startup) -> None:
    """Our own provider's export of what just ended, never waited for: the worker writes it
    within moments (a local append) or sends it. A provider the host made keeps its schedule."""
    with internal_errors("first-request flush"):
        if startup.setup.owned:
            export.flush(startup.setup, startup.options.export_timeout_s, wait=False)


def _record_metric(startup, ttft_s: float) -> None:
    """On a thread of ours: ``model.startup.time_to_first_token``, then a push of the metrics
    only we push (a periodic reader would hold it for its interval)."""
    with internal_errors("first-request metric"):
        metrics_setup = startup.metrics_now()
        if metrics_setup is None:
            return
        from .metrics import DURATION_BUCKETS_S, flush
        from .package import __version__

        meter = metrics_setup.provider.get_meter("otel_coldstart", __version__)
        histogram = meter.create_histogram(
            semconv.METRIC_TIME_TO_FIRST_TOKEN, unit="s",
            description="Wall time from process start to the end of the first request served after ready()",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS_S)
        histogram.record(ttft_s, startup.metric_labels())
        flush(metrics_setup, startup.options.export_timeout_s)
