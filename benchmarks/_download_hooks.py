"""The hub hooks' own cost per call, in one process (benchmarks/download_overhead.py runs it):
``python _download_hooks.py ENDPOINT CACHE_DIR COMMIT ROUNDS CALLS``.

Alternated blocks, uninstrumented then instrumented (the order rotated per round), of two calls:
``cached``: ``hf_hub_download`` of a cached file at its commit (huggingface_hub's fast path:
no request; the file span opened and ended), and ``head``: ``get_hf_file_metadata`` of a file
(one HEAD to the local hub: the metadata span). Prints the per-call times of each block."""

from __future__ import annotations

import json
import sys
import time

endpoint, cache_dir, commit, rounds, calls = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
from huggingface_hub import file_download, hf_hub_download, hf_hub_url  # noqa: E402

import otel_coldstart  # noqa: E402

REPO = "bench/weights"
url = hf_hub_url(REPO, "config.json", revision=commit, endpoint=endpoint)
hf_hub_download(REPO, "config.json", revision=commit, endpoint=endpoint, cache_dir=cache_dir)  # fill the cache


def block(kind: str) -> float:
    began = time.perf_counter()
    for _ in range(calls):
        if kind == "cached":
            hf_hub_download(REPO, "config.json", revision=commit, endpoint=endpoint, cache_dir=cache_dir)
        else:
            file_download.get_hf_file_metadata(url)
    return (time.perf_counter() - began) / calls


results = {"cached": [], "head": []}
for number in range(rounds):
    for kind in results:
        pair = {}
        for side in (("plain", "instrumented") if number % 2 == 0 else ("instrumented", "plain")):
            if side == "instrumented":
                otel_coldstart.instrument(start_at="instrument", summary=False, handle_sigterm=False)
            pair[side] = block(kind)
            otel_coldstart.uninstrument()
        results[kind].append(pair)
print(json.dumps(results))
