"""Where the instrumented warm load + cast spends the time the plain one does not (issue 24).

startup.py gives the ratio of the two windows; this says who spent the difference. For each
alternated pair of fresh processes (benchmarks/_load_child.py, ``plain`` and ``coldstart`` on
the warm 650 MB checkpoint, the order rotated each round) it takes, inside the load + cast:

- the CPU of each group of threads (``/proc/self/task/*/schedstat``, exact to the ns): the
  host's main thread, torch's intra-op threads, the other Python threads (the plugin's
  in-flight monitor, export and SIGTERM threads) and threads that began and ended inside the
  window (the plugin's short-lived export threads);
- the garbage collector's time: young (generation 0 and 1) collections, and the full ones
  with how many windows had one (their place is the collector's schedule: gc_phase.py).

It prints, per side, the medians, and for each component the median of the paired
differences (coldstart minus plain) in ms and as a share of the plain window: the part the
plugin's own threads and the collector explain, and what is left on the host's and torch's
threads.

    python benchmarks/window_attribution.py [--pairs 15] [--smoke] [--json OUT]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile

import common
import gc_phase

SIDES = ["plain", "coldstart"]
COMPONENTS = [  # (key, label): what each row of the table is
    ("work_s", "load + cast (wall)"),
    ("work_cpu_s", "CPU, all threads"),
    ("main", "CPU, host's main thread"),
    ("torch", "CPU, torch's threads"),
    ("other_python", "CPU, other Python threads (the plugin's)"),
    ("ended", "CPU, threads begun and ended inside"),
    ("gc_young_s", "young collections (gen 0+1)"),
    ("gc_full_s", "full collections (gen 2)"),
]


def _component(run: dict, key: str) -> float | None:
    threads = run.get("threads_cpu_s")
    if key in ("main", "torch", "other_python", "ended"):
        return threads.get(key) if threads else None
    return run.get(key)


def measure(files: list[str], pairs: int, log=sys.stderr) -> dict:
    runs = {side: [] for side in SIDES}
    with tempfile.TemporaryDirectory(prefix="otel-coldstart-attr-") as trace_dir:
        for number in range(pairs):
            for side in common.rotated(SIDES, number):
                common.set_cache(files, "warm")
                runs[side].append(gc_phase._child(side, files, trace_dir))
            if log:
                print(f"  pair {number + 1}/{pairs}", file=log, flush=True)
    return {"runs": runs}


def summarise(runs: dict) -> list[dict]:
    """One row per component: each side's median, and the median paired difference."""
    plain_window = statistics.median(run["work_s"] for run in runs["plain"])
    rows = []
    for key, label in COMPONENTS:
        values = {side: [_component(run, key) for run in runs[side]] for side in SIDES}
        if any(value is None for side in SIDES for value in values[side]):
            continue  # no schedstat on this kernel
        differences = [c - p for p, c in zip(values["plain"], values["coldstart"])]
        difference = statistics.median(differences)
        rows.append({"component": key, "label": label,
                     "plain_ms": 1e3 * statistics.median(values["plain"]),
                     "coldstart_ms": 1e3 * statistics.median(values["coldstart"]),
                     "difference_ms": 1e3 * difference, "share_of_plain": difference / plain_window})
    return rows


def render(result: dict, out) -> None:
    runs = result["runs"]
    full = {side: sum(1 for run in runs[side] if run["gc_full_in_work"]) for side in SIDES}
    out.write(f"{len(runs['plain'])} alternated pairs; windows with a full collection inside: "
              f"plain {full['plain']}, coldstart {full['coldstart']}.\n\n")
    out.write("| component | plain ms | coldstart ms | paired difference ms | share of the plain window |\n"
              "|---|---:|---:|---:|---:|\n")
    for row in summarise(runs):
        out.write(f"| {row['label']} | {row['plain_ms']:.1f} | {row['coldstart_ms']:.1f} | "
                  f"{row['difference_ms']:+.1f} | {100 * row['share_of_plain']:+.1f}% |\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=15, help="alternated plain/coldstart pairs (default 15)")
    common.add_checkpoint_options(parser, "tiny checkpoint, 1 pair: checks it runs")
    args = parser.parse_args(argv)
    shape, checkpoint = common.checkpoint_for(args)

    def measured() -> dict:
        result = measure(checkpoint.files("safetensors"), 1 if args.smoke else args.pairs)
        return {**result, "summary": summarise(result["runs"])}

    return common.measure_and_finish("window_attribution", args.smoke, measured, render, args.json, shape=shape.__dict__)


if __name__ == "__main__":
    sys.exit(main())
