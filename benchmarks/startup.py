"""Start-up overhead, the torch.profiler peer, and peak memory, in fresh processes.

    python benchmarks/startup.py [--pairs N] [--smoke] [--json OUT]

Each run is a new Python process (benchmarks/_load_child.py) that loads the generated
checkpoint, assigns it into a model built on the meta device and casts it bf16 -> fp16:
- ``plain``: nothing else;
- ``coldstart``: ``otel_coldstart.instrument()`` first, the embedded default exporter (the
  OTLP JSON file under a temporary directory, with the end-of-start-up summary on stderr),
  ``ready()`` after the cast;
- ``profiler``: the load and cast inside ``torch.profiler.profile()`` (CPU activities).
For each format (4 safetensors shards, one torch .bin) and cache state (warm: files read
just before each run; cold: evicted with posix_fadvise(DONTNEED) just before each run) the
three sides run once per round, the order rotated each round, and each side is divided by
the plain run of the same round. Two times are kept per run: ``process`` (spawn to exit, as
measured by this parent: what a user waits) and ``region`` (load + cast [+ ready()], inside
the child: the patches' cost without the interpreter and import around it).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import common

SIDES = ["plain", "coldstart", "profiler"]
FORMATS = ["safetensors", "bin"]
CACHE_STATES = ["warm", "cold"]
CHILD = os.path.join(common.BENCH_DIR, "_load_child.py")


def run_child(side: str, fmt: str, files: list[str], trace_dir: str, gc_phase: str = "as-is") -> dict:
    env = dict(os.environ)
    env.pop("BENCH_BALLAST", None)
    env.pop("BENCH_HEADROOM", None)
    if gc_phase == "aligned":
        env["BENCH_GC_PHASE"] = "aligned"
    else:
        env.pop("BENCH_GC_PHASE", None)
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "TRACEPARENT"):
        env.pop(name, None)
    env["OTEL_COLDSTART_OUTPUT_DIR"] = trace_dir
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    spawned_wall = time.time()
    began = time.perf_counter()
    completed = subprocess.run([common.python(), CHILD, side, fmt, *files], env=env,
                               capture_output=True, text=True)
    process_s = time.perf_counter() - began
    exited_wall = time.time()
    children_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if completed.returncode != 0:
        raise RuntimeError(f"{side}/{fmt} child failed ({completed.returncode}):\n{completed.stderr[-3000:]}")
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    result["process_s"] = process_s
    # Spawn to ready() returned (plain: to the end of the cast): the start-up as an autoscaler
    # waits for it, without the exit (the summary printed after ready(), teardown).
    result["to_ready_s"] = result["done_wall"] - spawned_wall
    result["exit_tail_s"] = exited_wall - result["done_wall"]
    # CPU the child used (user + system): less disturbed by other tenants than wall time,
    # quoted next to it, never instead of it.
    result["cpu_s"] = ((children_after.ru_utime - children_before.ru_utime)
                       + (children_after.ru_stime - children_before.ru_stime))
    return result


def measure(checkpoint: common.Checkpoint, pairs: int, formats=FORMATS, states=CACHE_STATES,
            sides=SIDES, log=sys.stderr, gc_phase: str = "as-is") -> dict:
    blocks = []
    with tempfile.TemporaryDirectory(prefix="otel-coldstart-bench-") as trace_dir:
        for fmt in formats:
            files = checkpoint.files(fmt)
            for state in states:
                load_before = common.load_average()
                rounds = []
                for number in range(pairs):
                    runs = {}
                    for side in common.rotated(list(sides), number):
                        resident = common.set_cache(files, state)
                        run = run_child(side, fmt, files, trace_dir, gc_phase)
                        run["resident_before"] = resident
                        runs[side] = run
                    rounds.append(runs)
                    if log:
                        print(f"  {fmt:<11} {state} round {number + 1}/{pairs}: "
                              + "  ".join(f"{s} {runs[s]['process_s']:.2f}s" for s in sides), file=log, flush=True)
                blocks.append(analyse_block(fmt, state, rounds, sides, load_before, common.load_average()))
    return {"blocks": blocks, "gc_phase": gc_phase}


def analyse_block(fmt: str, state: str, rounds: list[dict], sides, load_before, load_after) -> dict:
    block = {"format": fmt, "cache": state, "pairs": len(rounds), "load_average_before": load_before,
             "load_average_after": load_after, "sides": {}, "ratios": {}, "rss_added_mib": {}, "rounds": rounds}
    for side in sides:
        runs = [r[side] for r in rounds]
        block["sides"][side] = {
            "process_s": common.summary([r["process_s"] for r in runs]),
            "to_ready_s": common.summary([r["to_ready_s"] for r in runs]),
            "region_s": common.summary([r["region_s"] for r in runs]),
            "work_s": common.summary([r["work_s"] for r in runs]),
            "load_s": common.summary([r["load_s"] for r in runs]),
            "cpu_s": common.summary([r["cpu_s"] for r in runs]),
            "exit_tail_s": common.summary([r["exit_tail_s"] for r in runs]),
            "maxrss_mib": common.summary([r["maxrss_kib"] / 1024 for r in runs]),
            "gc_full_in_work": sum(r.get("gc_full_in_work", 0) for r in runs),
            "gc_full_s": common.summary([r.get("gc_full_s", 0.0) for r in runs]),
        }
        if side == "profiler":
            block["sides"][side]["first_profile_s"] = common.summary([r["first_profile_s"] for r in runs])
        if side == "coldstart":
            for key in ("instrument_s", "ready_s"):
                block["sides"][side][key] = common.summary([r[key] for r in runs])
            # The fixed cost on the host's thread: import + instrument() + ready(), wall and CPU.
            block["sides"][side]["fixed_s"] = common.summary([r["instrument_s"] + r["ready_s"] for r in runs])
            block["sides"][side]["fixed_cpu_s"] = common.summary(
                [r["instrument_cpu_s"] + r["ready_cpu_s"] for r in runs])
    for side in sides:
        if side == "plain":
            continue
        block["ratios"][side] = {
            "process": common.summary(common.paired_ratios(rounds, side, "plain", lambda r: r["process_s"])),
            "to_ready": common.summary(common.paired_ratios(rounds, side, "plain", lambda r: r["to_ready_s"])),
            "region": common.summary(common.paired_ratios(rounds, side, "plain", lambda r: r["region_s"])),
            "work": common.summary(common.paired_ratios(rounds, side, "plain", lambda r: r["work_s"])),
            # The same with the full collections that ran inside it taken out of both sides: what
            # the window's own work costs, whichever side the collector's schedule hit.
            "work_without_full_gc": common.summary(common.paired_ratios(
                rounds, side, "plain", lambda r: r["work_s"] - r.get("gc_full_s", 0.0))),
            "work_cpu": common.summary(common.paired_ratios(rounds, side, "plain", lambda r: r["work_cpu_s"])),
            "cpu": common.summary(common.paired_ratios(rounds, side, "plain", lambda r: r["cpu_s"])),
        }
        block["added_s"] = block.get("added_s", {})
        block["added_s"][side] = common.summary([r[side]["process_s"] - r["plain"]["process_s"] for r in rounds])
        block.setdefault("exit_tail_added_s", {})[side] = common.summary(
            [r[side]["exit_tail_s"] - r["plain"]["exit_tail_s"] for r in rounds])
        block["rss_added_mib"][side] = common.summary(
            [(r[side]["maxrss_kib"] - r["plain"]["maxrss_kib"]) / 1024 for r in rounds])
        if side == "profiler":
            # With the first profile()'s set-up (inductor import) counted inside the region.
            block["ratios"][side]["region_with_first_profile"] = common.summary(common.paired_ratios(
                rounds, side, "plain", lambda r: r["region_s"] + (r["first_profile_s"] or 0.0)))
    return block


def render(result: dict, checkpoint: common.Checkpoint, out) -> None:
    out.write(f"Checkpoint: {checkpoint.tensors} tensors, {checkpoint.weight_bytes / (1 << 30):.2f} GiB bf16 "
              f"({checkpoint.directory}). Ratios: median (min-max) over rounds of the side's time divided by "
              f"the plain run's time in the same round.\n\n")
    out.write("otel-coldstart (embedded default exporter) vs plain:\n\n")
    out.write("| format | cache | pairs | plain process wall | coldstart/plain process wall | added wall "
              "| coldstart/plain load+cast region | coldstart/plain process CPU | import+instrument() "
              "| ready() | load avg before -> after |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
    for block in result["blocks"]:
        ratios = block["ratios"].get("coldstart", {})
        side = block["sides"].get("coldstart", {})
        added = block.get("added_s", {}).get("coldstart", {})
        out.write(f"| {block['format']} | {block['cache']} | {block['pairs']} "
                  f"| {common.fmt_seconds(block['sides']['plain']['process_s'])} "
                  f"| {common.fmt_ratio(ratios.get('process', {}))} | {_fmt_signed_s(added)} "
                  f"| {common.fmt_ratio(ratios.get('region', {}))} | {common.fmt_ratio(ratios.get('cpu', {}))} "
                  f"| {common.fmt_seconds(side.get('instrument_s', {}))} | {common.fmt_seconds(side.get('ready_s', {}))} "
                  f"| {block['load_average_before']} -> {block['load_average_after']} |\n")
    out.write("\nWhere otel-coldstart's time goes, measured inside the instrumented process (medians, "
              "min-max): the fixed costs, as a share of the plain process wall of the same block.\n\n")
    out.write("| format | cache | import+instrument() | ready() | exit tail added vs plain | sum | sum / plain process "
              "wall |\n|---|---|---|---|---|---|---|\n")
    for block in result["blocks"]:
        side = block["sides"].get("coldstart")
        if not side:
            continue
        tail = block.get("exit_tail_added_s", {}).get("coldstart", {})
        parts = [side["instrument_s"].get("median"), side["ready_s"].get("median"), tail.get("median")]
        total = sum(p for p in parts if p is not None)
        plain_wall = block["sides"]["plain"]["process_s"]["median"]
        out.write(f"| {block['format']} | {block['cache']} | {common.fmt_seconds(side['instrument_s'])} "
                  f"| {common.fmt_seconds(side['ready_s'])} | {_fmt_signed_s(tail)} | {total * 1e3:.0f} ms "
                  f"| {total / plain_wall:.3f} |\n")
    out.write("\nThe start-up as an autoscaler waits for it: spawn to ready() returned (plain: to the end of "
              "the cast), without the exit; medians (min-max) of the paired ratios.\n\n")
    out.write("| format | cache | coldstart/plain to ready() | plain to ready() |\n|---|---|---|---|\n")
    for block in result["blocks"]:
        ratios = block["ratios"].get("coldstart", {})
        if "to_ready" in ratios:
            out.write(f"| {block['format']} | {block['cache']} | {common.fmt_ratio(ratios['to_ready'])} "
                      f"| {common.fmt_seconds(block['sides']['plain']['to_ready_s'])} |\n")
    out.write(f"\nThe load and cast alone (every intercepted call; no import, instrument() or ready()): "
              f"medians (min-max) of the paired ratios. Garbage collector: {result.get('gc_phase', 'as-is')} "
              f"(aligned: gc.collect() right before the window on both sides). Full collections: the "
              f"generation-2 collections that ran inside the window, over all rounds, and their median "
              f"time per run.\n\n")
    out.write("| format | cache | coldstart/plain load+cast | same, full collections taken out | same, CPU time "
              "| plain load+cast | coldstart load+cast | full collections plain / coldstart |\n"
              "|---|---|---|---|---|---|---|---|\n")
    for block in result["blocks"]:
        ratios = block["ratios"].get("coldstart", {})
        if "work" in ratios:
            plain, coldstart = block["sides"]["plain"], block["sides"]["coldstart"]
            out.write(f"| {block['format']} | {block['cache']} | {common.fmt_ratio(ratios['work'])} "
                      f"| {common.fmt_ratio(ratios['work_without_full_gc'])} | {common.fmt_ratio(ratios['work_cpu'])} "
                      f"| {common.fmt_seconds(plain['work_s'])} | {common.fmt_seconds(coldstart['work_s'])} "
                      f"| {plain['gc_full_in_work']} / {coldstart['gc_full_in_work']} "
                      f"({plain['gc_full_s']['median'] * 1e3:.0f} / {coldstart['gc_full_s']['median'] * 1e3:.0f} ms) |\n")
    out.write("\nThe plugin's fixed cost on the caller's thread: import otel_coldstart + instrument() + ready() "
              "(.pyc present), wall and the thread's CPU; medians (min-max). Target: <= 30 ms.\n\n")
    out.write("| format | cache | fixed cost, wall | fixed cost, caller-thread CPU |\n|---|---|---|---|\n")
    for block in result["blocks"]:
        side = block["sides"].get("coldstart")
        if side and "fixed_s" in side:
            out.write(f"| {block['format']} | {block['cache']} | {common.fmt_seconds(side['fixed_s'])} "
                      f"| {common.fmt_seconds(side['fixed_cpu_s'])} |\n")
    out.write("\ntorch.profiler.profile() vs plain (the peer):\n\n")
    out.write("| format | cache | profiler/plain process wall | profiler/plain region, first profile() set-up "
              "excluded | same, included | first profile() set-up | profiler/plain process CPU |\n"
              "|---|---|---|---|---|---|---|\n")
    for block in result["blocks"]:
        ratios = block["ratios"].get("profiler", {})
        side = block["sides"].get("profiler", {})
        out.write(f"| {block['format']} | {block['cache']} | {common.fmt_ratio(ratios.get('process', {}))} "
                  f"| {common.fmt_ratio(ratios.get('region', {}))} "
                  f"| {common.fmt_ratio(ratios.get('region_with_first_profile', {}))} "
                  f"| {common.fmt_seconds(side.get('first_profile_s', {}))} "
                  f"| {common.fmt_ratio(ratios.get('cpu', {}))} |\n")
    out.write("\nPeak RSS (ru_maxrss of the child) added over the plain run of the same round, MiB: "
              "median (min to max)\n\n")
    out.write("| format | cache | plain peak RSS | coldstart added | profiler added |\n|---|---|---|---|---|\n")
    for block in result["blocks"]:
        added = block["rss_added_mib"]
        plain = block["sides"]["plain"]["maxrss_mib"]
        out.write(f"| {block['format']} | {block['cache']} | {plain['median']:.0f} MiB "
                  f"| {_fmt_mib(added.get('coldstart'))} | {_fmt_mib(added.get('profiler'))} |\n")


def _fmt_signed_s(s: dict) -> str:
    if not s or not s.get("n"):
        return "n/a"
    return f"{s['median'] * 1e3:+.0f} ms ({s['min'] * 1e3:+.0f} to {s['max'] * 1e3:+.0f})"


def _fmt_mib(s: dict | None) -> str:
    if not s or not s.get("n"):
        return "n/a"
    return f"{s['median']:+.1f} ({s['min']:+.1f} to {s['max']:+.1f})"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=15, help="rounds per format and cache state (default 15)")
    parser.add_argument("--smoke", action="store_true", help="tiny checkpoint, 1 round: checks it runs, not speed")
    parser.add_argument("--shape", choices=sorted(common.SHAPES), default="1gib",
                        help="the checkpoint: 1gib (1.01 GiB, the default) or 650mb (issue 24's load + cast)")
    parser.add_argument("--cache-root", default=None, help="where generated checkpoints are kept")
    parser.add_argument("--json", default=None, help="write the full result (every run) here")
    parser.add_argument("--formats", nargs="+", choices=FORMATS, default=FORMATS, help="checkpoint formats to run")
    parser.add_argument("--cache", nargs="+", choices=CACHE_STATES, default=CACHE_STATES, help="cache states to run")
    parser.add_argument("--gc-phase", choices=["as-is", "aligned"], default="as-is",
                        help="aligned: gc.collect() right before the load + cast on every side, so that a full "
                             "collection inside it is its own doing (see _load_child.py, gc_phase.py)")
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=SIDES,
                        help="what to run (plain is always included: the ratios divide by it)")
    args = parser.parse_args(argv)
    shape = common.SMOKE_SHAPE if args.smoke else common.SHAPES[args.shape]
    pairs = 1 if args.smoke else args.pairs
    checkpoint = common.prepare_checkpoint(shape, args.cache_root)
    sides = ["plain"] + [side for side in args.sides if side != "plain"]
    result = measure(checkpoint, pairs, formats=args.formats, states=args.cache, sides=sides, gc_phase=args.gc_phase)
    result.update({"benchmark": "startup", "smoke": args.smoke, "shape": shape.__dict__, "when": common.stamp()})
    render(result, checkpoint, sys.stdout)
    if args.json:
        common.write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
