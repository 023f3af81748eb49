"""A model server's start-up, instrumented, that keeps serving its metrics until told to stop.

Run by the metrics tests in a fresh process (so the root span starts at a real process
start): ``python startup_app.py CHECKPOINT_DIR [ready|exit]``. It reads every shard of the
checkpoint with safetensors, copies the weights into an allocated CPU model
(``load_state_dict`` -> ``copy_``), casts it to float16 and runs a warm-up forward. Then,
with ``ready`` (the default), it calls ``ready()``, prints one JSON line (the Prometheus
endpoint, if any, and the root trace id) and serves until stdin closes (at most
``OTEL_COLDSTART_TEST_SERVE_S`` seconds); with ``exit`` it exits without ``ready()``.
Configuration comes from the standard OTEL_* environment variables the test sets.
"""

from __future__ import annotations

import json
import os
import select
import sys

import otel_coldstart

if __name__ == "__main__":  # the tests import TEST_SHAPE from here without instrumenting
    otel_coldstart.instrument(summary=False, handle_sigterm=False)

import torch  # noqa: E402  (imported after instrument(), as a real server would)
from safetensors.torch import load_file  # noqa: E402

from otel_coldstart import demo  # noqa: E402

TEST_SHAPE = demo.LlamaShape(vocab=1024, hidden=128, intermediate=256, layers=2, shards=3)


def main(checkpoint_dir: str, end: str = "ready") -> int:
    with otel_coldstart.phase("build_model"):
        model = demo.build_model(TEST_SHAPE).to_empty(device="cpu")
    # A server's own fetch step, named with phase("download") as the README says (the weights are
    # on local disk here: it lists what to load), so the dashboard's download panel has data.
    with otel_coldstart.phase("download"):
        shards = [name for name in sorted(os.listdir(checkpoint_dir)) if name.endswith(".safetensors")]
    state = {}
    for name in shards:
        state.update(load_file(os.path.join(checkpoint_dir, name)))
    model.load_state_dict(state)
    model.to(torch.float16)
    with otel_coldstart.phase("warmup"):
        tokens = torch.arange(8) % TEST_SHAPE.vocab
        hidden = model.model.embed_tokens(tokens).float()
        (hidden @ model.lm_head.weight.float().t()).sum().item()
    if end == "exit":  # a start-up that never becomes ready: recorded and exported at exit
        return 0
    otel_coldstart.ready()
    with otel_coldstart.first_request():  # the first request served: time to first token (a metric, a row)
        (hidden @ model.lm_head.weight.float().t()).sum().item()

    instrumentor = otel_coldstart.ColdstartInstrumentor()
    state_ = otel_coldstart.controller.CONTROLLER.startup
    address = state_.metrics.prometheus_address if state_ and state_.metrics else None
    root = instrumentor.session.root_context
    print(json.dumps({
        "metrics_url": f"http://{address[0]}:{address[1]}/metrics" if address else None,
        "trace_id": format(root.trace_id, "032x"),
    }), flush=True)
    serve_s = float(os.environ.get("OTEL_COLDSTART_TEST_SERVE_S", "120"))
    select.select([sys.stdin], [], [], serve_s)  # returns when the test closes our stdin
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
