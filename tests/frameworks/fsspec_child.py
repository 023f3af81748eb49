"""A start-up that reads its weights through fsspec: the child process of
test_fw_fsspec_download.py.

``python fsspec_child.py OUT MODE URL LOCAL``: instrument, then read URL (``hf://org/name/file``
through ``HfFileSystem`` against the hub ``HF_ENDPOINT`` names, or ``file://…``) the way a
server does, in phase ``load``, and ready(). MODE:

- ``whole``: ``safetensors.torch.load(f.read())`` (HfFileSystem streams the whole file);
- ``chunks``: 256 KiB reads to the end through 1 MiB blocks, then ``safetensors.torch.load``;
- ``torch_load``: ``torch.load(f)`` on the open file (seeks and ranged reads through the block cache).

LOCAL is the same file on local disk: after ready(), each loaded tensor is compared with it
loaded plainly (bit-identical). Writes {"identical", "tensors"} to OUT.
"""

from __future__ import annotations

import json
import sys

out, mode, url, local = sys.argv[1:5]
import otel_coldstart  # noqa: E402

otel_coldstart.instrument(start_at="instrument")
import fsspec  # noqa: E402
import safetensors.torch  # noqa: E402
import torch  # noqa: E402

with otel_coldstart.phase("load"):
    with fsspec.open(url, "rb", **({"block_size": 1 << 20} if mode == "chunks" else {})) as f:
        if mode == "whole":
            loaded = safetensors.torch.load(f.read())
        elif mode == "chunks":
            parts = []
            while chunk := f.read(256 << 10):
                parts.append(chunk)
            loaded = safetensors.torch.load(b"".join(parts))
        else:
            loaded = torch.load(f, weights_only=True)
otel_coldstart.ready()

plain = torch.load(local, weights_only=True) if mode == "torch_load" else safetensors.torch.load_file(local)
identical = sorted(plain) == sorted(loaded) and all(torch.equal(plain[k], loaded[k]) for k in plain)
with open(out, "w") as handle:
    json.dump({"identical": identical, "tensors": len(loaded)}, handle)
