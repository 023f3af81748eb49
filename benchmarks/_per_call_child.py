"""One side of a per-call pair, in a fresh process: ns per call of each intercepted API.

    python benchmarks/_per_call_child.py SIDE WORKDIR CALLS_SCALE BATCHES

SIDE is ``plain`` (nothing of otel-coldstart is imported) or ``coldstart``
(``otel_coldstart.instrument()`` with an SDK TracerProvider and an in-memory exporter, the
start-up open while measuring; then ``ready()`` and the same calls again). WORKDIR holds the
1-tensor files the parent wrote (``one.safetensors``, ``one.pt``). Each case runs BATCHES
batches of its call count (scaled by CALLS_SCALE) after one warm-up batch; the figure per
clock is the best batch (the least disturbed by other tenants), in ns per call: wall
(``perf_counter_ns``) and this thread's CPU (``thread_time_ns``). Prints one JSON line.
"""

import json
import os
import sys
import time

SIDE, WORKDIR = sys.argv[1], sys.argv[2]
SCALE, BATCHES = float(sys.argv[3]), int(sys.argv[4])

import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

# The attributes the tensor, pinning and safetensors patches replace: after ready() each must be
# the very object it was before instrument() (the after-ready cost is then the plain cost).
_OWNERS = {"Tensor": torch.Tensor, "Module": torch.nn.Module, "UntypedStorage": torch.UntypedStorage}
_NAMES = {"Tensor": ("to", "cuda", "cpu", "half", "bfloat16", "float", "copy_", "pin_memory"),
          "Module": ("to", "cuda", "cpu", "half", "bfloat16", "float"), "UntypedStorage": ("to", "pin_memory")}


def _attributes() -> dict:
    """Tensor's by their own name (``to``, ``copy_``), the others' as ``Module.to``."""
    return {(name if owner == "Tensor" else f"{owner}.{name}"): vars(_OWNERS[owner]).get(
        name, getattr(_OWNERS[owner], name)) for owner, names in _NAMES.items() for name in names}


# (name, calls per batch at scale 1, the call). The tensors are tiny (16 elements), so the
# hook's cost is not hidden behind the work: the worst case.
def cases(handle) -> list:
    bf16 = torch.randn(16).to(torch.bfloat16)
    destination = torch.empty(16, dtype=torch.bfloat16)
    one_st, one_pt = os.path.join(WORKDIR, "one.safetensors"), os.path.join(WORKDIR, "one.pt")
    found = [
        ("Tensor.to cast (bf16 -> fp16)", 2000, lambda: bf16.to(torch.float16)),
        ("Tensor.to no-op (returns self)", 2000, lambda: bf16.to(torch.bfloat16)),
        ("Tensor.copy_ (host, same dtype)", 2000, lambda: destination.copy_(bf16)),
        ("safe_open.get_tensor", 2000, lambda: handle.get_tensor("w")),
        ("safetensors.torch.load_file, 1 tensor", 200, lambda: load_file(one_st)),
        ("torch.load, 1 tensor", 100, lambda: torch.load(one_pt, weights_only=True)),
    ]
    try:
        bf16.pin_memory()
        found.append(("Tensor.pin_memory", 200, lambda: bf16.pin_memory()))
    except Exception as error:  # a CPU-only build: pinning needs an accelerator
        found.append(("Tensor.pin_memory", 0, f"not allowed here: {type(error).__name__}"))
    return found


def measure(handle) -> dict:
    result = {}
    for name, calls, call in cases(handle):
        if not calls:
            result[name] = {"skipped": call}
            continue
        calls = max(1, int(calls * SCALE))
        best_wall = best_cpu = float("inf")
        for batch in range(BATCHES + 1):
            wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
            for _ in range(calls):
                call()
            wall, cpu = time.perf_counter_ns() - wall, time.thread_time_ns() - cpu
            if batch:  # the first batch warms up (first-call caches, page faults)
                best_wall, best_cpu = min(best_wall, wall / calls), min(best_cpu, cpu / calls)
        result[name] = {"wall_ns": best_wall, "cpu_ns": best_cpu, "calls": calls}
    return result


def main() -> None:
    out = {"side": SIDE}
    original = _attributes()
    if SIDE == "coldstart":
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        import otel_coldstart

        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
        otel_coldstart.instrument(tracer_provider=provider, start_at="instrument", summary=False,
                                  handle_sigterm=False)
        active = _attributes()
        out["patched_while_active"] = sorted(k for k in original if active[k] is not original[k])
    with safe_open(os.path.join(WORKDIR, "one.safetensors"), framework="pt") as handle:
        out["cases"] = measure(handle)
    if SIDE == "coldstart":
        otel_coldstart.ready()
        after = _attributes()
        out["attributes_checked"] = sorted(original)
        out["still_patched_after_ready"] = sorted(k for k in original if after[k] is not original[k])
        with safe_open(os.path.join(WORKDIR, "one.safetensors"), framework="pt") as handle:
            out["after_ready"] = measure(handle)
    print(json.dumps(out), flush=True)


main()
