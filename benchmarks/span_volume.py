"""Spans per start-up as the tensor count grows: it must stay flat in tensors and grow only
with shards and phases.

    python benchmarks/span_volume.py [--pairs N] [--smoke] [--json OUT]

For each checkpoint (narrow Llama shapes with 200, 2,000 and 20,000 tensors in 4 shards, and
2,000 tensors in 8 shards) a fresh instrumented process (benchmarks/_load_child.py, side
``coldstart``, embedded default exporter) loads it through safe_open and through torch.load,
assigns and casts it; the spans are counted in the OTLP JSON file it wrote. The same runs,
paired with uninstrumented ones, also give the overhead ratio as tensors grow, which is
where a per-call cost would show.
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import sys
import tempfile

import common
from otel_coldstart import demo, semconv
from otel_coldstart.analyze.readers import read_trace_file
from startup import run_child

NARROW = dict(vocab=256, hidden=32, intermediate=64)


def shapes(smoke: bool) -> list[demo.LlamaShape]:
    """tensors = 9 * layers + 3."""
    if smoke:
        return [demo.LlamaShape(layers=2, shards=4, **NARROW), demo.LlamaShape(layers=22, shards=4, **NARROW)]
    return [demo.LlamaShape(layers=22, shards=4, **NARROW), demo.LlamaShape(layers=222, shards=4, **NARROW),
            demo.LlamaShape(layers=2222, shards=4, **NARROW), demo.LlamaShape(layers=222, shards=8, **NARROW)]


def count_spans(trace_dir: str) -> collections.Counter:
    files = glob.glob(os.path.join(trace_dir, "*.otlp.jsonl"))
    if len(files) != 1:
        raise RuntimeError(f"expected one trace file in {trace_dir}, found {len(files)}")
    # Imports after instrument() (patches/imports.py) are left out: whether a lazy import gets a
    # span depends on how long it took, not on the checkpoint.
    return collections.Counter(span.name for span in read_trace_file(files[0])
                               if semconv.IMPORT_MODULES not in span.attributes)


def measure(shape_list, pairs: int, cache_root: str | None, log=sys.stderr) -> dict:
    rows = []
    for shape in shape_list:
        checkpoint = common.prepare_checkpoint(shape, cache_root)
        for fmt in ("safetensors", "bin"):
            files = checkpoint.files(fmt)
            common.set_cache(files, "warm")
            names = None
            rounds = []
            for number in range(pairs):
                runs = {}
                for side in common.rotated(["plain", "coldstart"], number):
                    with tempfile.TemporaryDirectory(prefix="otel-coldstart-spans-") as trace_dir:
                        runs[side] = run_child(side, fmt, files, trace_dir)
                        if side == "coldstart":
                            counted = count_spans(trace_dir)
                            if names is not None and counted != names:
                                raise RuntimeError(f"span counts differ between runs: {names} vs {counted}")
                            names = counted
                rounds.append(runs)
            row = {
                "tensors": checkpoint.tensors, "shards": shape.shards, "format": fmt,
                "spans": sum(names.values()), "by_name": dict(sorted(names.items())),
                "coldstart_over_plain_region": common.summary(
                    common.paired_ratios(rounds, "coldstart", "plain", lambda r: r["region_s"])),
                "coldstart_minus_plain_region_ms": common.summary(
                    [(r["coldstart"]["region_s"] - r["plain"]["region_s"]) * 1e3 for r in rounds]),
                "plain_region_s": common.summary([r["plain"]["region_s"] for r in rounds]),
            }
            rows.append(row)
            if log:
                print(f"  {checkpoint.tensors} tensors / {shape.shards} shards / {fmt}: {row['spans']} spans",
                      file=log, flush=True)
    return {"rows": rows}


def render(result: dict, out) -> None:
    out.write("| tensors | shards | format | spans | spans by name | plain load+cast | coldstart - plain "
              "(load+cast+ready) | ratio |\n|---|---|---|---|---|---|---|---|\n")
    for row in result["rows"]:
        by_name = ", ".join(f"{name} {count}" for name, count in row["by_name"].items())
        added = row["coldstart_minus_plain_region_ms"]
        out.write(f"| {row['tensors']} | {row['shards']} | {row['format']} | {row['spans']} | {by_name} "
                  f"| {common.fmt_seconds(row['plain_region_s'])} "
                  f"| {added['median']:+.0f} ms ({added['min']:+.0f} to {added['max']:+.0f}) "
                  f"| {common.fmt_ratio(row['coldstart_over_plain_region'])} |\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=5, help="plain/coldstart pairs per checkpoint (default 5)")
    parser.add_argument("--smoke", action="store_true", help="tiny checkpoints, 1 pair: checks it runs")
    parser.add_argument("--cache-root", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    result = measure(shapes(args.smoke), 1 if args.smoke else args.pairs, args.cache_root)
    result.update({"benchmark": "span_volume", "smoke": args.smoke, "when": common.stamp()})
    render(result, sys.stdout)
    if args.json:
        common.write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
