"""What the plugin adds to a download's wall time (issue 37: at most 1%).

The real ``huggingface_hub`` client fetches one file from the test hub
(tests/frameworks/_hub_server.py) on 127.0.0.1 into an empty ``HF_HOME``, in a fresh
process per run: ``plain`` (otel_coldstart never imported) and ``instrumented``
(instrument() first: the file's span, its HEAD's span, the transfer's counters), alternated
(A B, B A, ...). Two links: ``link`` throttles the server to 100 MB/s per connection (a
download as a node sees one), ``loopback`` serves as fast as the two processes can move
bytes (the worst case for a fixed per-file cost: the smallest denominator). The figure is
the median (and range) of the per-pair ratios of the timed ``hf_hub_download`` call.

On a loaded machine those ratios swing by tens of percent, far above the 1% in question, so
the hooks' own cost is also measured directly, in one process (``_download_hooks.py``):
alternated blocks of calls with and without instrument(), per call, for a file's span (a
cached file: no request) and a metadata request's span (a HEAD). A download's added time is
at most one file span plus its requests' spans (nothing is done per byte or per chunk).

    python benchmarks/download_overhead.py [--pairs 10] [--mib 128] [--smoke] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "frameworks"))

from _hub_server import HubServer, Repo  # noqa: E402
from common import fmt_ratio, fmt_seconds, measure_and_finish, paired_ratios, rotated, summary  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = os.path.join(HERE, "_download_child.py")
HOOKS = os.path.join(HERE, "_download_hooks.py")
SIDES = ["plain", "instrumented"]
REPO_ID = "bench/weights"
LINKS = {"link": 100e6, "loopback": None}


def run_once(endpoint: str, side: str, home: str) -> float:
    shutil.rmtree(home, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(HF_ENDPOINT=endpoint, HF_HUB_OFFLINE="0", HF_HOME=home, HF_HUB_DISABLE_PROGRESS_BARS="1",
               OTEL_COLDSTART_SUMMARY="0", OTEL_COLDSTART_OUTPUT_DIR=os.path.join(home, "traces"))
    done = subprocess.run([sys.executable, CHILD, side, REPO_ID, "weights.bin"], env=env, capture_output=True,
                          text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])["seconds"]


def hook_costs(repo: Repo, work: str, rounds: int, calls: int) -> dict:
    """Per call, instrumented minus plain, within each alternated pair of blocks (microseconds):
    a cached file's span (no request) and one metadata request's span (a HEAD)."""
    with HubServer({REPO_ID: repo}, max_requests=10_000_000) as hub:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        env.update(HF_HUB_OFFLINE="0", HF_HUB_DISABLE_PROGRESS_BARS="1", OTEL_COLDSTART_SUMMARY="0",
                   OTEL_COLDSTART_OUTPUT_DIR=os.path.join(work, "hook-traces"))
        done = subprocess.run([sys.executable, HOOKS, hub.endpoint, os.path.join(work, "hook-cache"), repo.commit,
                               str(rounds), str(calls)], env=env, capture_output=True, text=True, timeout=1200)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    raw = json.loads(done.stdout.strip().splitlines()[-1])
    return {kind: {"added_us": summary([(p["instrumented"] - p["plain"]) * 1e6 for p in pairs]),
                   "plain_us": summary([p["plain"] * 1e6 for p in pairs])}
            for kind, pairs in raw.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--mib", type=int, default=128)
    parser.add_argument("--smoke", action="store_true", help="2 pairs of a 4 MiB file: that it runs")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    pairs, mib = (2, 4) if args.smoke else (args.pairs, args.mib)
    repo = Repo({"config.json": b"{}", "weights.bin": os.urandom(mib << 20)})

    def measured() -> dict:
        result: dict = {"file_bytes": mib << 20, "pairs": pairs, "links": {}}
        work = tempfile.mkdtemp(prefix="download-bench-")
        try:
            for link, rate in LINKS.items():
                rounds = []
                with HubServer({REPO_ID: repo}, bytes_per_s=rate, max_requests=100_000) as hub:
                    for number in range(pairs):
                        rounds.append({side: run_once(hub.endpoint, side, os.path.join(work, side))
                                       for side in rotated(SIDES, number)})
                result["links"][link] = {
                    "bytes_per_s": rate,
                    "seconds": {side: summary([r[side] for r in rounds]) for side in SIDES},
                    "ratio": summary(paired_ratios(rounds, "instrumented", "plain", lambda s: s)),
                }
            result["hooks"] = hook_costs(repo, work, rounds=2 if args.smoke else 10, calls=20 if args.smoke else 200)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return result

    return measure_and_finish("download_overhead", args.smoke, measured, _render, args.json)


def _render(result: dict, out) -> None:
    out.write(f"download of {result['file_bytes'] >> 20} MiB, {result['pairs']} alternated pairs\n")
    for link, figures in result["links"].items():
        out.write(f"  {link:<9} plain {fmt_seconds(figures['seconds']['plain'])}, instrumented "
                  f"{fmt_seconds(figures['seconds']['instrumented'])}, ratio {fmt_ratio(figures['ratio'])}\n")
    for kind, figures in result.get("hooks", {}).items():
        added, plain = figures["added_us"], figures["plain_us"]
        out.write(f"  hooks, {kind:<6}: +{added['median']:.0f} us per call ({added['min']:.0f} to {added['max']:.0f}) "
                  f"on {plain['median']:.0f} us\n")


if __name__ == "__main__":
    sys.exit(main())
