"""The controller: the lifecycle of start-ups in this process and the import hooks.

It makes a :class:`~otel_coldstart.startup.Startup` at ``instrument()``, hands ``ready()``,
the exit, SIGTERM and ``uninstrument()`` to its one ending (``Startup.finish``), drops it at
``uninstrument()`` or a fork, and patches each library when it is imported. Everything a
start-up accumulates lives on the Startup (startup.py), not here.

``otel_coldstart.instrument()`` drives it directly; the OTel ``BaseInstrumentor`` that
``opentelemetry-instrument`` finds through the entry point (instrumentor.py) is a thin
adapter over it. Keeping ``BaseInstrumentor`` out of this module keeps
``opentelemetry.instrumentation`` (and ``packaging``, which it imports for dependency
checks: about 15 ms) off the start-up of every process that calls ``instrument()``.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

# The runtime loads on first use, not with the package face: it times its own import, which
# counts toward the plugin's own share of the import phase (_own_import_attributes).
_RUNTIME_IMPORT_STARTED_NS = time.perf_counter_ns()

import wrapt  # noqa: E402
from opentelemetry import context as otel_context, trace

from . import _host_warnings, _otel_env, ending, export, own_cost, own_tracing, patches, semconv, session as _session
from ._errors import internal_errors, report_internal_error
from .options import Options, env_flag
from .patches.imports import run_as_plugin  # the import hook is always loaded: its target always is
from .rank import rank_attributes
from .startup import Startup, configure_metrics, metrics_can_wait

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


class Controller:
    """One per process (``CONTROLLER``). See :func:`otel_coldstart.instrument` for options."""

    @property
    def startup(self) -> Startup | None:
        """The active start-up. Its one pointer is ``session.ACTIVE``, which the patches read on
        every intercepted call (a plain module global: the cheapest check there is)."""
        session = _session.ACTIVE
        return session.startup if session is not None else None

    @startup.setter
    def startup(self, startup: Startup | None) -> None:
        _session.ACTIVE = startup.session if startup is not None else None

    @property
    def active(self) -> bool:
        return _session.ACTIVE is not None

    @property
    def session(self) -> _session.StartupSession | None:
        return _session.ACTIVE

    @property
    def trace_file(self) -> str | None:
        startup = self.startup
        return startup.setup.file_path if startup is not None else None

    def start(self, **kwargs: Any) -> None:
        """Instrument (idempotent: does nothing while a start-up is being traced).

        A bad option is the caller's mistake and raises (an unknown name: TypeError naming
        the valid ones; a bad value: ValueError), even when already instrumented; anything
        else that goes wrong here (an output directory we cannot create, say) leaves the
        host running uninstrumented, with the error logged."""
        unknown = sorted(set(kwargs) - set(Options.__slots__) - _PROVIDER_OPTIONS)
        if unknown:  # a typo'd option would otherwise be silently ignored
            raise TypeError(f"instrument() got unknown option(s) {', '.join(map(repr, unknown))}; valid options: "
                            f"{', '.join(sorted(set(Options.__slots__) | _PROVIDER_OPTIONS))}")
        if self.startup is not None:
            return
        entered_ns = time.perf_counter_ns()
        options = Options(**{k: v for k, v in kwargs.items() if k in Options.__slots__})
        try:
            self._start(options, kwargs, entered_ns)
        except Exception:
            report_internal_error("instrument")
            self.startup = None

    def _start(self, options: Options, kwargs: dict, entered_ns: int) -> None:
        if _otel_env.sdk_disabled():
            return  # OTEL_SDK_DISABLED=true: the SDK records nothing, so neither do we (no patches)
        setup = export.configure_tracing(kwargs.get("tracer_provider"), options.output_dir)
        from .package import __version__

        tracer = setup.provider.get_tracer("otel_coldstart", __version__)
        resource = getattr(setup.provider, "resource", None)
        resource_attrs = dict(resource.attributes) if resource is not None else {}
        summary = options.summary
        if summary is None:
            summary = env_flag("OTEL_COLDSTART_SUMMARY", setup.file_path is not None)
        # Metrics only we push (OTLP, console): made on a thread of ours when first needed (the
        # in-flight monitor's first tick, or after ready()), never on the host's thread: the
        # metrics SDK and an OTLP exporter are ~80 ms of imports.
        metrics_later = metrics_can_wait(kwargs.get("meter_provider"), options.prometheus_port)
        metrics_setup = None if metrics_later else configure_metrics(kwargs.get("meter_provider"),
                                                                     options.prometheus_port)
        if metrics_later or (setup.exports and isinstance(getattr(setup.provider, "sink", None),
                                                         own_tracing.SdkExporters)):
            own_tracing.before_thread_pools_shut_down(_make_exporters_before_exit)
        if not setup.exports and not summary and metrics_setup is None and not metrics_later:
            return  # OTEL_TRACES_EXPORTER=none and nothing else would read the start-up: stay out
        own_import = _own_import_attributes(entered_ns)
        # The set-up's rest, after the import span's end, in this thread's CPU time: the export
        # worker and the in-flight monitor start in it and run while it waits for the
        # interpreter's lock, and their CPU is counted apart (own_cost.own_threads_cpu_ns).
        rest_began_ns = time.thread_time_ns()
        session = _session.StartupSession(
            tracer, resource=resource_attrs, start_at=options.start_at,
            parent_context=_launcher_context(), root_attributes=rank_attributes(),
            import_attributes=own_import,
        )
        startup = Startup(session, setup, options, summary, metrics_setup, metrics_later)
        startup.start_inflight(metrics_setup)
        # The set-up counts toward the plugin's own cost only where the start-up counts from the
        # process's start (start_at="instrument" begins after it): put on the root at its end.
        startup.own_setup_s = own_import[semconv.IMPORT_OWN_S] if options.start_at == "process" else None
        self.startup = startup
        _host_warnings.install()  # warnings raised inside our wrappers keep the host's line
        if not _register_hooks():
            # The hooks of an earlier start-up in this process only fire for libraries imported
            # since: patch what is imported already. (A first registration has just done it:
            # wrapt calls a hook at once for a module already imported, in TARGETS order.)
            for name, targets in patches.TARGETS.items():
                if any(target in sys.modules for target in targets):
                    _patch_named(name)
        ending.register_exit(self.end)
        if options.handle_sigterm:
            ending.SIGTERM.install(lambda: self.end(semconv.END_SIGTERM), options.export_timeout_s)
        with internal_errors("own cost of instrument()"):
            # The rest of instrument() (the session, the in-flight monitor, the import hooks and
            # the patching of libraries imported already, the SIGTERM watcher) runs after the
            # import span ended, between spans: the plugin's own cost there (own_cost.py), not
            # the host's unattributed time.
            own_cost.of(session).add(semconv.UNATTRIBUTED, time.thread_time_ns() - rest_began_ns)

    def stop(self) -> None:
        """Uninstrument: end the start-up if open and drain it, remove every patch, give the
        host back its SIGTERM disposition, drop the start-up."""
        startup = self.startup
        if startup is not None:
            startup.finish(semconv.END_UNINSTRUMENTED)  # gives the host back its SIGTERM disposition too
        for module in patches.loaded():  # one never imported never patched anything
            with internal_errors(f"unpatch {module.__name__}"):
                module.unpatch()
        with internal_errors("warnings"):
            _host_warnings.uninstall()
        self.startup = None

    def ready(self) -> None:
        self.end(semconv.END_READY)  # serving begins: the host's SIGTERM disposition is its own again

    def end(self, reason: str = semconv.END_EXIT, exception_type: str | None = None) -> None:
        """``ready()``, the exit or SIGTERM (from ending.py, never inside a signal handler):
        the active start-up's one ending (``Startup.finish``), if there is one."""
        startup = self.startup
        if startup is not None:
            startup.finish(reason, exception_type)


def _make_exporters_before_exit() -> None:
    """At the exit, before thread pools shut down (own_tracing.before_thread_pools_shut_down)."""
    startup = CONTROLLER.startup
    if startup is not None:
        startup.make_exporters_before_exit()


CONTROLLER = Controller()
_import_counted = False


def _own_import_attributes(instrument_entered_ns: int) -> dict[str, float]:
    """otel-coldstart's own share of the ``import`` phase: importing the package face (timed by
    otel_coldstart/__init__.py itself), the runtime (timed here: loaded on first use, the
    dependencies it pulled in included) and instrument()'s set-up so far. Counted once per process: a later start-up did not import us again."""
    global _import_counted
    own_ns = time.perf_counter_ns() - instrument_entered_ns
    if not _import_counted:
        _import_counted = True
        package = sys.modules.get("otel_coldstart")
        started, ended = getattr(package, "_IMPORT_STARTED_NS", None), getattr(package, "_IMPORT_ENDED_NS", None)
        if isinstance(started, int) and isinstance(ended, int) and ended >= started:
            own_ns += ended - started
        own_ns += _RUNTIME_IMPORT_NS
    return {semconv.IMPORT_OWN_S: own_ns / 1e9}


_PROVIDER_OPTIONS = frozenset({"tracer_provider", "meter_provider"})


def _patch_module(module) -> None:
    session = _session.ACTIVE
    if session is None or (module.HOT_PATH and session.ended):
        return
    with internal_errors(f"patch {module.__name__}"):
        module.patch()


def _patch_named(name: str) -> None:
    """Patch ``patches.<name>``, importing it first: its library has just been imported (or was
    by instrument()). The plugin's work, not the host's import: see imports.run_as_plugin."""
    if _session.ACTIVE is None:
        return  # nothing to record for: a later instrument() patches what is imported by then
    with internal_errors(f"load patches.{name}"):
        run_as_plugin(lambda: _patch_module(patches.load(name)))


def _register_hooks() -> bool:
    """Patch each library when it is imported, whether before or after instrument(). True
    when the hooks were registered now, which patched every library imported already (a
    second pass over them cost 0.15-0.2 ms of instrument() with torch imported)."""
    global _hooks_registered
    if _hooks_registered:
        return False
    _hooks_registered = True
    # Our resource's service.instance.id becomes the SDK's, should the host import it later.
    wrapt.register_post_import_hook(own_tracing.share_instance_id_with_sdk, "opentelemetry.sdk.resources")
    for name, targets in patches.TARGETS.items():
        for target in targets:
            wrapt.register_post_import_hook(lambda _imported, n=name: _patch_named(n), target)
    return True


def _forget_after_fork() -> None:
    """In a forked child: drop the parent's start-up without ending or exporting it.

    The child inherits the parent's Startup: its root span, open handles, captures,
    half-done aggregates, ambient parents, storage ledger and device facts; ending that copy
    (at the child's exit, or at the child's ready()) would export spans with the parent's
    ids. All of it lives on the Startup, so dropping it forgets it. The wrappers stay
    installed (they do nothing without a session) and a later instrument() in the child
    (vLLM's plugin hook, say) starts the child's own start-up, rooted at the fork. Per
    process, each by its own at-fork hook: ending.py lets go of the SIGTERM watcher,
    patches/_guard.py of the parent's running captures."""
    CONTROLLER.startup = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


_RUNTIME_IMPORT_NS = time.perf_counter_ns() - _RUNTIME_IMPORT_STARTED_NS
