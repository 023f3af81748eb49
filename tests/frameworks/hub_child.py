"""A start-up that begins with a model id: the child process of test_fw_hub_download.py.

``python hub_child.py OUT MODE REPO [FILE]``: instrument, then load REPO from the hub that
``HF_ENDPOINT`` names into an ``HF_HOME`` cache, the way a server does:

- ``from_pretrained``: ``transformers.AutoModel.from_pretrained(REPO)``;
- ``imported_first``: the same, with transformers and huggingface_hub imported before
  instrument() (their names bound before the patch);
- ``snapshot``: ``snapshot_download(REPO)`` then safetensors' ``load_file`` per shard;
- ``hf_hub_download``: one file (FILE), nothing read.

Writes {"trace", "seconds" (the load), "checksum"} to OUT, after ready().
"""

from __future__ import annotations

import glob
import json
import os
import sys
import time

out, mode, repo = sys.argv[1:4]
if mode == "imported_first":
    import huggingface_hub._snapshot_download  # noqa: F401
    import huggingface_hub.file_download  # noqa: F401
    import transformers.utils.hub  # noqa: F401
import otel_coldstart  # noqa: E402

otel_coldstart.instrument(start_at="instrument")
began = time.perf_counter()
checksum = 0.0
if mode in ("from_pretrained", "imported_first"):
    import transformers

    model = transformers.AutoModel.from_pretrained(repo)
    checksum = float(sum(p.double().sum() for p in model.parameters()))
elif mode == "snapshot":
    from huggingface_hub import snapshot_download
    from safetensors.torch import load_file

    folder = snapshot_download(repo)
    for shard in sorted(glob.glob(os.path.join(folder, "*.safetensors"))):
        checksum += float(sum(t.double().sum() for t in load_file(shard).values()))
elif mode == "hf_hub_download":
    from huggingface_hub import hf_hub_download

    hf_hub_download(repo, sys.argv[4])
seconds = time.perf_counter() - began
otel_coldstart.ready()
with open(out, "w") as handle:
    json.dump({"trace": otel_coldstart.trace_file(), "seconds": seconds, "checksum": checksum}, handle)
