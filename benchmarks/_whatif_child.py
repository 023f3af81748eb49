"""One instrumented start-up in a fresh process, for benchmarks/whatif_validation.py.

    python benchmarks/_whatif_child.py stage DIR      # read the shards, copy every tensor
    python benchmarks/_whatif_child.py cast DIR DTYPE  # read the shards into a model, cast it
    python benchmarks/_whatif_child.py compile         # torch.compile a function, call it once

``stage`` loads as a GPU loader does, through one reused staging buffer (``safe_open`` /
``get_tensor`` per shard, then ``copy_`` into the buffer: on a GPU machine the copy would be
the host-to-device one): every byte of the checkpoint is touched, and whatever the read did
not bring in from storage, the copy faults in. ``cast`` is the demo's start-up: the tensors
assigned into a model built on the meta device, then ``model.to(DTYPE)``. ``compile`` is a
first request's compilation (the Inductor cache is TORCHINDUCTOR_CACHE_DIR).

``otel_coldstart.instrument()`` is the first statement, so the root span starts at the
process start; the trace goes where OTEL_COLDSTART_OUTPUT_DIR says.
"""

import otel_coldstart

otel_coldstart.instrument(summary=False)

import os  # noqa: E402
import sys  # noqa: E402

with otel_coldstart.phase("import_libraries"):
    import torch
    from safetensors import safe_open


def shards(directory: str) -> list[str]:
    return sorted(os.path.join(directory, n) for n in os.listdir(directory) if n.endswith(".safetensors"))


def stage(directory: str) -> None:
    buffer = None
    for path in shards(directory):
        with safe_open(path, framework="pt") as handle:
            for key in handle.keys():
                tensor = handle.get_tensor(key)
                if buffer is None or buffer.numel() < tensor.numel() or buffer.dtype != tensor.dtype:
                    buffer = torch.zeros(max(tensor.numel(), 1 << 20), dtype=tensor.dtype)
                buffer[: tensor.numel()].view(tensor.shape).copy_(tensor)


def cast(directory: str, dtype: str) -> None:
    from torch import nn

    state = {}
    for path in shards(directory):
        with safe_open(path, framework="pt") as handle:
            for key in handle.keys():
                state[key] = handle.get_tensor(key)
    with otel_coldstart.phase("build_model"):
        with torch.device("meta"):
            model = nn.Module()
            for name, tensor in state.items():
                *parents, leaf = name.split(".")
                module = model
                for part in parents:
                    if part not in module._modules:
                        module.add_module(part, nn.Module())
                    module = module._modules[part]
                module.register_parameter(leaf, nn.Parameter(torch.empty(tensor.shape, dtype=tensor.dtype)))
    model.load_state_dict(state, assign=True)
    model.to(getattr(torch, dtype))


def compile_once() -> None:
    def step(x):
        return (x * 2).sin() + 1

    torch.compile(step)(torch.randn(64))


mode = sys.argv[1]
if mode == "stage":
    stage(sys.argv[2])
elif mode == "cast":
    cast(sys.argv[2], sys.argv[3])
elif mode == "compile":
    compile_once()
else:
    raise SystemExit(f"unknown mode {mode!r}")
otel_coldstart.ready()
