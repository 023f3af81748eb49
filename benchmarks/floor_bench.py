"""The storage floor for the benchmark checkpoint: the same bytes with plain read(2), cold and
warm, so that the loaders' throughput can be put against what the storage delivers.

    python benchmarks/floor_bench.py [--repeats N] [--smoke] [--json OUT]

This is ``otel-coldstart floor`` (otel_coldstart/floor.py) run on the safetensors shards and
on the torch .bin, the cold and warm reads alternating; then, for reference, a few plain
(uninstrumented) fresh-process loads of each format in each state, with the checkpoint bytes
over two times: the read call alone (safe_open/get_tensor, or torch.load) and read + assign +
cast. safetensors maps the file and get_tensor returns tensors over the mapping, so its bytes
are mostly read later, on first touch (in the cast): only the second figure compares.
"""

from __future__ import annotations

import argparse
import sys
import tempfile

import common
from otel_coldstart import floor
from startup import run_child


def measure(checkpoint: common.Checkpoint, repeats: int, loader_runs: int) -> dict:
    rows = []
    for fmt in ("safetensors", "bin"):
        files = checkpoint.files(fmt)
        load_before = common.load_average()
        result = floor.measure(files, repeats=repeats)
        loader = {}
        with tempfile.TemporaryDirectory(prefix="otel-coldstart-floor-") as trace_dir:
            for state in ("cold", "warm"):
                runs = []
                for _ in range(loader_runs):
                    common.set_cache(files, state)
                    runs.append(run_child("plain", fmt, files, trace_dir))
                loader[state] = {key: common.summary([result.total_bytes / r[key] for r in runs])
                                 for key in ("load_s", "region_s")}
        rows.append({
            "format": fmt, "bytes": result.total_bytes, "floor": result.to_json(),
            "floor_bytes_per_s": {s: common.summary([result.total_bytes / t for t in r.seconds])
                                  for s, r in result.states.items()},
            "loader_bytes_per_s": loader,
            "load_average_before": load_before, "load_average_after": common.load_average(),
        })
    return {"rows": rows}


def _rate(s: dict) -> str:
    if not s.get("n"):
        return "n/a"
    return f"{floor.format_rate(s['median'])} ({floor.format_rate(s['min'])}-{floor.format_rate(s['max'])})"


def _share(rate: dict, floor_rate: dict) -> str:
    if not rate.get("n") or not floor_rate.get("median"):
        return "n/a"
    return f"{rate['median'] / floor_rate['median']:.2f}"


def render(result: dict, out) -> None:
    out.write("| format | bytes | cache | read(2) floor | plain loader: read call | read call / floor "
              "| plain loader: read + assign + cast | that / floor | load avg before -> after |\n"
              "|---|---|---|---|---|---|---|---|---|\n")
    for row in result["rows"]:
        for state in ("cold", "warm"):
            floor_rate = row["floor_bytes_per_s"][state]
            read_rate = row["loader_bytes_per_s"][state]["load_s"]
            region_rate = row["loader_bytes_per_s"][state]["region_s"]
            note = ""
            if state == "cold":
                resident = [r for r in row["floor"]["cold"]["resident_after_evict"] if r is not None]
                if not row["floor"]["cold"]["evicted"]:
                    note = " (eviction refused: not cold)"
                elif resident and max(resident) > 0.01:
                    note = f" (up to {max(resident):.0%} resident after eviction)"
            out.write(f"| {row['format']} | {row['bytes'] / (1 << 20):.0f} MiB | {state}{note} | {_rate(floor_rate)} "
                      f"| {_rate(read_rate)} | {_share(read_rate, floor_rate)} "
                      f"| {_rate(region_rate)} | {_share(region_rate, floor_rate)} "
                      f"| {row['load_average_before']} -> {row['load_average_after']} |\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7, help="floor reads per state (default 7)")
    parser.add_argument("--loader-runs", type=int, default=3, help="plain loads per format and state (default 3)")
    parser.add_argument("--smoke", action="store_true", help="tiny checkpoint: checks it runs")
    parser.add_argument("--cache-root", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    shape = common.SMOKE_SHAPE if args.smoke else common.FULL_SHAPE
    checkpoint = common.prepare_checkpoint(shape, args.cache_root)
    repeats, loader_runs = (2, 1) if args.smoke else (args.repeats, args.loader_runs)
    result = measure(checkpoint, repeats, loader_runs)
    result.update({"benchmark": "floor", "smoke": args.smoke, "shape": shape.__dict__, "when": common.stamp()})
    render(result, sys.stdout)
    if args.json:
        common.write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
