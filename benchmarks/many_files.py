"""The plugin's cost per checkpoint file when a start-up reads many small files (issue 39
item 1): 2,000 safetensors files of 4 KiB, a per-layer or distributed checkpoint.

    python benchmarks/many_files.py [--pairs 3] [--files 2000] [--apis load_file safe_open]
                                    [--smoke] [--json OUT]

Alternated pairs of fresh processes (``_many_files_child.py``), the order swapped every pair:
``plain`` (nothing of the plugin imported) and ``coldstart`` (``instrument()`` first, the
embedded default exporter, ``ready()`` after the reads). The files are resident (read once
before the first pair). Per pair: the reads' wall time on each side, their difference per
file, and the ``own_cost_s`` the instrumented start-up reports about itself (set-up left
out: the reads' window holds none of it) against that difference. Medians over the pairs;
the machine is shared, so each pair's sides run back to back and only paired figures count.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

import common

CHILD = os.path.join(common.BENCH_DIR, "_many_files_child.py")


def prepare(root: str, files: int) -> str:
    """``files`` safetensors files of 4 KiB (one 4 KiB float32 tensor each, plus the header),
    and a listing of their paths; returns the listing's path."""
    import torch
    from safetensors.torch import save_file

    directory = os.path.join(root, f"many-files-{files}")
    os.makedirs(directory, exist_ok=True)
    listing = os.path.join(directory, "paths.txt")
    paths = []
    for number in range(files):
        path = os.path.join(directory, f"layer-{number:05d}.safetensors")
        if not os.path.exists(path):
            save_file({f"layers.{number}.weight": torch.full((1024,), float(number))}, path + ".tmp")
            os.replace(path + ".tmp", path)
        paths.append(path)
    with open(listing, "w", encoding="utf-8") as out:
        out.write("\n".join(paths) + "\n")
    common.set_cache(paths, "warm")
    return listing


def run_child(side: str, api: str, listing: str, output_dir: str) -> dict:
    # A fresh trace directory per start-up: earlier start-ups' traces there are a history the
    # in-flight monitor reads (a one-off cost, not a per-file one).
    output_dir = tempfile.mkdtemp(prefix="run-", dir=output_dir)
    env = dict(os.environ, OTEL_COLDSTART_OUTPUT_DIR=output_dir, OTEL_COLDSTART_SUMMARY="0")
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "TRACEPARENT"):
        env.pop(name, None)
    done = subprocess.run([common.python(), CHILD, side, api, listing], env=env, capture_output=True, text=True,
                          timeout=600)
    shutil.rmtree(output_dir, ignore_errors=True)
    if done.returncode != 0:
        raise RuntimeError(f"{side} {api}: exit {done.returncode}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(pairs: int, files: int, apis, root: str, output_dir: str, log=sys.stderr) -> dict:
    listing = prepare(root, files)
    cases = []
    for api in apis:
        run_child("coldstart", api, listing, output_dir)  # bytecode and page cache warm for both sides
        run_child("plain", api, listing, output_dir)
        rows = []
        for number in range(pairs):
            sides = {}
            for side in common.rotated(["plain", "coldstart"], number):
                sides[side] = run_child(side, api, listing, output_dir)
            plain, traced = sides["plain"], sides["coldstart"]
            own = traced.get("own_cost") or {}
            added = traced["load_s"] - plain["load_s"]
            # Inside the reads' window: the hooks' work on the host's thread and the CPU of the
            # plugin's threads (the span export), which holds the interpreter's lock meanwhile.
            own_in_window = sum(v for k, v in own.items() if k.startswith("coldstart.own_cost.phase.")) + \
                own.get("coldstart.own_cost.threads_cpu_s", 0.0)
            rows.append({"plain_s": plain["load_s"], "coldstart_s": traced["load_s"],
                         "ratio": traced["load_s"] / plain["load_s"], "added_per_file_us": added / files * 1e6,
                         "added_cpu_per_file_us": (traced["load_cpu_s"] - plain["load_cpu_s"]) / files * 1e6,
                         "own_in_window_s": own_in_window,
                         "own_over_added": own_in_window / added if added > 0 else None,
                         "own_cost": own, "startup_plain_s": plain["startup_s"],
                         "startup_coldstart_s": traced["startup_s"]})
            if log:
                print(f"  {api} pair {number + 1}: plain {plain['load_s']:.3f} s, coldstart {traced['load_s']:.3f} s, "
                      f"+{rows[-1]['added_per_file_us']:.0f} us/file, own {own_in_window:.3f} s", file=log, flush=True)
        cases.append({"api": api, "files": files, "pairs": rows,
                      "median_added_per_file_us": statistics.median(r["added_per_file_us"] for r in rows),
                      "median_added_cpu_per_file_us": statistics.median(r["added_cpu_per_file_us"] for r in rows),
                      "median_ratio": statistics.median(r["ratio"] for r in rows),
                      "median_own_over_added": statistics.median(r["own_over_added"] for r in rows
                                                                 if r["own_over_added"] is not None)
                      if any(r["own_over_added"] is not None for r in rows) else None})
    return {"files": files, "file_bytes": 4096, "cases": cases}


def render(result: dict, out) -> None:
    out.write(f"{result['files']} safetensors files of 4 KiB, resident; alternated fresh-process pairs\n\n")
    out.write("| api | pairs | plain reads, median | instrumented, median | ratio | added per file (wall) | "
              "added per file (thread CPU) | own_cost_s / measured difference |\n|---|---|---|---|---|---|---|---|\n")
    for case in result["cases"]:
        rows = case["pairs"]
        own = case["median_own_over_added"]
        out.write(f"| {case['api']} | {len(rows)} | {statistics.median(r['plain_s'] for r in rows):.3f} s | "
                  f"{statistics.median(r['coldstart_s'] for r in rows):.3f} s | {case['median_ratio']:.2f} | "
                  f"{case['median_added_per_file_us']:.0f} us | {case['median_added_cpu_per_file_us']:.0f} us | "
                  f"{'-' if own is None else f'{own:.2f}'} |\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--apis", nargs="*", default=["load_file", "safe_open"], choices=["load_file", "safe_open"])
    parser.add_argument("--smoke", action="store_true", help="20 files, 1 pair: checks it runs, not speed")
    parser.add_argument("--cache-root", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    pairs, files = (1, 20) if args.smoke else (args.pairs, args.files)
    root = args.cache_root or common.cache_root()
    output_dir = os.path.join(root, "many-files-traces")
    os.makedirs(output_dir, exist_ok=True)
    return common.measure_and_finish("many_files", args.smoke, lambda: measure(pairs, files, args.apis, root, output_dir),
                                     render, args.json)


if __name__ == "__main__":
    sys.exit(main())
