"""A start-up that takes its time, for watching it in flight: ``python inflight_app.py DIR``.

It instruments (serving its metrics for Prometheus where the OTEL_* variables say), prints
one JSON line with its Prometheus endpoint and waits for a line on stdin ("go"), then in
``phase("load")`` reads every shard of
the checkpoint with safetensors, one every ``OTEL_COLDSTART_TEST_SHARD_PAUSE_S`` seconds,
and in ``phase("warmup")`` waits until a line (or EOF) arrives on stdin; then ``ready()``,
prints ``READY`` and waits for EOF before exiting (so a scrape can see the gauges gone).
"""

from __future__ import annotations

import json
import os
import sys
import time

import otel_coldstart

otel_coldstart.instrument(summary=False, handle_sigterm=False)

from safetensors.torch import load_file  # noqa: E402  (after instrument(), as a server would)


def main(checkpoint_dir: str) -> int:
    state = otel_coldstart.controller.CONTROLLER.startup
    address = state.metrics.prometheus_address if state and state.metrics else None
    print(json.dumps({"metrics_url": f"http://{address[0]}:{address[1]}/metrics" if address else None}), flush=True)
    pause = float(os.environ.get("OTEL_COLDSTART_TEST_SHARD_PAUSE_S", "1.5"))
    sys.stdin.readline()  # go
    with otel_coldstart.phase("load"):
        for name in sorted(os.listdir(checkpoint_dir)):
            if name.endswith(".safetensors"):
                load_file(os.path.join(checkpoint_dir, name))
                time.sleep(pause)
    with otel_coldstart.phase("warmup"):
        print("WARMUP", flush=True)
        sys.stdin.readline()
    otel_coldstart.ready()
    print("READY", flush=True)
    sys.stdin.read()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
