"""One download for benchmarks/download_overhead.py, in a fresh process:
``python _download_child.py SIDE REPO FILE`` with HF_ENDPOINT and an empty HF_HOME set.
SIDE ``plain`` never imports otel_coldstart; ``instrumented`` calls instrument() first.
Prints {"seconds": the hf_hub_download call's wall time}."""

from __future__ import annotations

import json
import sys
import time

side, repo, filename = sys.argv[1:4]
if side == "instrumented":
    import otel_coldstart

    otel_coldstart.instrument(start_at="instrument")
from huggingface_hub import hf_hub_download  # noqa: E402  (imported before the timed call on both sides)

began = time.perf_counter()
hf_hub_download(repo, filename)
seconds = time.perf_counter() - began
if side == "instrumented":
    otel_coldstart.ready()
print(json.dumps({"seconds": seconds}))
