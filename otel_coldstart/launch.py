"""For launchers: one parent span for a multi-process start, handed to every process.

A tensor-parallel model server is several processes (one per rank), each with its own
``model.startup`` root. Started from one launcher span, they share one trace::

    from otel_coldstart import launch

    with launch.Launch("serve llama-70b tp=8") as started:
        workers = [subprocess.Popen(cmd, env=started.env(rank=r, world_size=8, local_rank=r))
                   for r in range(8)]
        for worker in workers:
            worker.wait()

Each child gets ``TRACEPARENT`` (and ``TRACESTATE``), OTel's environment carrier, which
``instrument()`` in the child reads; ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` where given.
For launchers that are not Python, :func:`child_env` alone is enough when you have a
context, and a shell script can set ``TRACEPARENT`` itself.

The launcher's span goes where the plugin's spans go (see :mod:`otel_coldstart.export`):
a tracer provider you pass or configured globally, else OTLP when an endpoint is set, else an
OTLP JSON file under ``./otel-coldstart-traces/``. It carries no ``coldstart.phase``: the
analyzer shows it as the context that encloses the start-ups, not as a phase of one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

from opentelemetry import context as otel_context, trace
from opentelemetry.trace import Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from . import export, semconv
from ._errors import internal_errors
from .controller import _launcher_context

# The lowercase spellings vLLM writes: a child given our parent must not prefer a stale one.
_CARRIER_VARS = ("TRACEPARENT", "TRACESTATE", "traceparent", "tracestate")


def child_env(context=None, base: Mapping[str, str] | None = None, *, rank: int | None = None,
              world_size: int | None = None, local_rank: int | None = None) -> dict[str, str]:
    """A copy of ``base`` (default ``os.environ``) whose ``TRACEPARENT`` is the span current
    in ``context`` (default: the current one), plus the rank variables that were given."""
    env = dict(os.environ if base is None else base)
    for name in _CARRIER_VARS:
        env.pop(name, None)
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, context=context)
    if carrier.get("traceparent"):
        env["TRACEPARENT"] = carrier["traceparent"]
    if carrier.get("tracestate"):
        env["TRACESTATE"] = carrier["tracestate"]
    for name, value in (("RANK", rank), ("WORLD_SIZE", world_size), ("LOCAL_RANK", local_rank)):
        if value is not None:
            env[name] = str(int(value))
    return env


class Launch:
    """A context manager: the launcher's span, current while the block runs.

    ``name`` names the span (default ``coldstart.launch``); ``attributes`` are set on it.
    The span is itself a child of a ``TRACEPARENT`` this process was given (a deploy
    pipeline's, say), or of the current span. ``tracer_provider`` and ``output_dir`` are as
    for :func:`otel_coldstart.instrument`; ``export_timeout_s`` bounds the flush at the end.
    """

    def __init__(self, name: str = semconv.SPAN_LAUNCH, *, tracer_provider: trace.TracerProvider | None = None,
                 attributes: Mapping[str, Any] | None = None, output_dir: str | None = None,
                 export_timeout_s: float = 5.0) -> None:
        self.name = name
        self.attributes = dict(attributes or {})
        self.export_timeout_s = float(export_timeout_s)
        self._tracer_provider = tracer_provider
        self._output_dir = output_dir
        self._setup: export.ExportSetup | None = None
        self._span: Any = None  # the launch span, while it runs
        self._token: Any = None

    @property
    def trace_file(self) -> str | None:
        """The OTLP JSON file the launcher's span is written to, if that is where it goes."""
        return self._setup.file_path if self._setup else None

    @property
    def context(self):
        """The context whose current span is the launcher's (for :func:`child_env`)."""
        if self._span is None:
            raise RuntimeError("the launch span has not started: use `with Launch(...) as started:`")
        return trace.set_span_in_context(self._span)

    @property
    def traceparent(self) -> str:
        """The W3C ``traceparent`` value children receive."""
        return self.env(base={})["TRACEPARENT"]

    def env(self, base: Mapping[str, str] | None = None, *, rank: int | None = None,
            world_size: int | None = None, local_rank: int | None = None) -> dict[str, str]:
        """The environment for one child process: ``base`` (default ``os.environ``) plus the
        launcher's ``TRACEPARENT`` and the given rank variables."""
        return child_env(self.context, base, rank=rank, world_size=world_size, local_rank=local_rank)

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        """Add attributes to the launcher's span before it ends (what the children did)."""
        if self._span is not None:
            self._span.set_attributes(dict(attributes))

    def __enter__(self) -> Launch:
        from .package import __version__

        self._setup = export.configure_tracing(self._tracer_provider, self._output_dir)
        tracer = self._setup.provider.get_tracer("otel_coldstart.launch", __version__)
        self._span = tracer.start_span(self.name, context=_launcher_context(), attributes=self.attributes)
        self._token = otel_context.attach(trace.set_span_in_context(self._span))
        return self

    def __exit__(self, exc_type, exc, tb) -> Literal[False]:
        token, self._token = self._token, None
        if token is not None:
            otel_context.detach(token)
        with internal_errors("launch span end"):
            if exc is not None:
                self._span.record_exception(exc)
                self._span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            self._span.end()
            # Bounded: an unreachable collector must not hold the launcher's exit.
            if self._setup is not None:
                export.finish(self._setup, self.export_timeout_s)
        return False
