"""Where the interpreter's full garbage collection falls, with and without the plugin, and with
a control that adds objects and nothing else.

CPython runs a full (generation-2) collection when the objects that survived younger
collections since the last full one pass a quarter of the heap; with torch imported that is
~170,000 objects and ~100 ms. Anything that changes what a process allocated before (the
plugin's modules, the OTel API, another import, a different torch) moves the next one. Issue
24's warm 650 MB load + cast saw one land inside the window with the plugin and none
without: this benchmark says whether that is the plugin's work or the collector's schedule.

For each variant, in fresh processes on the warm checkpoint (benchmarks/_load_child.py):

- the headroom at the start of the load + cast: how many objects the process can still
  allocate before the next full collection starts (``BENCH_HEADROOM``; deterministic for a
  given process, so one run);
- ``--runs`` load + casts: their time and the full collections that ran inside them.

Variants: ``plain``; ``coldstart`` (``instrument()`` first, as in startup.py); and ``plain``
with ``BENCH_BALLAST=N`` empty lists made first, for each ``--ballast`` N: the control. If
the collection follows the headroom whichever made it small, and a ballast with the plugin's
headroom pays the same collection without any plugin code, the cost is the schedule's.

    python benchmarks/gc_phase.py [--runs 3] [--ballast 5000 10000 15000] [--smoke] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import common

CHILD = os.path.join(common.BENCH_DIR, "_load_child.py")


def _child(side: str, files: list[str], trace_dir: str, ballast: int = 0, headroom: bool = False) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "BENCH_")) and k != "TRACEPARENT"}
    env["OTEL_COLDSTART_OUTPUT_DIR"] = trace_dir
    if ballast:
        env["BENCH_BALLAST"] = str(ballast)
    if headroom:
        env["BENCH_HEADROOM"] = "1"
    done = subprocess.run([common.python(), CHILD, side, "safetensors", *files], env=env, capture_output=True,
                          text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"{side} child failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(files: list[str], runs: int, ballasts: list[int], log=sys.stderr) -> dict:
    variants = [("plain", "plain", 0), ("coldstart", "coldstart", 0)]
    variants += [(f"plain + {n:,} objects", "plain", n) for n in ballasts if n]
    rows = {name: {"side": side, "ballast": ballast, "work_s": [], "gc_full": [], "gc_full_s": []}
            for name, side, ballast in variants}
    with tempfile.TemporaryDirectory(prefix="otel-coldstart-gc-") as trace_dir:
        for name, side, ballast in variants:
            common.set_cache(files, "warm")
            rows[name]["headroom"] = _child(side, files, trace_dir, ballast, headroom=True)["headroom"]
        for number in range(runs):  # the variants interleaved, the order rotated each round
            for name, side, ballast in common.rotated(variants, number):
                common.set_cache(files, "warm")
                run = _child(side, files, trace_dir, ballast)
                rows[name]["work_s"].append(run["work_s"])
                rows[name]["gc_full"].append(run["gc_full_in_work"])
                rows[name]["gc_full_s"].append(run["gc_full_s"])
            if log:
                print(f"  round {number + 1}/{runs}", file=log, flush=True)
    return {"rows": rows}


def render(result: dict, out) -> None:
    out.write("Headroom: objects the process can still allocate at the start of the load + cast before the "
              "next full collection starts. Load + cast: median (min-max) of the runs; full collections: "
              "how many of the runs had one inside the window, and its median time.\n\n")
    out.write("| variant | headroom | load + cast | runs with a full collection inside | its time |\n"
              "|---|---:|---|---|---|\n")
    for name, row in result["rows"].items():
        work = common.summary(row["work_s"])
        hit = [s for n, s in zip(row["gc_full"], row["gc_full_s"]) if n]
        took = f"{statistics.median(hit) * 1e3:.0f} ms" if hit else "-"
        out.write(f"| {name} | {row['headroom']:,} | {common.fmt_seconds(work)} | {len(hit)} of {len(row['work_s'])} "
                  f"| {took} |\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="load + casts per variant (default 3)")
    parser.add_argument("--ballast", type=int, nargs="+", default=[5000, 10000, 15000],
                        help="objects the control variants allocate first (default 5000 10000 15000)")
    common.add_checkpoint_options(parser, "tiny checkpoint, 1 run, one ballast: checks it runs")
    args = parser.parse_args(argv)
    shape, checkpoint = common.checkpoint_for(args)
    ballasts = args.ballast[:1] if args.smoke else args.ballast
    return common.measure_and_finish(
        "gc_phase", args.smoke, lambda: measure(checkpoint.files("safetensors"), 1 if args.smoke else args.runs, ballasts),
        render, args.json, shape=shape.__dict__)


if __name__ == "__main__":
    sys.exit(main())
