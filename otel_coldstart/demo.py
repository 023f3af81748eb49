"""The demo: a small Llama-shaped checkpoint loaded the way Hugging Face loaders do, with the
first shard evicted from the page cache so the trace shows a cold shard against warm ones.

``prepare()`` generates the checkpoint once (cached) and sets up the cache state;
``load()`` is the instrumented start-up, run in a fresh process so that its root span
starts at a real process start.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from . import probes

CHECKPOINT_VERSION = "v1"


@dataclass(frozen=True)
class LlamaShape:
    vocab: int = 8192
    hidden: int = 768
    intermediate: int = 2048
    layers: int = 6
    shards: int = 4

    def tensors(self) -> list[tuple[str, tuple[int, ...]]]:
        h, i = self.hidden, self.intermediate
        names: list[tuple[str, tuple[int, ...]]] = [("model.embed_tokens.weight", (self.vocab, h))]
        for layer in range(self.layers):
            p = f"model.layers.{layer}."
            names += [
                (p + "self_attn.q_proj.weight", (h, h)),
                (p + "self_attn.k_proj.weight", (h, h)),
                (p + "self_attn.v_proj.weight", (h, h)),
                (p + "self_attn.o_proj.weight", (h, h)),
                (p + "mlp.gate_proj.weight", (i, h)),
                (p + "mlp.up_proj.weight", (i, h)),
                (p + "mlp.down_proj.weight", (h, i)),
                (p + "input_layernorm.weight", (h,)),
                (p + "post_attention_layernorm.weight", (h,)),
            ]
        names += [("model.norm.weight", (h,)), ("lm_head.weight", (self.vocab, h))]
        return names


def default_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "otel-coldstart", f"demo-llama-{CHECKPOINT_VERSION}")


def generate_checkpoint(directory: str, shape: LlamaShape = LlamaShape(), seed: int = 0,
                        dtype: str = "bfloat16") -> list[str]:
    """Write ``shape`` as safetensors shards of ``dtype`` (bf16 by default, as most checkpoints
    on the Hub are) plus an HF ``model.safetensors.index.json``.

    Returns the shard paths. Skips the work when a complete checkpoint is already there.
    """
    import torch
    from safetensors.torch import save_file

    index_path = os.path.join(directory, "model.safetensors.index.json")
    names = [f"model-{n:05d}-of-{shape.shards:05d}.safetensors" for n in range(1, shape.shards + 1)]
    paths = [os.path.join(directory, n) for n in names]
    if os.path.exists(index_path) and all(os.path.exists(p) for p in paths):
        return paths
    os.makedirs(directory, exist_ok=True)
    generator = torch.Generator().manual_seed(seed)
    tensors = shape.tensors()
    per_shard = -(-len(tensors) // shape.shards)
    weight_map = {}
    total = 0
    for number, path in enumerate(paths):
        chunk = tensors[number * per_shard : (number + 1) * per_shard]
        state = {name: torch.randn(dims, generator=generator).to(getattr(torch, dtype)) for name, dims in chunk}
        tmp = path + ".tmp"
        save_file(state, tmp, metadata={"format": "pt"})
        os.replace(tmp, path)
        for name, value in state.items():
            weight_map[name] = names[number]
            total += value.nbytes
    with open(index_path + ".tmp", "w", encoding="utf-8") as handle:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, handle, indent=1)
    os.replace(index_path + ".tmp", index_path)
    return paths


def set_cache_state(paths: list[str], cold: set[int]) -> bool:
    """Evict the shards numbered in ``cold`` from the page cache and warm the rest.
    Returns False where the OS would not evict."""
    evicted = True
    for number, path in enumerate(paths):
        if number in cold:
            evicted = probes.evict_from_page_cache(path) and evicted
        else:
            with open(path, "rb") as handle:
                while handle.read(1 << 24):
                    pass
    return evicted


def build_model(shape: LlamaShape):
    """A module tree with the checkpoint's parameter names, allocated on the meta device (no
    memory, no init time), the way accelerate's init_empty_weights does."""
    import torch
    from torch import nn

    with torch.device("meta"):
        model = nn.Module()
        model.model = nn.Module()
        model.model.embed_tokens = nn.Embedding(shape.vocab, shape.hidden, dtype=torch.bfloat16)
        layers = nn.ModuleList()
        for _ in range(shape.layers):
            layer = nn.Module()
            layer.self_attn = nn.Module()
            for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
                setattr(layer.self_attn, proj, nn.Linear(shape.hidden, shape.hidden, bias=False, dtype=torch.bfloat16))
            layer.mlp = nn.Module()
            layer.mlp.gate_proj = nn.Linear(shape.hidden, shape.intermediate, bias=False, dtype=torch.bfloat16)
            layer.mlp.up_proj = nn.Linear(shape.hidden, shape.intermediate, bias=False, dtype=torch.bfloat16)
            layer.mlp.down_proj = nn.Linear(shape.intermediate, shape.hidden, bias=False, dtype=torch.bfloat16)
            layer.input_layernorm = _Norm(shape.hidden)
            layer.post_attention_layernorm = _Norm(shape.hidden)
            layers.append(layer)
        model.model.layers = layers
        model.model.norm = _Norm(shape.hidden)
        model.lm_head = nn.Linear(shape.hidden, shape.vocab, bias=False, dtype=torch.bfloat16)
    return model


def _Norm(hidden: int):
    import torch
    from torch import nn

    norm = nn.Module()
    norm.weight = nn.Parameter(torch.empty(hidden, dtype=torch.bfloat16))
    return norm


def load(directory: str, dtype: str = "float16") -> dict:
    """The instrumented start-up: read every shard through safe_open (as transformers does),
    assign the weights into the model, cast it, and call ready()."""
    import otel_coldstart

    with otel_coldstart.phase("import_libraries"):
        import torch  # noqa: F401 - imported here so that the phase holds their import time
        from safetensors import safe_open  # noqa: F401

    shape = LlamaShape()
    with otel_coldstart.phase("build_model"):
        model = build_model(shape)
    load_weights(model, directory, dtype)
    otel_coldstart.ready()
    return {"parameters": sum(p.numel() for p in model.parameters())}


def load_weights(model, directory: str, dtype: str = "float16") -> None:
    """Read every shard through safe_open, assign the weights into ``model`` and cast it."""
    import torch
    from safetensors import safe_open

    with open(os.path.join(directory, "model.safetensors.index.json"), encoding="utf-8") as handle:
        shard_names = sorted(set(json.load(handle)["weight_map"].values()))
    state = {}
    for name in shard_names:
        with safe_open(os.path.join(directory, name), framework="pt") as shard:
            for key in shard.keys():
                state[key] = shard.get_tensor(key)
    model.load_state_dict(state, assign=True)
    model.to(getattr(torch, dtype))


def write_report(out) -> None:
    """The breakdown and findings of this process's start-up (after ``load()``), as the
    summary prints them, and where the trace went."""
    import sys

    from .analyze.breakdown import compute_breakdown
    from .analyze.render import render_text
    from .analyze.report import Report
    from .controller import CONTROLLER

    session = CONTROLLER.session
    if session is None:  # OTEL_SDK_DISABLED=true, or OTEL_TRACES_EXPORTER=none and nothing else
        sys.stderr.write("[demo] not traced: OTEL_SDK_DISABLED or OTEL_TRACES_EXPORTER turned tracing off\n")
        return
    records = session.records()
    root = next(r for r in reversed(records) if r.is_root)
    breakdown = compute_breakdown(root, records)
    out.write("[otel-coldstart] start-up breakdown\n")
    render_text(Report.of([breakdown]), out)
    if CONTROLLER.trace_file:
        out.write(f"  trace written to {CONTROLLER.trace_file}\n")
        out.write(f"  analyze it again: otel-coldstart analyze {CONTROLLER.trace_file}\n")
    out.flush()
