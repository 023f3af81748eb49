"""Run every overhead benchmark and write one markdown report plus the raw JSON.

    python benchmarks/run_all.py --out DIR [--smoke]

Writes DIR/report.md (machine, versions, load average before and after, every table) and
DIR/<benchmark>.json (every run). Without --smoke this takes about 15-25 minutes on 2 cores
and generates ~3 GiB of checkpoints under ~/.cache/otel-coldstart/bench (or --cache-root).
The analyzer-scale benchmark (benchmarks/analyzer_scale.py) is run on its own.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time

import common
import floor_bench
import per_call
import per_file
import span_volume
import startup


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="directory for report.md and the JSON files (created)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, few pairs: checks it all runs")
    parser.add_argument("--cache-root", default=None, help="where generated checkpoints are kept")
    parser.add_argument("--pairs", type=int, default=15, help="start-up rounds per format and cache state")
    parser.add_argument("--only", nargs="*", default=None,
                        choices=["startup", "per_call", "per_file", "span_volume", "floor"], help="run only these")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    smoke = ["--smoke"] if args.smoke else []
    cache = ["--cache-root", args.cache_root] if args.cache_root else []
    plan = [
        ("startup", "Start-up overhead, peer and peak memory", startup, smoke + cache + ["--pairs", str(args.pairs)]),
        ("per_call", "Per-call cost of the tensor hooks", per_call, smoke),
        ("per_file", "Per-file cost of the checkpoint-file hooks", per_file, smoke + cache),
        ("span_volume", "Span volume as tensors grow", span_volume, smoke + cache),
        ("floor", "Storage floor: plain read(2)", floor_bench, smoke + cache),
    ]
    report = io.StringIO()
    report.write(f"# otel-coldstart overhead benchmarks{' (smoke run: sizes too small to mean anything)' if args.smoke else ''}\n\n")
    report.write(f"Started {common.stamp()}, load average (1/5/15 min) {common.load_average()}\n\n")
    report.write("Machine and versions:\n\n```\n" + json.dumps(common.machine(), indent=1) + "\n```\n\n")
    failed = []
    for name, title, module, module_args in plan:
        if args.only and name not in args.only:
            continue
        began = time.perf_counter()
        load_before = common.load_average()
        json_path = os.path.join(args.out, f"{name}.json")
        print(f"[{name}] {title}", file=sys.stderr, flush=True)
        captured = io.StringIO()
        real_stdout, sys.stdout = sys.stdout, captured
        try:
            code = module.main(module_args + ["--json", json_path])
        finally:
            sys.stdout = real_stdout
        if code:
            failed.append(name)
        report.write(f"## {title}\n\n")
        report.write(f"`python benchmarks/{module.__name__}.py {' '.join(module_args)}`: "
                     f"{time.perf_counter() - began:.0f} s, load average {load_before} -> {common.load_average()}\n\n")
        report.write(captured.getvalue() + "\n")
    report.write(f"Finished {common.stamp()}, load average {common.load_average()}\n")
    with open(os.path.join(args.out, "report.md"), "w", encoding="utf-8") as handle:
        handle.write(report.getvalue())
    sys.stdout.write(report.getvalue())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
