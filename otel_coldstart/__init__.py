"""otel-coldstart: OpenTelemetry traces and metrics for model start-up.

Model servers spend minutes starting: reading checkpoints, deserialising them, copying to
the GPU, casting, capturing CUDA graphs. otel-coldstart shows where that time goes.

Use
---
::

    import otel_coldstart
    otel_coldstart.instrument()          # first thing in the process, before loading

    with otel_coldstart.phase("build_model"):   # name your own steps
        model = build_model()
    model.load_state_dict(safetensors.torch.load_file("model.safetensors"))
    model.to(torch.float16)

    otel_coldstart.ready()               # the model can serve: the start-up ends here

    @otel_coldstart.first_request()      # the first request served: time to first token
    def generate(prompt): ...

Or with no code change: ``opentelemetry-instrument python serve.py`` (the plugin is found
through the ``opentelemetry_instrumentor`` entry point), then call ``ready()``
where serving begins, or let the process end the start-up at exit.

What you get
------------
- A root span ``model.startup`` from the process start (read from the OS, not from
  ``instrument()``) to ``ready()``. If the process exits, raises or gets SIGTERM first,
  the root ends there with ``coldstart.ready=false``, the reason and the phase that was
  running, every span still open ends there marked ``coldstart.interrupted``, and all of
  it is exported (within ``export_timeout_s``). The process still exits as it would have:
  SIGTERM as promptly (-15), Ctrl-C with 130.
- A ``coldstart.import`` span from process start to ``instrument()``.
- One ``coldstart.deserialize`` span per checkpoint file read (``torch.load``,
  ``safetensors.torch.load_file``/``load``, and ``safe_open`` handles as transformers,
  accelerate and vLLM use them), with the file's path, size, format, shard index, the
  bytes of the file that came from storage during the start-up (whichever thread read
  them, casts of mapped tensors after the read included; the span of such a file is
  written when the start-up ends) and the page-cache state that follows
  (``cold``/``warm``/``partial``). Where no honest figure exists (network filesystems,
  no residency probe) the span says why instead of 0. While instrumented, the name
  ``safe_open`` (in ``safetensors`` and every module that imported it) is a wrapper of the
  class: ``isinstance`` and ``with`` work as before, ``type(h) is safe_open`` does not.
- Tensor casts and copies (``Tensor.to/.cuda/.half/.float/.bfloat16/.copy_``,
  ``Module.to/.cuda/.half/...``) summed into a few ``coldstart.<phase>`` leaf spans with
  call counts, bytes and busy time: span count grows with shards and phases, never with
  tensors. These per-tensor patches are removed at ``ready()``: steady-state serving runs
  the original functions.
- Device work: host-to-device copies with the bytes that cross the bus, pinned vs pageable
  (as PyTorch's Copy.cu moves them) and achieved bandwidth (asynchronous GPU work -
  non-blocking copies, GPU casts, device-to-device copies - timed from CUDA events that are
  queried, never waited for), ``pin_memory`` and pinned allocations, the first CUDA runtime
  initialisation (driver start and ``_lazy_init``), torch.compile compilations,
  and one ``coldstart.graph_capture`` span per CUDA graph capture (aggregated with count and
  batch sizes when captures repeat; name sizes with ``graph_batch_size(n)``). Captures
  after ``ready()`` are recorded too, marked ``coldstart.after_ready``.
- Spans nest under whatever span is current (yours, vLLM's), thread-pool work nests under
  the span that submitted it, and a ``TRACEPARENT`` (or vLLM's ``traceparent``)
  environment variable makes the root a child of a launcher's span, so every rank of a
  tensor-parallel start shares one trace (``otel_coldstart.launch.Launch`` starts that span).
- Metrics, recorded once when the start-up ends (units, labels and Prometheus names in
  ``docs/metrics.md``): ``model.startup.duration``, ``model.startup.phase.duration``,
  ``model.startup.shard.duration``, ``model.startup.bytes``, ``model.startup.copy.bytes``,
  ``model.startup.copy.throughput``, ``model.startup.graph.captures``,
  ``model.startup.graph.capture.time``, ``model.startup.lazy.unread``,
  ``model.startup.first_use.bytes`` (below), ``model.startup.download.bytes``,
  ``model.startup.download.duration`` and ``model.startup.download.metadata.requests``
  (what the start-up fetched from the hub or S3); and, while the start-up runs, the gauges
  ``model.startup.inflight.elapsed``, ``model.startup.inflight.phase.elapsed`` (time in the
  running phase), ``model.startup.inflight.loaded`` and ``model.startup.inflight.expected``
  (bytes loaded of expected), and ``model.startup.inflight.remaining`` (the seconds left to
  ``ready()``, estimated from earlier start-ups of the service: absent for its first) with
  ``model.startup.inflight.overrun`` (seconds past them where a step runs longer than before).
- Weights still on storage at ``ready()``: a checkpoint file still mapped (safetensors,
  transformers 5 and ``torch.load(mmap=True)`` keep tensors on the file's pages) with pages
  never read carries ``coldstart.lazy.unread_bytes``, the summary says "27.1 MiB of
  model.safetensors not read yet" and the ``lazy_weights`` finding estimates what the first
  requests pay for it. After ``ready()`` the background thread follows those files (one
  page-cache sample per file per tick, no patch) until they are in the page cache or 5
  minutes pass (``OTEL_COLDSTART_FIRST_USE_S``; 0 turns it off), writing
  ``coldstart.first_use`` records: what the first requests read from storage, and when.
- The first request after ``ready()`` (``first_request()``; vLLM's plugin marks it itself): a
  ``coldstart.first_request`` span under the root, after it, and the metric
  ``model.startup.time_to_first_token`` (process start to that request's end). Later calls
  cost one global read; the request's exception propagates unchanged.
- A start-up that never ends still tells where it was: one background thread writes a
  small progress record every few seconds (``otel-coldstart analyze`` reads a SIGKILL'd
  start-up as "killed (no end) during <phase>"), and records the stacks of all threads
  when nothing progresses for ``stall_after_s``.

Where it goes: a tracer provider you pass or configured globally is used as it is.
``OTEL_SDK_DISABLED=true`` turns the plugin off. ``OTEL_TRACES_EXPORTER`` /
``OTEL_METRICS_EXPORTER``, when set, are read as the OpenTelemetry SDK reads them (``none``,
``console``, ``otlp`` - grpc unless ``OTEL_EXPORTER_OTLP_PROTOCOL`` says ``http/protobuf`` -,
or a comma-separated list) and no local file is written. Otherwise (the embedded default)
spans go over OTLP to ``OTEL_EXPORTER_OTLP_ENDPOINT`` when that is set, else to an OTLP
JSON file under ``./otel-coldstart-traces/`` and a one-screen breakdown is printed when the
start-up ends. ``otel-coldstart analyze FILE`` prints it again.

Every name is listed in ``docs/conventions.md``. Our hooks never raise into your code, never
change what it loads, and never hide its exceptions.
"""

from __future__ import annotations

import time as _time

# The plugin's own import cost, reported on the coldstart.import span (coldstart.import.own_s)
# so that the analyzer never advises "import less" about it. Started before anything else.
# This face is lazy: the runtime (controller, patches, wrapt, the OpenTelemetry API) loads
# at the first instrument(), and times its own import (controller._RUNTIME_IMPORT_NS), which
# is added to this face's: the own share stays the whole of what importing otel-coldstart
# cost, whichever way the runtime came in (instrument(), the OTel instrumentor, vLLM's
# plugin). The analyzer and the CLI import this face and never the runtime
# (tests/analyze/test_import_graph.py).
_IMPORT_STARTED_NS = _time.perf_counter_ns()

import contextlib  # noqa: E402
import functools  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
from typing import TYPE_CHECKING, Any, Literal  # noqa: E402

from .package import __version__  # noqa: E402

if TYPE_CHECKING:  # pragma: no cover
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

    from .instrumentor import ColdstartInstrumentor

__all__ = ["ColdstartInstrumentor", "instrument", "uninstrument", "ready", "phase", "first_request", "trace_file",
           "graph_batch_size", "__version__"]

_CONTROLLER_MODULE = __name__ + ".controller"
_SESSION_MODULE = __name__ + ".session"


def __getattr__(name: str):
    # ColdstartInstrumentor imports opentelemetry.instrumentation (~15 ms with packaging):
    # only for those who ask for it (opentelemetry-instrument, or by name).
    if name == "ColdstartInstrumentor":
        from .instrumentor import ColdstartInstrumentor

        return ColdstartInstrumentor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | {"ColdstartInstrumentor"})


def _controller():
    """The runtime's controller, loaded on first use."""
    from .controller import CONTROLLER

    return CONTROLLER


def _internal_errors(where: str):
    """The internal-error guard (``_errors.internal_errors``), loaded when first needed: only
    where a start-up exists, so the runtime is loaded already (this face stays light)."""
    from ._errors import internal_errors

    return internal_errors(where)


def _loaded_controller():
    """The controller if the runtime was ever loaded, else None: nothing to end or report."""
    module = sys.modules.get(_CONTROLLER_MODULE)
    return None if module is None else module.CONTROLLER


def instrument(tracer_provider: TracerProvider | None = None,
               meter_provider: MeterProvider | None = None, **options: Any) -> None:
    """Start tracing the start-up. Idempotent: a second call does nothing.

    Options:
      start_at: ``"process"`` (default: the root span starts when the OS started the
        process) or ``"instrument"`` (now; for notebooks and tests).
      output_dir: where the OTLP JSON file goes when no exporter is configured
        (default ``./otel-coldstart-traces``, or ``OTEL_COLDSTART_OUTPUT_DIR``).
      summary: print the breakdown when the start-up ends (default: when writing the local
        file; ``OTEL_COLDSTART_SUMMARY=0/1`` overrides).
      export_timeout_s: the most the exit flush may wait for an exporter (default 5).
      handle_sigterm: end and export the start-up on SIGTERM when the process has no
        SIGTERM handler of its own (default True). Done by a watcher thread, never in the
        signal handler; ``ready()`` and ``uninstrument()`` give the host back exactly its
        SIGTERM disposition and wakeup fd; a handler the host installs later wins.
      metric_attributes: attributes for every metric series (e.g. model, deploy); only
        bounded ones are kept (docs/metrics.md).
      prometheus_port: serve the start-up metrics for Prometheus on this port (also
        ``OTEL_METRICS_EXPORTER=prometheus``); needs ``otel-coldstart[prometheus]``.
      progress_interval_s: write a progress record (a ``coldstart.progress`` span: open
        spans, running phase, bytes loaded) this often while the start-up runs, so that a
        start-up killed with SIGKILL can still be analysed (default 5; stretches to 2% of
        the elapsed time; 0 turns it off; ``OTEL_COLDSTART_PROGRESS_INTERVAL_S``).
      stall_after_s: when nothing progresses for this long, record the Python stacks of all
        threads once per stall as a ``coldstart.stall`` event on the open span and log one
        line (default 120; 0 turns it off; ``OTEL_COLDSTART_STALL_AFTER_S``).
      history_dir: where earlier start-ups of this service are, for the live estimate of the
        seconds left to ``ready()`` (the ``model.startup.inflight.remaining`` gauge and the
        progress records): a trace directory, several joined by ``os.pathsep``, or a list
        (``OTEL_COLDSTART_HISTORY_DIR``; default: the directory this process writes its own
        trace files to; ``False`` or ``off`` turns the estimate off). Read once, bounded, on
        the in-flight monitor thread.

    An unknown option raises TypeError (naming the valid ones); a bad value raises
    ValueError. Any other failure here is logged and leaves the host running uninstrumented.
    """
    _controller().start(tracer_provider=tracer_provider, meter_provider=meter_provider, **options)


def uninstrument() -> None:
    """Remove every patch (restoring the original objects) and end the start-up if open."""
    controller = _loaded_controller()
    if controller is not None:
        controller.stop()


def ready() -> None:
    """The model can serve: end the start-up, remove the per-tensor patches, flush."""
    controller = _loaded_controller()
    if controller is not None:
        controller.ready()


def trace_file() -> str | None:
    """The OTLP JSON file this process writes its trace to, if that is where spans go."""
    controller = _loaded_controller()
    return None if controller is None else controller.trace_file


def graph_batch_size(size: int):
    """Name the batch size of the CUDA graph captures made inside the block, for code whose
    graph API cannot tell it (``torch.cuda.graph`` in a loop over sizes)::

        for n in sizes:
            with otel_coldstart.graph_batch_size(n), torch.cuda.graph(g[n]):
                out[n] = model(inputs[:n])
    """
    from .patches.cuda_graphs import batch_size

    return batch_size(size)


class phase(contextlib.ContextDecorator):
    """Name a step of your start-up: ``with phase("build_model"):`` or ``@phase("download")``.

    The span is ``coldstart.<name>`` with ``coldstart.phase=<name>``; work inside it
    (loads, casts) nests under it, and the analyzer counts its own time under that name
    instead of "unattributed". A no-op when not instrumented.

    As a decorator it works on plain functions and on ``async def`` coroutine functions (the
    result stays a coroutine function, and the phase lasts until the coroutine returns).
    Generator functions are refused with a TypeError: a phase that stayed current while the
    generator is suspended would leak into its consumer's context; use ``with phase(...)``
    inside the generator instead.

    The names of the phases the plugin records itself (``import``, ``deserialize``, ``cast``,
    ``compile``, ... and ``unattributed``: ``semconv.RESERVED_PHASE_NAMES``) are refused with
    a ValueError when the phase is made; ``download`` and ``warmup`` are built-in phases for
    you to name.
    """

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ValueError("phase name must be a non-empty string")
        from .semconv import RESERVED_PHASE_NAMES

        if name.strip() in RESERVED_PHASE_NAMES:
            # Refused where it is written, instrumented or not (so it is found in development,
            # not first in production): a user phase named like one the plugin records mixed
            # with it in every report.
            raise ValueError(f"phase name {name.strip()!r} is reserved for the phases otel-coldstart records "
                             f"itself ({', '.join(RESERVED_PHASE_NAMES)}); name your step otherwise, e.g. "
                             f"{name.strip() + '_step'!r}")
        self.name = name.strip()
        self._local = threading.local()

    def __call__(self, func):
        import inspect  # 4 ms of imports: only for phase() used as a decorator

        if inspect.isgeneratorfunction(func) or inspect.isasyncgenfunction(func):
            raise TypeError(f"phase({self.name!r}) cannot decorate the generator function "
                            f"{getattr(func, '__qualname__', func)!r}: use `with phase(...)` inside it")
        if inspect.iscoroutinefunction(func):
            name = self.name

            @functools.wraps(func)
            async def phase_coroutine(*args, **kwargs):
                # A fresh phase per call: coroutines of one function interleave on one
                # thread, and each must close its own span.
                with phase(name):
                    return await func(*args, **kwargs)

            return phase_coroutine
        return super().__call__(func)

    def __enter__(self) -> phase:
        # No session module loaded: never instrumented, so no start-up to record into.
        module = sys.modules.get(_SESSION_MODULE)
        session = None if module is None else module.ACTIVE
        container = None
        if session is not None:
            with _internal_errors("phase start"):
                container = session.start_container(self.name)
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        stack.append(container)
        return self

    def __exit__(self, exc_type, exc, tb) -> Literal[False]:
        stack = getattr(self._local, "stack", None)
        container = stack.pop() if stack else None
        if container is not None:
            with _internal_errors("phase end"):
                container.finish(error=exc)
        return False



# True once a first request was claimed in this process: every later first_request() is
# this one global's read (steady-state serving pays nothing else; benchmarks/RESULTS.md).
_first_request_seen = False
_inert_first_request: first_request | None = None  # made below: what first_request() returns once one was seen


class first_request(contextlib.ContextDecorator):
    """Mark the first request served: ``with first_request():`` around the request's work, or
    ``@first_request()`` on the handler (plain or ``async def``).

    The first call in the process records a ``coldstart.first_request`` span (under the
    start-up's root, after ``ready()``) and the metric ``model.startup.time_to_first_token``:
    process start to the end of that request. Every later call does nothing but call your
    function (one module global read). The request's exception propagates unchanged; the
    span records it (status error, ``error.type``) and no metric is recorded for it.
    Called before ``ready()``, it ends the start-up first, as ``ready()`` would (a request
    served means the model serves). Concurrent first requests: the first to begin is the one
    recorded. A no-op when not instrumented. Generator functions are refused, as by ``phase``.
    """

    def __new__(cls):
        # After the first request every call gets the one inert instance: no object is made.
        if _first_request_seen and _inert_first_request is not None:
            return _inert_first_request
        return super().__new__(cls)

    def __init__(self) -> None:
        if self is not _inert_first_request:
            self._request: Any = None  # first_token's record of the request, while it runs
            self._thread = 0

    def __call__(self, func):
        import inspect

        if inspect.isgeneratorfunction(func) or inspect.isasyncgenfunction(func):
            raise TypeError(f"first_request() cannot decorate the generator function "
                            f"{getattr(func, '__qualname__', func)!r}: use `with first_request():` inside it")
        if inspect.iscoroutinefunction(func):
            @functools.wraps(func)
            async def first_request_coroutine(*args, **kwargs):
                if _first_request_seen:
                    return await func(*args, **kwargs)
                with first_request():
                    return await func(*args, **kwargs)

            return first_request_coroutine

        @functools.wraps(func)
        def first_request_call(*args, **kwargs):
            if _first_request_seen:
                return func(*args, **kwargs)
            with first_request():
                return func(*args, **kwargs)

        return first_request_call

    def __enter__(self) -> first_request:
        global _first_request_seen
        if _first_request_seen:
            return self
        module = sys.modules.get(_SESSION_MODULE)
        session = None if module is None else module.ACTIVE
        if session is None:
            return self  # not instrumented (yet): nothing to record into, and nothing claimed
        _first_request_seen = True
        request = None
        with _internal_errors("first request start"):
            from .first_token import begin

            request = begin(session)
        if request is not None:
            self._request, self._thread = request, threading.get_ident()
        return self

    def __exit__(self, exc_type, exc, tb) -> Literal[False]:
        request = self._request
        if request is not None and self._thread == threading.get_ident():
            self._request = None
            with _internal_errors("first request end"):
                request.end(exc)
        return False


_inert_first_request = first_request()  # _first_request_seen is False here: a plain instance


_IMPORT_ENDED_NS = _time.perf_counter_ns()
