"""accelerate: an empty (meta) model filled from a sharded safetensors checkpoint.

    python examples/accelerate_load.py [CHECKPOINT_DIR]

Generates (once) a small Llama-shaped 3-shard bf16 checkpoint, builds the model under
``init_empty_weights`` and loads it with ``load_checkpoint_and_dispatch(..., dtype=float16)``,
the way accelerate-based servers start. The breakdown is printed at ``ready()``: one
deserialize span per shard, the bf16->fp16 casts summed into one span, and the time to build
the module tree named by ``otel_coldstart.phase("build_model")``.
"""

import otel_coldstart

otel_coldstart.instrument()  # first thing: the root span starts at the process start

import os  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

from otel_coldstart.demo import LlamaShape, generate_checkpoint  # noqa: E402
from tiny_llama import build_model  # noqa: E402  (beside this file)

SHAPE = LlamaShape(vocab=4096, hidden=256, intermediate=688, layers=4, shards=3)


def main(directory: str) -> None:
    with otel_coldstart.phase("import_libraries"):
        import torch
        from accelerate import init_empty_weights, load_checkpoint_and_dispatch

    with otel_coldstart.phase("generate_checkpoint"):  # a one-off of the example, named apart
        generate_checkpoint(directory, SHAPE)
    with otel_coldstart.phase("build_model"):
        with init_empty_weights():
            model = build_model(SHAPE)
    model = load_checkpoint_and_dispatch(model, os.path.join(directory, "model.safetensors.index.json"),
                                         device_map={"": "cpu"}, dtype=torch.float16)
    with otel_coldstart.phase("warmup"):
        model.model.embed_tokens(torch.arange(8))
    otel_coldstart.ready()
    print(f"loaded {sum(p.numel() for p in model.parameters())} parameters "
          f"({next(model.parameters()).dtype}); trace: {otel_coldstart.trace_file()}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(tempfile.gettempdir(), "otel-coldstart-accelerate-example"))
