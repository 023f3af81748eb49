#!/usr/bin/env python3
"""GPU check of the device phases: run on a machine with a CUDA GPU (CI has none).

What it does, in one fresh process (runtime init must be the first CUDA touch):

1. instruments with an OTLP JSON file exporter, before anything touches CUDA;
2. writes a multi-shard bf16 safetensors checkpoint (and one torch.save shard);
3. loads it to the GPU three ways, each in its own phase: pageable sources with blocking
   ``.to("cuda")``; pinned sources (``pin_memory()``) with ``.to("cuda", non_blocking=True)``
   (the copies are attributed through CUDA events when the aggregate ends); and
   ``torch.load(map_location="cuda")`` (``UntypedStorage.to``);
4. casts the GPU model to fp16, captures CUDA graphs of a small MLP for several batch sizes
   with ``torch.cuda.graph``, once with ``torch.accelerator.Graph`` and through
   ``make_graphed_callables``; calls ``ready()``; captures once more (after-ready);
5. reads the trace back from the OTLP JSON file with ``otel_coldstart.analyze`` and asserts:
   h2d bytes equal the checkpoint's bytes in every load phase, the pinned/pageable split,
   a plausible achieved bandwidth, graph captures with their counts and batch sizes, one
   successful runtime init span, the loaded tensors bit-identical to the files, and the
   per-tensor patches removed at ready().

Prints a compact report. Exit codes: 0 all checks passed; 1 a check failed; 2 bad
arguments or the output file exists; 3 no CUDA device (the checks need one); 4 a
dependency (torch, safetensors, opentelemetry-sdk, otel_coldstart) is missing.
Takes well under a minute on a current GPU (about 1 GiB of checkpoint I/O by default).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NO_CUDA, EXIT_MISSING_DEPENDENCY = 0, 1, 2, 3, 4

# Achieved host-to-device bandwidth outside this range means the bytes or the time are wrong
# (PCIe 3 x16 pageable is ~3 GB/s at worst; NVLink-C2C peaks near 900 GB/s).
PLAUSIBLE_BANDWIDTH = (0.2e9, 2.0e12)
GRAPH_BATCH_SIZES = (1, 2, 4, 8, 16, 32)
TIED_BASE, TIED_VIEW = "layers.0.w0", "tied.w0_half"


class CheckFailed(Exception):
    pass


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--shard-mib", type=int, default=64, help="size of each checkpoint shard (MiB)")
    parser.add_argument("--trace-out", help="also keep the OTLP JSON trace here (must not exist)")
    args = parser.parse_args(argv)
    if args.shards < 2 or not 1 <= args.shard_mib <= 4096:
        print("gpu-check: --shards must be >= 2 and --shard-mib in 1..4096", file=sys.stderr)
        return EXIT_USAGE
    if args.trace_out and os.path.exists(args.trace_out):
        print(f"gpu-check: {args.trace_out} exists; not overwriting it", file=sys.stderr)
        return EXIT_USAGE
    try:
        import torch  # noqa: F401  (torch.cuda.is_available() does not initialise CUDA)
        import safetensors  # noqa: F401
        import opentelemetry.sdk  # noqa: F401

        import otel_coldstart  # noqa: F401
    except ImportError as exc:
        print(f"gpu-check: missing dependency: {exc.name} (pip install -e . safetensors)", file=sys.stderr)
        return EXIT_MISSING_DEPENDENCY
    if not torch.cuda.is_available():
        print("gpu-check: no CUDA device: this check needs a CUDA GPU (the CPU tests cover the rest)",
              file=sys.stderr)
        return EXIT_NO_CUDA
    with tempfile.TemporaryDirectory(prefix="otel-coldstart-gpu-check-") as workdir:
        trace_path = args.trace_out or os.path.join(workdir, "trace.otlp.jsonl")
        try:
            report = run(workdir, trace_path, args.shards, args.shard_mib * 1024 * 1024)
        except CheckFailed as failure:
            print(f"gpu-check: FAILED: {failure}", file=sys.stderr)
            return EXIT_FAILED
    print(report)
    return EXIT_OK


def run(workdir: str, trace_path: str, shards: int, shard_bytes: int) -> str:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    import otel_coldstart
    from otel_coldstart.export import OtlpJsonFileExporter

    wall_start = time.perf_counter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OtlpJsonFileExporter(trace_path)))
    # First, before any CUDA call: runtime init must happen under the instrumentation.
    otel_coldstart.instrument(tracer_provider=provider, start_at="instrument", summary=False, handle_sigterm=False)

    import torch
    from safetensors.torch import load_file

    files, torch_file, expected = write_checkpoint(workdir, shards, shard_bytes)
    model_bytes = sum(t.nbytes for t in expected.values())
    # torch.load moves storages, not tensors: a tied view shares its base's storage and bytes.
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                for t in torch.load(torch_file, map_location="cpu").values()}
    torch_file_bytes = sum(storages.values())

    with otel_coldstart.phase("cuda_start"):
        # The first CUDA touch: runtime init, then the device's context on the first
        # allocation; kept out of the copies so their bandwidth is the copies' own.
        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()
    with otel_coldstart.phase("load_pageable"):
        pageable = {}
        for path in files:
            for name, tensor in load_file(path).items():
                pageable[name] = tensor.to("cuda")
        torch.cuda.synchronize()
    with otel_coldstart.phase("load_pinned"):
        pinned = {}
        for path in files:
            staged = {name: tensor.pin_memory() for name, tensor in load_file(path).items()}
            for name, tensor in staged.items():
                pinned[name] = tensor.to("cuda", non_blocking=True)
        torch.cuda.synchronize()
    with otel_coldstart.phase("load_torch"):
        from_torch_load = torch.load(torch_file, map_location="cuda")
    with otel_coldstart.phase("cast_model"):
        casted = {name: t.half() for name, t in pinned.items()}

    captures = capture_graphs(torch)
    otel_coldstart.ready()
    ready_ok = torch.Tensor.to is torch._C.TensorBase.to and "to" not in vars(torch.Tensor)
    with torch.no_grad(), torch.cuda.graph(torch.cuda.CUDAGraph()):  # a lazy capture, after ready
        captures["mlp"](captures["inputs"][1])
    torch.cuda.synchronize()
    provider.force_flush()

    # Bits: compared after ready(), with the originals of every patched method back.
    for name, tensor in expected.items():
        for label, loaded in (("pageable", pageable), ("pinned", pinned)):
            _check(torch.equal(loaded[name].cpu().view(torch.uint8), tensor.view(torch.uint8)),
                   f"{label} load changed the bits of {name}")
        _check(torch.equal(casted[name].cpu(), tensor.half()), f"cast of {name} differs from a plain cast")
    tied_base, tied_view = from_torch_load[TIED_BASE], from_torch_load[TIED_VIEW]
    _check(tied_view.untyped_storage().data_ptr() == tied_base.untyped_storage().data_ptr(),
           "torch.load(map_location='cuda') broke the storage sharing of a tied view")
    for name, tensor in from_torch_load.items():
        original = expected[TIED_BASE][: tensor.shape[0]] if name == TIED_VIEW else expected[name]
        _check(tensor.is_cuda and torch.equal(tensor.cpu().view(torch.uint8), original.view(torch.uint8)),
               f"torch.load(map_location='cuda') changed {name}")
    _check(ready_ok, "Tensor.to is not the original after ready()")
    otel_coldstart.uninstrument()

    spans = read_back(trace_path)
    facts = check_trace(spans, model_bytes, torch_file_bytes, len(expected), captures)
    facts["wall_s"] = time.perf_counter() - wall_start
    facts["device"] = torch.cuda.get_device_name(0)
    facts["torch"] = torch.__version__
    return render(facts)


def write_checkpoint(workdir: str, shards: int, shard_bytes: int):
    """Shards of bf16 tensors (random bits, so every byte is checked), an HF-style index and
    one torch.save file; returns the files, the torch file and the tensors for comparison."""
    import torch
    from safetensors.torch import save_file

    generator = torch.Generator().manual_seed(0)
    rows = 1024
    per_tensor = rows * 2048 * 2  # bytes of one [1024, 2048] bf16 tensor
    per_shard = max(1, shard_bytes // per_tensor)
    expected, files, weight_map = {}, [], {}
    for shard in range(shards):
        state = {}
        for i in range(per_shard):
            # Random values (no NaN, so a cast compares with torch.equal), written as bf16.
            values = torch.randn(rows, 2048, generator=generator)
            state[f"layers.{shard}.w{i}"] = values.to(torch.bfloat16)
        name = f"model-{shard + 1:05d}-of-{shards:05d}.safetensors"
        save_file(state, os.path.join(workdir, name))
        files.append(os.path.join(workdir, name))
        weight_map.update({k: name for k in state})
        expected.update(state)
    with open(os.path.join(workdir, "model.safetensors.index.json"), "w") as handle:
        json.dump({"metadata": {}, "weight_map": weight_map}, handle)
    torch_file = os.path.join(workdir, "extra.pt")
    saved = dict(list(expected.items())[:per_shard])
    saved[TIED_VIEW] = expected[TIED_BASE][: rows // 2]  # a tied weight: a view of another tensor
    torch.save(saved, torch_file)
    return files, torch_file, expected


def capture_graphs(torch) -> dict:
    from otel_coldstart.patches import cuda_graphs

    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256)).cuda()
    inputs = {n: torch.randn(n, 256, device="cuda") for n in GRAPH_BATCH_SIZES}
    graphs, outputs = {}, {}
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():  # warm-up off the capture, as torch advises
        for n in GRAPH_BATCH_SIZES:
            mlp(inputs[n])
    torch.cuda.current_stream().wait_stream(side)
    with otel_coldstart_phase("capture_batch_sizes"), torch.no_grad():
        for n in GRAPH_BATCH_SIZES:
            graphs[n] = torch.cuda.CUDAGraph()
            with cuda_graphs.batch_size(n), torch.cuda.graph(graphs[n]):
                outputs[n] = mlp(inputs[n])
    with torch.no_grad():
        for n in GRAPH_BATCH_SIZES:
            graphs[n].replay()
        torch.cuda.synchronize()
        for n in GRAPH_BATCH_SIZES:
            _check(torch.allclose(outputs[n], mlp(inputs[n])), f"graph replay for batch {n} differs from eager")
    if hasattr(torch, "accelerator") and hasattr(torch.accelerator, "Graph"):  # torch >= 2.13
        accelerator_graph = torch.accelerator.Graph()
        static = torch.zeros(64, device="cuda")
        stream = torch.cuda.Stream()  # it captures the current stream: never the default one
        stream.wait_stream(torch.cuda.current_stream())
        with otel_coldstart_phase("capture_accelerator"):
            with torch.cuda.stream(stream), accelerator_graph:
                static.add_(1)
        torch.cuda.current_stream().wait_stream(stream)
        accelerator_graph.replay()
        torch.cuda.synchronize()
        _check(torch.equal(static.cpu(), torch.ones(64)), "torch.accelerator.Graph replay gave a wrong result")
    graphed_input = torch.randn(8, 256, device="cuda", requires_grad=True)
    with otel_coldstart_phase("make_graphed"):
        torch.cuda.make_graphed_callables(
            torch.nn.Sequential(torch.nn.Linear(256, 256)).cuda(), (graphed_input,), num_warmup_iters=3)
    return {"mlp": mlp, "inputs": inputs, "batch_sizes": list(GRAPH_BATCH_SIZES)}


def otel_coldstart_phase(name: str):
    import otel_coldstart

    return otel_coldstart.phase(name)


def read_back(trace_path: str):
    """The trace as the analyzer sees it: the OTLP JSON file, through its readers."""
    from otel_coldstart.analyze.readers import read_trace_file

    return read_trace_file(trace_path)


def check_trace(spans, model_bytes: int, torch_file_bytes: int, tensor_count: int, captures: dict) -> dict:
    """Assertions over analyzer records. Returns the figures the report prints."""
    from otel_coldstart import semconv

    by_id = {s.span_id: s for s in spans}
    own_phases = ("load_pageable", "load_pinned", "load_torch", "cast_model", "capture_batch_sizes",
                  "capture_accelerator", "make_graphed")
    phase_spans = {s.attributes[semconv.PHASE]: s for s in spans
                   if s.attributes.get(semconv.PHASE) in own_phases and s.name == "coldstart." + s.attributes[semconv.PHASE]}
    for needed in ("load_pageable", "load_pinned", "load_torch", "capture_batch_sizes", "make_graphed"):
        _check(needed in phase_spans, f"no span for phase {needed}")

    def under(ancestor, phase):
        found = []
        for span in spans:
            if span.attributes.get(semconv.PHASE) != phase or not span.attributes.get(semconv.AGGREGATE):
                continue
            parent = by_id.get(span.parent_id)
            while parent is not None and parent.span_id != ancestor.span_id:
                parent = by_id.get(parent.parent_id)
            if parent is not None:
                found.append(span)
        return found

    facts: dict = {"model_bytes": model_bytes, "tensors": tensor_count}
    for label, memory in (("load_pageable", "pageable"), ("load_pinned", "pinned")):
        h2d = under(phase_spans[label], semconv.PHASE_H2D)
        total = sum(s.attributes.get(semconv.BYTES, 0) for s in h2d)
        pinned = sum(s.attributes.get(semconv.COPY_PINNED_BYTES, 0) for s in h2d)
        pageable = sum(s.attributes.get(semconv.COPY_PAGEABLE_BYTES, 0) for s in h2d)
        calls = sum(s.attributes.get(semconv.CALLS, 0) for s in h2d)
        _check(total == model_bytes, f"{label}: h2d bytes {total} != model bytes {model_bytes}")
        _check(calls == tensor_count, f"{label}: {calls} h2d calls for {tensor_count} tensors")
        _check(len(h2d) < tensor_count, f"{label}: {len(h2d)} h2d spans for {tensor_count} tensors")
        expect_pinned = model_bytes if memory == "pinned" else 0
        _check(pinned == expect_pinned and pinned + pageable == model_bytes,
               f"{label}: pinned/pageable split {pinned}/{pageable}, expected {expect_pinned} pinned")
        rates = [s.attributes.get(semconv.THROUGHPUT) for s in h2d]
        _check(all(isinstance(r, (int, float)) for r in rates), f"{label}: an h2d span has no throughput")
        busy = sum(_effective_s(s) for s in h2d)
        rate = total / busy if busy > 0 else 0.0
        low, high = PLAUSIBLE_BANDWIDTH
        _check(low <= rate <= high, f"{label}: achieved {rate / 1e9:.2f} GB/s is not plausible")
        facts[f"{memory}_gbps"] = rate / 1e9
        facts[f"{memory}_h2d_spans"] = len(h2d)
        if memory == "pinned":
            queued = sum(s.attributes.get(semconv.COPY_NON_BLOCKING_CALLS, 0) for s in h2d)
            _check(queued == tensor_count, f"load_pinned: {queued} non-blocking calls for {tensor_count}")
            _check(all(semconv.COPY_ASYNC_S in s.attributes for s in h2d),
                   "load_pinned: queued copies were not resolved through CUDA events")
            pins = under(phase_spans[label], semconv.PHASE_PIN)
            pin_bytes = sum(s.attributes.get(semconv.BYTES, 0) for s in pins)
            _check(pin_bytes == model_bytes, f"pin bytes {pin_bytes} != model bytes {model_bytes}")
            facts["pin_gbps"] = pin_bytes / max(1e-9, sum(_effective_s(s) for s in pins)) / 1e9

    torch_h2d = under(phase_spans["load_torch"], semconv.PHASE_H2D)
    torch_bytes = sum(s.attributes.get(semconv.BYTES, 0) for s in torch_h2d)
    _check(torch_bytes == torch_file_bytes,
           f"torch.load(map_location='cuda'): h2d bytes {torch_bytes} != {torch_file_bytes}")

    if "cast_model" in phase_spans:
        casts = under(phase_spans["cast_model"], semconv.PHASE_CAST)
        cast_bytes = sum(s.attributes.get(semconv.BYTES, 0) for s in casts)
        _check(cast_bytes == model_bytes, f"cast bytes {cast_bytes} != model bytes {model_bytes}")

    loop = under(phase_spans["capture_batch_sizes"], semconv.PHASE_GRAPH_CAPTURE)
    _check(len(loop) == 1, f"{len(loop)} graph_capture aggregates for one capture loop, expected 1")
    _check(loop[0].attributes.get(semconv.CALLS) == len(captures["batch_sizes"]),
           f"capture loop: {loop[0].attributes.get(semconv.CALLS)} captures, expected {len(captures['batch_sizes'])}")
    _check(list(loop[0].attributes.get(semconv.GRAPH_BATCH_SIZES, ())) == captures["batch_sizes"],
           f"capture loop batch sizes {loop[0].attributes.get(semconv.GRAPH_BATCH_SIZES)}")
    facts["capture_loop_s"] = _effective_s(loop[0])
    if "capture_accelerator" in phase_spans:
        accel = under(phase_spans["capture_accelerator"], semconv.PHASE_GRAPH_CAPTURE)
        _check(len(accel) == 1 and accel[0].attributes.get(semconv.GRAPH_API) == "torch.accelerator.Graph",
               "torch.accelerator.Graph capture not recorded")
    graphed = [s for s in spans if s.name == semconv.SPAN_MAKE_GRAPHED_CALLABLES]
    _check(len(graphed) == 1, f"{len(graphed)} make_graphed_callables spans")
    graphed_captures = under(graphed[0], semconv.PHASE_GRAPH_CAPTURE)
    _check(sum(s.attributes.get(semconv.CALLS, 0) for s in graphed_captures) == 2,
           "make_graphed_callables: expected a forward and a backward capture")
    after_ready = [s for s in spans if s.attributes.get(semconv.PHASE) == semconv.PHASE_GRAPH_CAPTURE
                   and s.attributes.get(semconv.AFTER_READY)]
    _check(len(after_ready) == 1, f"{len(after_ready)} after-ready captures, expected 1")
    facts["graph_captures"] = sum(s.attributes.get(semconv.CALLS, 1) for s in spans
                                  if s.attributes.get(semconv.PHASE) == semconv.PHASE_GRAPH_CAPTURE
                                  and s.attributes.get(semconv.AGGREGATE))

    inits = [s for s in spans if s.attributes.get(semconv.PHASE) == semconv.PHASE_RUNTIME_INIT]
    _check(len(inits) == 1, f"{len(inits)} runtime_init spans, expected 1")
    _check(inits[0].status != "error", "runtime_init span has an error status")
    _check((inits[0].attributes.get(semconv.RUNTIME_DEVICE_COUNT) or 0) >= 1, "runtime_init: no device count")
    facts["runtime_init_s"] = inits[0].duration_ns / 1e9
    facts["spans"] = len(spans)
    return facts


def _effective_s(span) -> float:
    """Seconds a copy aggregate took: the device window for queued copies, else busy time."""
    from otel_coldstart import semconv

    rate = span.attributes.get(semconv.THROUGHPUT)
    nbytes = span.attributes.get(semconv.BYTES, 0)
    if isinstance(rate, (int, float)) and rate > 0 and nbytes:
        return nbytes / rate
    return span.busy_ns / 1e9


def render(facts: dict) -> str:
    gib = facts["model_bytes"] / 2**30
    return "\n".join([
        f"gpu-check: OK on {facts['device']} (torch {facts['torch']}) in {facts['wall_s']:.1f} s, "
        f"{facts['spans']} spans",
        f"  runtime init      {facts['runtime_init_s'] * 1e3:8.1f} ms",
        f"  h2d pageable      {facts['pageable_gbps']:8.2f} GB/s  {gib:.2f} GiB, {facts['tensors']} tensors "
        f"in {facts['pageable_h2d_spans']} span(s)",
        f"  h2d pinned (nb)   {facts['pinned_gbps']:8.2f} GB/s  {gib:.2f} GiB in {facts['pinned_h2d_spans']} span(s)",
        f"  pin_memory        {facts['pin_gbps']:8.2f} GB/s",
        f"  graph captures    {facts['graph_captures']:8d}     loop of {len(GRAPH_BATCH_SIZES)} sizes "
        f"took {facts['capture_loop_s'] * 1e3:.1f} ms",
    ])


if __name__ == "__main__":
    sys.exit(main())
