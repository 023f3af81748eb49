"""One instrumented start-up in a fresh process, for benchmarks/whatif_validation.py.

    python benchmarks/_whatif_child.py stage DIR                 # read the shards, copy every tensor
    python benchmarks/_whatif_child.py cast DIR DTYPE            # read the shards, cast every tensor
    python benchmarks/_whatif_child.py compile                   # torch.compile a function, call it once

``stage`` loads as vLLM does on a GPU, each tensor copied while its file is open
(``param.copy_(f.get_tensor(name))`` inside ``safe_open``), here into one reused staging
buffer (on a GPU machine the copy would be the host-to-device one): every byte of the
checkpoint is touched, and whatever the read did not bring in from storage, the copy faults
in. ``cast`` converts each tensor read to the serving dtype (``tensor.to(DTYPE)``, as
transformers and vLLM do per parameter; a no-op when the checkpoint is already in it).
``compile`` is a
first request's compilation (the Inductor cache is TORCHINDUCTOR_CACHE_DIR).

``otel_coldstart.instrument()`` is the first statement, so the root span starts at the
process start; the trace goes where OTEL_COLDSTART_OUTPUT_DIR says.
"""

import otel_coldstart

otel_coldstart.instrument(summary=False)

import os  # noqa: E402
import sys  # noqa: E402


def shards(directory: str) -> list[str]:
    return sorted(os.path.join(directory, n) for n in os.listdir(directory) if n.endswith(".safetensors"))


def stage(directory: str) -> None:
    with otel_coldstart.phase("import_libraries"):
        import torch
        from safetensors import safe_open

    buffer = None
    for path in shards(directory):
        with safe_open(path, framework="pt") as handle:
            for key in handle.keys():
                tensor = handle.get_tensor(key)
                if buffer is None or buffer.numel() < tensor.numel() or buffer.dtype != tensor.dtype:
                    buffer = torch.zeros(max(tensor.numel(), 1 << 20), dtype=tensor.dtype)
                buffer[: tensor.numel()].view(tensor.shape).copy_(tensor)
    otel_coldstart.ready()


def cast(directory: str, dtype: str) -> None:
    with otel_coldstart.phase("import_libraries"):
        import torch
        from safetensors import safe_open

    target, weights = getattr(torch, dtype), {}
    for path in shards(directory):
        with safe_open(path, framework="pt") as handle:
            for key in handle.keys():
                weights[key] = handle.get_tensor(key)
    weights = {key: tensor.to(target) for key, tensor in weights.items()}
    otel_coldstart.ready()


def compile_once() -> None:
    with otel_coldstart.phase("import_libraries"):
        import torch

    def step(x):
        return (x * 2).sin() + 1

    torch.compile(step)(torch.randn(64))
    otel_coldstart.ready()


mode = sys.argv[1]
if mode == "stage":
    stage(sys.argv[2])
elif mode == "cast":
    cast(sys.argv[2], sys.argv[3])
elif mode == "compile":
    compile_once()
else:
    raise SystemExit(f"unknown mode {mode!r}")
