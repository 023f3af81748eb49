"""A vLLM start-up trace shaped as vLLM's own tracing writes it, with otel-coldstart's spans
from its vLLM plugin in every process, as OTLP JSON Lines (what a collector's file exporter
keeps). Built here, never fetched.

The shape, from vLLM's source (vllm-project/vllm):
- vllm/tracing/otel.py @ 40eeb0c5e942e511bf73359f99265d72470c2f59: ``instrument_otel`` makes
  each ``@instrument(span_name=...)`` a span with ``code.function``, ``code.namespace``,
  ``code.filepath`` and ``code.lineno`` (a string) attributes, from the tracer named after the
  function's module; its parent is the current span, else (``_get_smart_context``) the
  ``traceparent``/``TRACEPARENT`` in the environment, which ``propagate_trace_to_env`` sets
  while a span runs, so a process spawned then (engine core, workers) inherits that span as
  the parent of its own top spans. ``init_tracer`` puts ``vllm.instrumenting_module_name`` and
  ``vllm.process_id`` (a string) in the resource; ``init_otel_worker`` adds
  ``vllm.process_kind`` and ``vllm.process_name``.
- vllm/tracing/utils.py @ 0bf3270fe12361d1f31f8955f17e5bc5dde6780e: ``LoadingSpanAttributes``,
  the ``code.*`` names.
- vllm/v1/engine/core.py @ 00080ee13c7a451fce071ccb8d0e94d395acf5a7: "Prepare model"
  (``EngineCore._initialize_kv_caches``: memory profiling, KV cache, then the workers'
  ``compile_or_warm_up_model`` over RPC); the engine core's tracer is
  ``maybe_init_worker_tracer("vllm.engine_core", "engine_core", "EngineCore")`` and its top
  span "EngineCoreProc init".
- PR #31162 ("OTEL tracing during loading"): "Overall Loading" (``make_async_mp_client``, the
  front end waiting for the engine), "Executor init" (``Executor.__init__``, which spawns the
  workers), "Worker init" (the worker's construction, with "Init device" and "Load model"
  inside; "Load weights" inside that), worker tracers ``("vllm.worker", "worker", ...)``;
  "API server setup" (``setup_server``).
- The front end's ``init_tracer("vllm.llm_engine", ...)`` (``AsyncLLM.__init__``).

otel-coldstart's part (otel_coldstart/vllm_plugin.py): each process's ``model.startup`` is a
child of the ``traceparent`` in its environment when the plugin loads (in a worker, inside
"Worker init"), from the process's start to where vLLM's start-up of that process ends; our
shard, cast and copy spans hang under vLLM's current span ("Load weights"), a compilation
during an RPC (no vLLM span current) under our root, captures under "Capture model".
With ``otel-coldstart run``, a ``coldstart.launch`` span is the trace's root and reaches the
front end through ``TRACEPARENT`` (``launched=True``); without it the front end's root is in a
trace of its own.
"""

from __future__ import annotations

import json
import os

from analyze_records import otlp_attr

MS = 1_000_000
T0 = 1_760_000_000_000_000_000
TRACE = "5e" * 16
FRONT_TRACE = "f0" * 16  # the front end's own trace when nothing joins it to vLLM's
SETUP_TRACE = "a5" * 16  # vLLM's "API server setup" in that case: a trace of its own too

_ids = iter(range(1, 10_000))


def _id() -> str:
    return f"{next(_ids):016x}"


def _attributes(attrs: dict) -> list:
    return [otlp_attr(k, v) for k, v in attrs.items()]


class Process:
    """One process's spans: vLLM's (its own tracer provider and resource) and ours."""

    def __init__(self, pid: int, vllm_resource: dict, thread: int) -> None:
        self.pid = pid
        self.vllm_resource = {"service.name": "vllm.server", "telemetry.sdk.language": "python",
                              "vllm.process_id": str(pid), **vllm_resource}
        self.our_resource = {"service.name": "vllm.server", "process.pid": pid,
                             "service.instance.id": f"instance-{pid}"}
        self.thread = thread
        self.vllm_spans: list[tuple[str, dict]] = []  # (scope, span)
        self.our_spans: list[dict] = []

    def vllm(self, name: str, module: str, function: str, parent: str | None, start_ms: float, end_ms: float,
             trace: str = TRACE) -> str:
        span_id = _id()
        attrs = {"code.function": function, "code.namespace": module,
                 "code.filepath": "/usr/lib/python3.12/site-packages/" + module.replace(".", "/") + ".py",
                 "code.lineno": "123"}
        self.vllm_spans.append((module, _span(trace, span_id, parent, name, start_ms, end_ms, attrs)))
        return span_id

    def ours(self, name: str, phase: str | None, parent: str | None, start_ms: float, end_ms: float,
             trace: str = TRACE, **attrs) -> str:
        span_id = _id()
        values = {"thread.id": self.thread, "thread.name": "MainThread"}
        if phase is not None:
            values["coldstart.phase"] = phase
        values.update(attrs)
        self.our_spans.append(_span(trace, span_id, parent, name, start_ms, end_ms, values))
        return span_id

    def root(self, parent: str | None, start_ms: float, end_ms: float, trace: str = TRACE) -> str:
        return self.ours("model.startup", None, parent, start_ms, end_ms, trace,
                         **{"coldstart.ready": True, "coldstart.end_reason": "ready",
                            "coldstart.process_start.source": "proc"})

    def lines(self) -> list[str]:
        out = []
        if self.vllm_spans:
            scopes: dict[str, list] = {}
            for scope, span in self.vllm_spans:
                scopes.setdefault(scope, []).append(span)
            out.append(json.dumps({"resourceSpans": [{
                "resource": {"attributes": _attributes(self.vllm_resource)},
                "scopeSpans": [{"scope": {"name": scope}, "spans": spans} for scope, spans in scopes.items()]}]}))
        if self.our_spans:
            out.append(json.dumps({"resourceSpans": [{
                "resource": {"attributes": _attributes(self.our_resource)},
                "scopeSpans": [{"scope": {"name": "otel_coldstart"}, "spans": self.our_spans}]}]}))
        return out


def _span(trace: str, span_id: str, parent: str | None, name: str, start_ms: float, end_ms: float,
          attrs: dict) -> dict:
    span = {"traceId": trace, "spanId": span_id, "name": name, "kind": 1,
            "startTimeUnixNano": str(T0 + int(start_ms * MS)), "endTimeUnixNano": str(T0 + int(end_ms * MS)),
            "attributes": _attributes(attrs), "status": {}}
    if parent is not None:
        span["parentSpanId"] = parent
    return span


def build(launched: bool = True, workers: int = 2) -> tuple[list[str], dict]:
    """The OTLP JSON lines of one vLLM start-up (TP = ``workers``), and what it holds (ids,
    expected sums) for the tests to check against."""
    facts: dict = {"workers": workers}
    launcher = Process(90, {}, 1)
    launch = None
    if launched:
        launch = launcher.ours("coldstart.launch", None, None, -50, 61_500,
                               **{"coldstart.launch.processes_started": 2 + workers})
    front = Process(100, {"vllm.instrumenting_module_name": "vllm.llm_engine"}, 11)
    front_trace = TRACE if launched else FRONT_TRACE
    front_root = front.root(launch, 0, 61_000, trace=front_trace)
    front.ours("coldstart.import", "import", front_root, 0, 3_000, trace=front_trace,
               **{"coldstart.import.own_s": 0.2})
    # vLLM's top spans read TRACEPARENT (the launcher's) when nothing is current in-process;
    # without one, each starts a trace of its own.
    front.vllm("API server setup", "vllm.entrypoints.openai.api_server", "setup_server", launch, 3_100, 3_300,
               trace=TRACE if launched else SETUP_TRACE)
    overall = front.vllm("Overall Loading", "vllm.v1.engine.core_client", "EngineCoreClient.make_async_mp_client",
                         launch, 5_000, 60_800)

    core = Process(101, {"vllm.instrumenting_module_name": "vllm.engine_core", "vllm.process_kind": "engine_core",
                         "vllm.process_name": "EngineCore"}, 21)
    core_init = core.vllm("EngineCoreProc init", "vllm.v1.engine.core", "EngineCoreProc.__init__", overall,
                          5_600, 60_500)
    core_root = core.root(core_init, 5_200, 60_400)
    core.ours("coldstart.import", "import", core_root, 5_200, 5_550)
    executor = core.vllm("Executor init", "vllm.v1.executor.abstract", "Executor.__init__", core_init, 5_700, 31_000)
    core.vllm("Prepare model", "vllm.v1.engine.core", "EngineCore._initialize_kv_caches", core_init, 31_100, 60_300)

    facts["deserialize_ms"] = 0.0
    for tp in range(workers):
        worker = Process(102 + tp, {"vllm.instrumenting_module_name": "vllm.worker", "vllm.process_kind": "worker",
                                    "vllm.process_name": f"Worker_TP{tp}"}, 31 + tp)
        init = worker.vllm("Worker init", "vllm.v1.executor.multiproc_executor", "WorkerProc.__init__", executor,
                           6_500, 30_800)
        root = worker.root(init, 5_800, 59_000)
        worker.ours("coldstart.import", "import", root, 5_800, 6_600)
        device = worker.vllm("Init device", "vllm.v1.worker.gpu_worker", "Worker.init_device", init, 6_700, 9_700)
        worker.ours("coldstart.runtime_init", "runtime_init", device, 6_800, 9_500,
                    **{"coldstart.runtime.backend": "cuda", "coldstart.runtime.step": "lazy_init"})
        load = worker.vllm("Load model", "vllm.model_executor.model_loader.base_loader", "BaseModelLoader.load_model",
                           init, 9_800, 30_500)
        weights = worker.vllm("Load weights", "vllm.model_executor.model_loader.default_loader",
                              "DefaultModelLoader.load_weights", load, 10_000, 30_000)
        for index, (start, end) in enumerate(((10_000, 18_000), (18_000, 26_000))):
            worker.ours("coldstart.deserialize", "deserialize", weights, start, end, **{
                "coldstart.file.path": f"/models/llama/model-{index + 1:05d}-of-00002.safetensors",
                "coldstart.file.size": 8 << 30, "coldstart.file.format": "safetensors",
                "coldstart.shard.index": index, "coldstart.shard.count": 2, "coldstart.cache.state": "warm",
                "coldstart.bytes": 8 << 30})
            facts["deserialize_ms"] += end - start
        worker.ours("coldstart.h2d", "h2d", weights, 26_000, 30_000, **{
            "coldstart.aggregate": True, "coldstart.calls": 291, "coldstart.busy_s": 3.6,
            "coldstart.bytes": 16 << 30})
        # During "Prepare model": the profile run compiles (an RPC: no vLLM span is current).
        worker.ours("coldstart.compile", "compile", root, 31_200, 39_000, **{
            "coldstart.compile.id": "0/0", "coldstart.compile.trigger": "dynamo", "coldstart.compile.recompile": False,
            "coldstart.compile.cache.hits": 0, "coldstart.compile.cache.misses": 2,
            "coldstart.compile.frame":
                "forward (/usr/lib/python3.12/site-packages/vllm/model_executor/models/llama.py:380)",
            "coldstart.compile.stage.dynamo_s": 7.7})
        capture = worker.vllm("Capture model", "vllm.v1.worker.gpu_model_runner", "GPUModelRunner.capture_model",
                              executor, 40_000, 58_000)
        worker.ours("coldstart.graph_capture", "graph_capture", capture, 40_100, 57_900, **{
            "coldstart.aggregate": True, "coldstart.calls": 67, "coldstart.busy_s": 17.5,
            "coldstart.graph.api": "torch.cuda.CUDAGraph", "coldstart.graph.batch_sizes": [512, 256, 128, 1],
            "coldstart.graph.capture_times_s": [6.0, 4.0, 3.0, 0.5]})
        facts.setdefault("worker_roots", []).append(root)
        launcher_lines = worker.lines()
        facts.setdefault("lines", []).extend(launcher_lines)
    lines = launcher.lines() + front.lines() + core.lines() + facts.pop("lines")
    facts.update(front_root=front_root, core_root=core_root, overall=overall)
    return lines, facts


def write(directory: str, **options) -> tuple[str, dict]:
    lines, facts = build(**options)
    path = os.path.join(directory, "vllm-startup.otlp.jsonl")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    return path, facts
