"""One start-up of the storage-evidence matrix, in a fresh process (run by test_storage_matrix.py).

    python storage_case_child.py API THREADS PATH

API: safe_open | load_file | torch_load | torch_load_mmap. Loads the one-file checkpoint
with that API, casts every tensor to fp16 outside the loader's call (so the pages of a
mmap'd file are faulted by the cast, on torch's intra-op threads where THREADS is 2), then
calls ready(). The trace goes to OTEL_COLDSTART_OUTPUT_DIR. Prints one JSON line: a digest
of the fp16 tensors' bytes (the caller compares it with an uninstrumented load) and the size.
"""

import sys

import otel_coldstart

otel_coldstart.instrument()

import hashlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402

import torch  # noqa: E402

API, THREADS, PATH = sys.argv[1], int(sys.argv[2]), sys.argv[3]
torch.set_num_threads(THREADS)


def load(api: str, path: str) -> dict:
    if api == "safe_open":
        from safetensors import safe_open

        with safe_open(path, framework="pt") as handle:
            return {name: handle.get_tensor(name) for name in handle.keys()}
    if api == "load_file":
        from safetensors.torch import load_file

        return load_file(path)
    if api == "torch_load":
        return torch.load(path, weights_only=True)
    if api == "torch_load_mmap":
        return torch.load(path, weights_only=True, mmap=True)
    raise SystemExit(f"unknown api {api}")


def digest(tensors: dict) -> str:
    """The exact bytes of every tensor, in name order: the plugin must not change one bit."""
    hasher = hashlib.sha256()
    for name in sorted(tensors):
        hasher.update(name.encode())
        hasher.update(tensors[name].contiguous().view(torch.uint8).numpy().tobytes())
    return hasher.hexdigest()


state = load(API, PATH)
cast = {name: tensor.to(torch.float16) for name, tensor in state.items()}
otel_coldstart.ready()
print(json.dumps({"digest": digest(cast), "size": os.path.getsize(PATH)}), flush=True)
