"""vLLM general plugin: instrument every vLLM process (API server, engine core, workers).

vLLM calls the functions registered under the ``vllm.general_plugins`` entry point group in
every process it creates, before that process does any work (``load_general_plugins``; in
a worker it runs inside vLLM's "Worker init" span). :func:`register` is ours:

- It calls ``otel_coldstart.instrument()``. The root ``model.startup`` of a worker is a
  child of the lowercase ``traceparent`` vLLM puts in the environment while its start-up
  spans run; our shard, cast and copy spans nest under vLLM's current span ("Load
  weights", "Capture model", ...).
- It arms ``otel_coldstart/patches/vllm.py``, which ends each process's start-up where
  vLLM's does: a worker's when its ``compile_or_warm_up_model`` returns, the engine core's
  when ``EngineCore.__init__`` returns, the front end's when ``LLMEngine``/``AsyncLLM`` is
  constructed. So the per-tensor patches are gone before the first request, as with
  ``ready()``. (The patching itself lives there, with the surface of every patch module;
  this module only decides whether to act and how to export.)

When: vLLM loads every installed general plugin unless ``VLLM_PLUGINS`` names a list, so
installing otel-coldstart must not by itself change a vLLM deployment. The plugin acts
when vLLM's own start-up tracing is on (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set;
vLLM puts it in the environment its processes inherit) or ``OTEL_COLDSTART_VLLM=1``;
``OTEL_COLDSTART_VLLM=0`` or ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=coldstart`` turn it off.

Forked processes: vLLM forks its engine core and workers by default. The instrumentor makes
a forked child forget the start-up it inherited (see ``otel_coldstart/ending.py``),
and ``register()`` (which vLLM calls in the child) starts the child's own, rooted at the
child's start (the fork).

Export: a tracer provider vLLM (or anyone) set globally is used. Otherwise, when vLLM's
endpoint is set without ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``, spans go over OTLP/gRPC as
vLLM's do (vLLM's default; the OTel spec's is http/protobuf), so both land in one collector.
"""

from __future__ import annotations

import os

from ._errors import internal_errors
from .patches import vllm as vllm_patch

READY_POINTS = vllm_patch.READY_POINTS  # kept for callers of the old location


def enabled() -> bool:
    """Whether the plugin instruments this vLLM process (see the module docstring)."""
    disabled = os.environ.get("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "")
    if any(name.strip() in ("coldstart", "*") for name in disabled.split(",")):
        return False
    choice = os.environ.get("OTEL_COLDSTART_VLLM", "").strip().lower()
    if choice:
        return choice not in ("0", "false", "no", "off")
    return bool(os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def register() -> None:
    """The ``vllm.general_plugins`` entry point. Never raises into vLLM."""
    with internal_errors("vllm plugin"):
        if not enabled():
            return
        from .controller import CONTROLLER, _patch_module  # the runtime, never the package face

        vllm_patch.arm()
        CONTROLLER.start(tracer_provider=_provider_like_vllms())
        # start() patched the armed module if it made the start-up; if the host had
        # instrumented already, patch it now (idempotent).
        _patch_module(vllm_patch)


def _provider_like_vllms():
    """None (the plugin's usual choice) unless vLLM's gRPC default must be matched."""
    from opentelemetry import trace

    if not isinstance(trace.get_tracer_provider(), (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        return None
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    if not endpoint or protocol:
        return None
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from .export import default_resource, sdk_resource

    provider = TracerProvider(resource=sdk_resource(default_resource()))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, insecure=True)))
    return provider
