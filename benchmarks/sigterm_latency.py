"""SIGTERM latency during a long C call: seconds from SIGTERM to exit while the main thread
is inside a 3000x3000 float64 ``torch.linalg.svd`` (about 19 s on one thread of the dev VM),
without the plugin and with it (embedded default exporter, the SVD inside a ``phase()``).

Pairs alternate plain / instrumented (order swapped every pair); SIGTERM is sent 0.5 s after
the child says the SVD starts. A Python-level handler would wait for the SVD to return.

    .venv/bin/python benchmarks/sigterm_latency.py --pairs 10
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import sys
mode = sys.argv[1]
if mode == "plugin":
    import otel_coldstart
    otel_coldstart.instrument()
import torch
torch.set_num_threads(1)
a = torch.randn(3000, 3000, dtype=torch.float64)
print("GO", flush=True)
if mode == "plugin":
    with otel_coldstart.phase("decompose"):
        torch.linalg.svd(a)
else:
    torch.linalg.svd(a)
"""


def one(mode: str, workdir: str) -> dict:
    env = dict(os.environ, OTEL_COLDSTART_OUTPUT_DIR=os.path.join(workdir, "traces"), OTEL_COLDSTART_SUMMARY="0")
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    proc = subprocess.Popen([sys.executable, "-c", CHILD, mode], env=env, cwd=workdir, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout.readline().strip() == "GO"
        time.sleep(0.5)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        return {"mode": mode, "exit_s": time.monotonic() - sent, "returncode": proc.returncode}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    runs = []
    with tempfile.TemporaryDirectory(prefix="sigterm-latency-") as workdir:
        for index in range(args.pairs):
            order = ("plain", "plugin") if index % 2 == 0 else ("plugin", "plain")
            pair = {mode: one(mode, workdir) for mode in order}
            runs.append(pair)
    plain = [p["plain"]["exit_s"] for p in runs]
    plugin = [p["plugin"]["exit_s"] for p in runs]
    diffs = [p["plugin"]["exit_s"] - p["plain"]["exit_s"] for p in runs]
    summary = {
        "pairs": len(runs),
        "plain_exit_s_median": statistics.median(plain), "plain_exit_s_max": max(plain),
        "plugin_exit_s_median": statistics.median(plugin), "plugin_exit_s_max": max(plugin),
        "difference_s_median": statistics.median(diffs), "difference_s_max": max(diffs),
        "statuses": sorted({p[m]["returncode"] for p in runs for m in p}),
    }
    try:
        with open("/proc/loadavg", encoding="ascii") as handle:
            summary["loadavg"] = handle.read().strip()
    except OSError:
        pass
    print(json.dumps(summary, indent=2))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"summary": summary, "runs": runs}, handle, indent=1)
    return 0 if summary["statuses"] == [-signal.SIGTERM] else 1


if __name__ == "__main__":
    sys.exit(main())
