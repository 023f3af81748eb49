"""Generated checkpoints to serve from tests/_hub_server.py: a small BERT saved by the real
transformers in 4 safetensors shards (model.safetensors.index.json), read back as bytes."""

from __future__ import annotations

import os


def bert_repo_files(directory: str, shards: int = 4, hidden: int = 256, layers: int = 4) -> dict[str, bytes]:
    """Save a randomly initialised BertModel (seeded) in ``shards`` shards and return every
    file of it, name -> bytes (config, index, shards)."""
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.BertConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4,
                                     intermediate_size=hidden * 4, vocab_size=8192)
    model = transformers.BertModel(config)
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    model.save_pretrained(directory, max_shard_size=max(1, total // shards + 1))
    files = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as handle:
            files[name] = handle.read()
    return files
