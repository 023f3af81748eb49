"""The controller: owns the patches and the start-up session, from ``instrument()`` to
``ready()`` or exit.

``otel_coldstart.instrument()`` drives it directly; the OTel ``BaseInstrumentor`` that
``opentelemetry-instrument`` finds through the entry point (instrumentor.py) is a thin
adapter over it. Keeping ``BaseInstrumentor`` out of this module keeps
``opentelemetry.instrumentation`` (and ``packaging``, which it imports for dependency
checks: about 15 ms) off the start-up of every process that calls ``instrument()``.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

import wrapt
from opentelemetry import context as otel_context
from opentelemetry import trace

from . import _otel_env, ending, export, own_tracing, patches, semconv
from .inflight import (DEFAULT_PROGRESS_INTERVAL_S, DEFAULT_STALL_AFTER_S, ENV_PROGRESS_INTERVAL_S, ENV_STALL_AFTER_S,
                       seconds_option)
from . import session as _session
from ._bounded import in_background
from ._errors import report_internal_error

_hooks_registered = False


def _env_carrier_context(parent_var: str, state_var: str):
    """The context one spelling of the environment carrier holds, or None."""
    value = os.environ.get(parent_var)
    if not value:
        return None
    carrier = {"traceparent": value}
    if os.environ.get(state_var):
        carrier["tracestate"] = os.environ[state_var]
    # Imported here: only a process with a launcher's carrier needs the propagator.
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    ctx = TraceContextTextMapPropagator().extract(carrier)
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


def _launcher_context():
    """The parent a launcher passed down, else whatever span is current.

    ``TRACEPARENT`` is OTel's environment-carrier spelling; vLLM writes a lowercase
    ``traceparent`` into ``os.environ`` while each of its start-up spans runs, so that the
    processes it spawns there inherit it. When both are set and share a trace, the lowercase
    one was derived from the uppercase one in between (vLLM reads ``TRACEPARENT`` when it
    has nothing better) and is the nearer parent; when they disagree the spec's spelling wins
    over a stray variable.
    """
    upper = _env_carrier_context("TRACEPARENT", "TRACESTATE")
    lower = _env_carrier_context("traceparent", "tracestate")
    if upper is not None and lower is not None:
        upper_trace = trace.get_current_span(upper).get_span_context().trace_id
        lower_trace = trace.get_current_span(lower).get_span_context().trace_id
        return lower if lower_trace == upper_trace else upper
    if upper is not None or lower is not None:
        return upper if upper is not None else lower
    if trace.get_current_span().get_span_context().is_valid:
        return otel_context.get_current()
    return None


# Launchers' variables, most specific first: torchrun/torch.distributed, Open MPI, MPICH/
# Intel MPI, Slurm.
_RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")
_WORLD_SIZE_VARS = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS")
_LOCAL_RANK_VARS = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID")


def _first_int(names) -> int | None:
    for name in names:
        value = os.environ.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return None


def _rank_attributes() -> dict[str, Any]:
    """Rank, world size and local rank of this process: from torch.distributed once its
    process group is up (the truth, and the only source where a framework such as vLLM passes
    ranks as arguments, not variables), else from the launcher's environment variables.

    Called at instrument() and again when the start-up ends, because the process group is
    usually created after instrument(). torch is never imported here.
    """
    attrs: dict[str, Any] = {}
    rank, world_size = _first_int(_RANK_VARS), _first_int(_WORLD_SIZE_VARS)
    local_rank = _first_int(_LOCAL_RANK_VARS)
    distributed = sys.modules.get("torch.distributed")
    try:
        if distributed is not None and distributed.is_available() and distributed.is_initialized():
            rank, world_size = distributed.get_rank(), distributed.get_world_size()
    except Exception:  # a half-torn-down process group: keep what the environment says
        pass
    if rank is not None:
        attrs[semconv.RANK] = rank
    if world_size is not None:
        attrs[semconv.WORLD_SIZE] = world_size
    if local_rank is not None:
        attrs[semconv.LOCAL_RANK] = local_rank
    return attrs


class Controller:
    """One per process (``CONTROLLER``). See :func:`otel_coldstart.instrument` for options."""

    def __init__(self) -> None:
        self._state: _State | None = None

    @property
    def active(self) -> bool:
        return self._state is not None

    @property
    def session(self) -> "_session.StartupSession | None":
        return self._state.session if self._state else None

    @property
    def trace_file(self) -> str | None:
        return self._state.setup.file_path if self._state else None

    def start(self, **kwargs: Any) -> None:
        """Instrument (idempotent: does nothing while a start-up is being traced).

        A bad option is the caller's mistake and raises (an unknown name: TypeError naming
        the valid ones; a bad value: ValueError), even when already instrumented; anything
        else that goes wrong here (an output directory we cannot create, say) leaves the
        host running uninstrumented, with the error logged."""
        unknown = sorted(set(kwargs) - set(_Options.__slots__) - _PROVIDER_OPTIONS)
        if unknown:  # a typo'd option would otherwise be silently ignored
            raise TypeError(f"instrument() got unknown option(s) {', '.join(map(repr, unknown))}; valid options: "
                            f"{', '.join(sorted(set(_Options.__slots__) | _PROVIDER_OPTIONS))}")
        if self._state is not None:
            return
        entered_ns = time.perf_counter_ns()
        options = _Options(**{k: v for k, v in kwargs.items() if k in _Options.__slots__})
        try:
            self._start(options, kwargs, entered_ns)
        except Exception:
            report_internal_error("instrument")
            _session.ACTIVE = None
            self._state = None

    def _start(self, options: "_Options", kwargs: dict, entered_ns: int) -> None:
        if _otel_env.sdk_disabled():
            return  # OTEL_SDK_DISABLED=true: the SDK records nothing, so neither do we (no patches)
        setup = export.configure_tracing(kwargs.get("tracer_provider"), options.output_dir)
        from . import __version__

        tracer = setup.provider.get_tracer("otel_coldstart", __version__)
        resource = getattr(setup.provider, "resource", None)
        resource_attrs = dict(resource.attributes) if resource is not None else {}
        summary = options.summary
        if summary is None:
            summary = _session.env_flag("OTEL_COLDSTART_SUMMARY", setup.file_path is not None)
        # Metrics only we push (OTLP, console): made on a thread of ours when first needed (the
        # in-flight monitor's first tick, or after ready()), never on the host's thread: the
        # metrics SDK and an OTLP exporter are ~80 ms of imports.
        metrics_later = _metrics_can_wait(kwargs.get("meter_provider"), options.prometheus_port)
        metrics_setup = None if metrics_later else _configure_metrics(kwargs.get("meter_provider"),
                                                                      options.prometheus_port)
        if metrics_later or (setup.exports and isinstance(getattr(setup.provider, "sink", None),
                                                         own_tracing.SdkExporters)):
            own_tracing.before_thread_pools_shut_down(_make_exporters_before_exit)
        if not setup.exports and not summary and metrics_setup is None and not metrics_later:
            return  # OTEL_TRACES_EXPORTER=none and nothing else would read the start-up: stay out
        session = _session.StartupSession(
            tracer, resource=resource_attrs, start_at=options.start_at,
            parent_context=_launcher_context(), root_attributes=_rank_attributes(),
            import_attributes=_own_import_attributes(entered_ns),
        )
        state = self._state = _State(session, setup, options, summary, metrics_setup, metrics_later)
        _start_inflight(session, setup, options, metrics_setup,
                        prepare=(lambda: _make_metrics_later(state)) if metrics_later else None)
        # The process group is usually created after instrument(): read the rank again at the end.
        session.on_end(lambda: session.root_attributes.update(_rank_attributes()))
        for module in patches.ALL:
            end_hook = getattr(module, "end_of_startup", None)
            if end_hook is not None:
                session.on_end(lambda hook=end_hook: hook(session))
        _session.ACTIVE = session
        _register_hooks()
        for module in patches.ALL:
            for target in module.TARGETS:
                if target in sys.modules:
                    _patch_module(module)
        ending.register_exit(self.at_exit)
        if options.handle_sigterm:
            ending.SIGTERM.install(lambda: self.at_exit(semconv.END_SIGTERM), options.export_timeout_s)

    def stop(self) -> None:
        """Uninstrument: end the start-up if open, remove every patch, give the host back
        its SIGTERM disposition."""
        state = self._state
        ending.SIGTERM.release()
        if state is not None and not state.session.ended:
            self._end(ready=False, reason=semconv.END_UNINSTRUMENTED)
        if state is not None and state.after_ready_job is not None:
            state.after_ready_job.join(state.options.export_timeout_s)  # summary and metrics before the close
        if state is not None and state.metrics is not None:
            try:
                state.metrics.close(state.options.export_timeout_s)
            except Exception:
                report_internal_error("metrics close")
        for module in patches.ALL:
            try:
                module.unpatch()
            except Exception:
                report_internal_error(f"unpatch {module.__name__}")
        _session.ACTIVE = None
        self._state = None

    # --- end of start-up ----------------------------------------------------------------

    def ready(self) -> None:
        if self._state is None:
            return
        # Serving begins: the host's SIGTERM disposition is its own again.
        ending.SIGTERM.release()
        self._end(ready=True, reason=semconv.END_READY)

    def _end(self, *, ready: bool, reason: str, at_exit: bool = False, exception_type: str | None = None) -> None:
        state = self._state
        if state is None or not state.session.end(ready=ready, reason=reason, exception_type=exception_type):
            return
        for module in patches.ALL:
            if module.HOT_PATH:  # steady-state serving must pay nothing
                try:
                    module.unpatch()
                except Exception:
                    report_internal_error(f"unpatch {module.__name__}")
        if state.metrics is None and not state.metrics_later:  # a meter provider may have been set since
            state.metrics = _configure_metrics(None, state.options.prometheus_port)
        if at_exit and state.metrics_later:  # nothing runs after the exit: make them now
            _make_metrics_later(state)
        # Metrics someone may read in-process right after ready() (a provider the user passed,
        # a Prometheus endpoint) are recorded here; metrics only we push, and the summary,
        # need no answer on the host's thread: after ready() a thread of ours computes the
        # breakdown (the analysis imports alone are ~8 ms), prints the summary and records
        # and pushes the metrics. At exit everything happens here, under at_exit's deadline.
        metrics_here = state.metrics is not None and (at_exit or not state.metrics_later)
        metrics_after = state.metrics_later and not at_exit
        summary_after = state.summary and not metrics_here and not at_exit
        breakdown = None
        if (state.summary and not summary_after) or metrics_here:
            breakdown = _breakdown(state)
        if metrics_here:
            _record_metrics(state, breakdown)
        if not at_exit:  # at exit, at_exit() drains everything under one deadline
            timeout = state.options.export_timeout_s
            if metrics_here:
                try:
                    from .metrics import flush as flush_metrics

                    flush_metrics(state.metrics, timeout, wait=False)  # push now, in the background
                except Exception:
                    report_internal_error("metrics flush")
            try:
                # A local file is quick to write, and the summary names it: wait for it. A
                # remote collector never holds ready().
                export.flush(state.setup, timeout, wait=state.setup.file_path is not None)
                state.setup.start_up_over()  # what ends after ready() (captures, loads) goes out by itself
            except Exception:
                report_internal_error("flush")
        elif state.summary and state.setup.file_path is not None:
            # The summary says whether the file was written: write it first (a local file is
            # quick; at_exit's own flush then finds nothing left).
            try:
                export.flush(state.setup, state.options.export_timeout_s, wait=True)
            except Exception:
                report_internal_error("flush")
        if summary_after or metrics_after:
            state.after_ready_job = in_background(lambda: _after_ready(state, summary_after, metrics_after),
                                                  name="otel-coldstart-after-ready")
        elif state.summary and breakdown is not None:
            _print_summary(state, breakdown)

    def at_exit(self, reason: str = semconv.END_EXIT, exception_type: str | None = None) -> None:
        """End the start-up if still open and export everything, all within one
        ``export_timeout_s`` deadline (traces and metrics drain side by side). Called by
        ending.py at exit and on SIGTERM, never inside a signal handler."""
        state = self._state
        if state is None:
            return
        self._end(ready=False, reason=reason, at_exit=True, exception_type=exception_type)
        timeout = state.options.export_timeout_s
        deadline = time.monotonic() + timeout
        if state.after_ready_job is not None:  # the summary and metrics after ready(): let them finish
            state.after_ready_job.join(timeout)
        jobs = [in_background(lambda: export.finish(state.setup, timeout))]
        if state.metrics is not None:
            from .metrics import flush as flush_metrics

            metrics_setup = state.metrics
            if metrics_setup.owned:
                jobs.append(in_background(lambda: metrics_setup.close(timeout)))
            else:
                jobs.append(in_background(lambda: flush_metrics(metrics_setup, timeout)))
        for job in jobs:
            job.join(max(0.0, deadline - time.monotonic()))


def _after_ready(state: "_State", summary: bool, metrics: bool) -> None:
    """On a thread of ours after ready(): the summary, then the metrics only we push."""
    breakdown = _breakdown(state)
    if summary:
        _print_summary(state, breakdown)
    if metrics and _make_metrics_later(state) is not None:
        _record_metrics(state, breakdown)
        try:
            from .metrics import flush as flush_metrics

            flush_metrics(state.metrics, state.options.export_timeout_s)
        except Exception:
            report_internal_error("metrics flush")


def _make_exporters_before_exit() -> None:
    """At the exit, before thread pools shut down: the exporters made later (span exporters
    at the first flush, metrics after ready()) are made now if they were not yet, so that
    the exit's export (atexit, afterwards) has them. A no-op when they exist."""
    state = CONTROLLER._state
    if state is None:
        return
    sink = getattr(state.setup.provider, "sink", None)
    if isinstance(sink, own_tracing.SdkExporters):
        sink.exporters()
    if state.metrics_later:
        _make_metrics_later(state)


def _make_metrics_later(state: "_State"):
    """Make the metrics only we push, once, on whichever of our threads needs them first (the
    in-flight monitor registers its gauges on them while the start-up runs)."""
    with state.lock:
        if state.metrics is None and state.metrics_later:
            with own_tracing.SDK_IMPORTS:
                state.metrics = _configure_metrics(None, None)
            session = state.session
            if state.metrics is not None and session.progress is not None and not session.ended:
                try:
                    from .inflight import register_gauges
                    from .metrics import identifying_attributes

                    labels = identifying_attributes(session.resource, state.options.metric_attributes)
                    register_gauges(state.metrics.provider, session.progress, labels)
                except Exception:
                    report_internal_error("inflight gauges")
        return state.metrics


def _record_metrics(state: "_State", breakdown) -> None:
    if breakdown is None or state.metrics is None:
        return
    try:
        from .metrics import StartupMetrics, identifying_attributes

        session = state.session
        labels = identifying_attributes(session.resource, state.options.metric_attributes)
        StartupMetrics(state.metrics.provider).record(breakdown, labels, session.records(),
                                                      trace_context=session.root_context)
    except Exception:
        report_internal_error("metrics")


def _breakdown(state: "_State"):
    """The breakdown of the start-up from the session's ledger, or None if it fails."""
    try:
        from .analyze.breakdown import compute_breakdown  # needed only now

        records = state.session.records()
        root = next(r for r in reversed(records) if r.is_root)
        return compute_breakdown(root, records)
    except Exception:
        report_internal_error("breakdown")
        return None


def _print_summary(state: "_State", breakdown) -> None:
    if breakdown is None:
        return
    try:
        from .analyze.findings import find
        from .analyze.render import render_findings_text, render_text

        out = sys.stderr
        out.write("\n[otel-coldstart] start-up breakdown\n")
        render_text(breakdown, out)
        render_findings_text(find([breakdown]), out)
        if state.setup.file_path:
            outcome = state.setup.file_exporter.outcome() if state.setup.file_exporter else ""
            out.write(f"  {outcome}\n")
            if outcome.startswith("trace written to"):  # only a file that is there
                out.write(f"  analyze it again: otel-coldstart analyze {state.setup.file_path}\n")
        out.flush()
    except Exception:
        report_internal_error("summary")


CONTROLLER = Controller()
_import_counted = False


def _own_import_attributes(instrument_entered_ns: int) -> dict[str, float]:
    """otel-coldstart's own share of the ``import`` phase: importing the package (timed by
    otel_coldstart/__init__.py itself, dependencies it pulled in included) and instrument()'s
    set-up so far. Counted once per process: a later start-up did not import us again."""
    global _import_counted
    own_ns = time.perf_counter_ns() - instrument_entered_ns
    if not _import_counted:
        _import_counted = True
        package = sys.modules.get("otel_coldstart")
        started, ended = getattr(package, "_IMPORT_STARTED_NS", None), getattr(package, "_IMPORT_ENDED_NS", None)
        if isinstance(started, int) and isinstance(ended, int) and ended >= started:
            own_ns += ended - started
    return {semconv.IMPORT_OWN_S: own_ns / 1e9}


_PROVIDER_OPTIONS = frozenset({"tracer_provider", "meter_provider"})


class _Options:
    __slots__ = ("start_at", "output_dir", "summary", "export_timeout_s", "handle_sigterm", "metric_attributes",
                 "prometheus_port", "progress_interval_s", "stall_after_s")

    def __init__(self, start_at: str = "process", output_dir: str | None = None, summary: bool | None = None,
                 export_timeout_s: float = 5.0, handle_sigterm: bool = True,
                 metric_attributes: dict | None = None, prometheus_port: int | None = None,
                 progress_interval_s: float | None = None, stall_after_s: float | None = None) -> None:
        if start_at not in ("process", "instrument"):
            raise ValueError("start_at must be 'process' or 'instrument'")
        self.start_at = start_at
        self.output_dir = output_dir
        self.summary = summary
        self.export_timeout_s = float(export_timeout_s)
        self.handle_sigterm = handle_sigterm
        self.metric_attributes = dict(metric_attributes or {})
        self.prometheus_port = prometheus_port
        self.progress_interval_s = seconds_option(progress_interval_s, ENV_PROGRESS_INTERVAL_S,
                                                  DEFAULT_PROGRESS_INTERVAL_S)
        self.stall_after_s = seconds_option(stall_after_s, ENV_STALL_AFTER_S, DEFAULT_STALL_AFTER_S)


class _State:
    __slots__ = ("session", "setup", "options", "summary", "metrics", "metrics_later", "after_ready_job", "lock")

    def __init__(self, session, setup, options, summary, metrics, metrics_later: bool = False) -> None:
        self.session = session
        self.setup = setup
        self.options = options
        self.summary = summary
        self.metrics = metrics  # a metrics.MetricsSetup, or None if it could not be made
        # Metrics only we push, made by a thread of ours when first needed (_make_metrics_later).
        self.metrics_later = metrics_later
        self.after_ready_job = None  # the thread printing the summary and pushing metrics, joined at exit
        self.lock = threading.Lock()


def _start_inflight(session, setup, options: _Options, metrics_setup, prepare=None) -> None:
    """Progress records, in-flight gauges and the stall watchdog (inflight.py). Each record
    is followed by a flush of our own provider, so what a SIGKILL would take with it is
    already out: waited for in the file mode (a local file is quick), not over OTLP (the
    export runs on its own thread; a slow collector never holds the monitor). A provider
    the user configured keeps its own schedule."""
    from . import inflight

    flush = None
    if setup.owned:
        wait = setup.file_path is not None
        flush = lambda: export.flush(setup, options.export_timeout_s, wait=wait)  # noqa: E731
    labels = None
    if metrics_setup is not None:
        from .metrics import identifying_attributes

        labels = identifying_attributes(session.resource, options.metric_attributes)
    try:
        inflight.start_for(session, progress_interval_s=options.progress_interval_s,
                           stall_after_s=options.stall_after_s, flush=flush,
                           meter_provider=metrics_setup.provider if metrics_setup is not None else None,
                           labels=labels, prepare=prepare)
    except Exception:
        report_internal_error("inflight start")


def _metrics_wanted(meter_provider, prometheus_port) -> bool:
    """Whether metrics have anywhere to go. Without a provider passed, an exporter named in
    the environment or an SDK meter provider (which cannot exist unless its module was
    imported), they would go to the API's no-op provider: then otel_coldstart.metrics is
    not imported and nothing is recorded."""
    return (meter_provider is not None or prometheus_port is not None
            or bool(_otel_env.exporter_names("metrics"))
            or export.otlp_endpoint_configured("metrics")
            or "opentelemetry.sdk.metrics" in sys.modules)


def _metrics_can_wait(meter_provider, prometheus_port) -> bool:
    """Whether metrics go only to exporters we make and that push (OTLP, console): nobody
    reads them in this process, so they can be made later, on a thread of ours. A provider
    passed or set globally, or a Prometheus endpoint (scraped at any time), is made now."""
    return (meter_provider is None and prometheus_port is None
            and "opentelemetry.sdk.metrics" not in sys.modules
            and "prometheus" not in os.environ.get("OTEL_METRICS_EXPORTER", "").lower()
            and _metrics_wanted(None, None))


def _configure_metrics(meter_provider, prometheus_port):
    if not _metrics_wanted(meter_provider, prometheus_port):
        return None
    try:
        from .metrics import configure_metrics

        return configure_metrics(meter_provider, prometheus_port)
    except Exception:
        report_internal_error("metrics setup")
        return None


def _patch_module(module) -> None:
    session = _session.ACTIVE
    if session is None or (module.HOT_PATH and session.ended):
        return
    try:
        module.patch()
    except Exception:
        report_internal_error(f"patch {module.__name__}")


def _register_hooks() -> None:
    """Patch each library when it is imported, whether before or after instrument()."""
    global _hooks_registered
    if _hooks_registered:
        return
    _hooks_registered = True
    # Our resource's service.instance.id becomes the SDK's, should the host import it later.
    wrapt.register_post_import_hook(own_tracing.share_instance_id_with_sdk, "opentelemetry.sdk.resources")
    for module in patches.ALL:
        for target in module.TARGETS:
            wrapt.register_post_import_hook(lambda _imported, m=module: _patch_module(m), target)


def _forget_after_fork() -> None:
    """In a forked child: drop the parent's start-up without ending or exporting it.

    The child inherits the parent's session: its root span, open handles, captures and
    half-done aggregates; ending that copy (at the child's exit, or at the child's ready())
    would export spans with the parent's ids. All of it lives on the session, so dropping
    the session forgets it. The wrappers stay installed (they do nothing without a
    session) and a later instrument() in the child (vLLM's plugin hook, say) starts the
    child's own start-up, rooted at the fork. ending.py lets go of the SIGTERM watcher."""
    _session.ACTIVE = None
    CONTROLLER._state = None
    _session._local.__dict__.pop("ambient", None)  # the parent's open handles' parents
    from .patches import _guard

    _guard.reset_captures()  # a capture running in the parent is not running in the child


ending.forget_in_child(_forget_after_fork)
