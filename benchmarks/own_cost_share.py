"""The plugin's own cost in the warm 650 MB load + cast (issue 39 item 1: ``own_cost_s`` at most
2% of the start-up), and whether ``own_cost_s`` is what the plugin adds to the process.

    python benchmarks/own_cost_share.py [--pairs 20] [--smoke] [--cache-root DIR] [--json OUT]

Alternated rounds of fresh processes (``_load_child.py``, the order rotated every round), the
four shards of the 650 MB checkpoint read whole before each run: ``plain`` (nothing of the
plugin imported), ``coldstart`` (``instrument()`` first, the embedded default exporter,
``ready()`` after the cast) and ``coldstart_late`` (the same with ``instrument()`` right after
``import torch``). ``PYTHONDONTWRITEBYTECODE`` is removed from the children's environment and
one warm-up round runs first, so bytecode is cached as after any ``pip install``.

Why the third side: instrument() first imports, before the host's ``import torch``, the
modules the OpenTelemetry API and wrapt need (``typing_extensions``, ``logging``, ``uuid``,
``inspect``, ``json``...), which torch imports too. The set-up pays them and torch's import no
longer does: counted in ``own_cost_s``, moved rather than added. After ``import torch`` they are
imported already, so that side's set-up is the plugin's own modules and work alone.

Per round (``--pairs`` rounds): the instrumented start-up's ``own_cost_s``, its parts and its share of the start-up
(from ``otel-coldstart analyze --format json`` on its trace), and the independent check, the
process CPU time the instrumented side spent more than the plain one: when ``torch`` has been
imported (the set-up and the patching inside ``import torch``: everything the plugin does
before the first load) and when the load + cast is done (the hooks and the plugin's threads
too). CPU time, because this VM's wall times move by more than the ~30 ms measured; process
CPU, because only the process total shows a cost moved rather than added (a module the
plugin imports first is one ``import torch`` no longer imports).
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

CHILD = os.path.join(common.BENCH_DIR, "_load_child.py")
# Each round: the plain start-up, instrument() as its first statement (the usual way), and
# instrument() right after import torch (_load_child.py's sides).
SIDES = ("plain", "coldstart", "coldstart_late")


def run_child(side: str, shards: list[str], work_dir: str) -> dict:
    """One start-up; for an instrumented side, its report's own cost and duration too."""
    common.set_cache(shards, "warm")
    output_dir = tempfile.mkdtemp(prefix=f"{side}-", dir=work_dir)
    env = dict(os.environ, OTEL_COLDSTART_OUTPUT_DIR=output_dir, OTEL_COLDSTART_SUMMARY="0")
    for name in ("PYTHONDONTWRITEBYTECODE", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                 "TRACEPARENT"):
        env.pop(name, None)
    done = subprocess.run([common.python(), CHILD, side, "safetensors", *shards], env=env, capture_output=True,
                          text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{side}: exit {done.returncode}: {done.stderr[-2000:]}")
    row = json.loads(done.stdout.strip().splitlines()[-1])
    if side != "plain":
        (trace,) = [os.path.join(output_dir, name) for name in os.listdir(output_dir) if name.endswith(".jsonl")]
        report = subprocess.run([common.python(), "-m", "otel_coldstart", "analyze", trace, "--format", "json"],
                                capture_output=True, text=True, timeout=120, env=env)
        if report.returncode != 0:
            raise RuntimeError(f"analyze: exit {report.returncode}: {report.stderr[-2000:]}")
        (startup,) = json.loads(report.stdout)["startups"]
        row["report"] = {"total_s": startup["duration_s"], "own_cost_s": startup["own_cost_s"],
                         "own_cost": startup["own_cost"]}
    shutil.rmtree(output_dir, ignore_errors=True)
    return row


def run_report(child: dict) -> dict:
    """An instrumented side's figures: its report's own cost, share and set-up."""
    report = child["report"]
    return {"startup_s": report["total_s"], "own_cost_s": report["own_cost_s"], "own_cost": report["own_cost"],
            "share": report["own_cost_s"] / report["total_s"], "setup_s": (report["own_cost"] or {}).get("setup_s")}


def measure(pairs: int, shards: list[str], work_dir: str, log=sys.stderr) -> dict:
    for side in SIDES:  # bytecode written, the page cache warm for every side
        run_child(side, shards, work_dir)
    rows = []
    for number in range(pairs):
        sides = {side: run_child(side, shards, work_dir) for side in common.rotated(list(SIDES), number)}
        plain, traced, late = sides["plain"], sides["coldstart"], sides["coldstart_late"]
        row = {
            **run_report(traced),
            # What the instrumented process spent more, by the time torch was imported, and by
            # the end of the load + cast: the measured counterpart of own_cost_s.
            "added_cpu_at_import_s": traced["cpu_after_import_s"] - plain["cpu_after_import_s"],
            "added_cpu_at_work_end_s": traced["cpu_at_work_end_s"] - plain["cpu_at_work_end_s"],
            # The same start-up with instrument() after import torch: what the plugin imports
            # is imported already, so its set-up moves nothing out of the host's import.
            "late": {**run_report(late),
                     "added_cpu_at_work_end_s": late["cpu_at_work_end_s"] - plain["cpu_at_work_end_s"]},
        }
        rows.append(row)
        if log:
            print(f"  round {number + 1}: start-up {row['startup_s']:.3f} s, own_cost {row['own_cost_s'] * 1e3:.1f} ms "
                  f"({row['share']:.2%}; instrument() after import torch: {row['late']['own_cost_s'] * 1e3:.1f} ms, "
                  f"{row['late']['share']:.2%}), added CPU at import {row['added_cpu_at_import_s'] * 1e3:.1f} ms, "
                  f"at work end {row['added_cpu_at_work_end_s'] * 1e3:.1f} ms", file=log, flush=True)

    def median(key: str, late: bool = False) -> float:
        return statistics.median((r["late"] if late else r)[key] for r in rows)

    def mean_and_error(key: str, late: bool = False) -> tuple[float, float | None]:
        """The mean and its standard error: one process's CPU time moves by ~50-80 ms here (torch's
        import alone), so a ~40 ms difference needs tens of pairs, and says how sure it is."""
        values = [(r["late"] if late else r)[key] for r in rows]
        error = statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else None
        return statistics.fmean(values), error

    return {"pairs": rows, "median_share": median("share"), "median_own_cost_s": median("own_cost_s"),
            "mean_own_cost_s": mean_and_error("own_cost_s"),
            "median_startup_s": median("startup_s"), "median_added_cpu_at_import_s": median("added_cpu_at_import_s"),
            "median_added_cpu_at_work_end_s": median("added_cpu_at_work_end_s"),
            "mean_added_cpu_at_import_s": mean_and_error("added_cpu_at_import_s"),
            "mean_added_cpu_at_work_end_s": mean_and_error("added_cpu_at_work_end_s"),
            "late": {"median_share": median("share", True), "median_own_cost_s": median("own_cost_s", True),
                     "median_startup_s": median("startup_s", True), "median_setup_s": median("setup_s", True),
                     "mean_added_cpu_at_work_end_s": mean_and_error("added_cpu_at_work_end_s", True)}}


def render(result: dict, out) -> None:
    out.write("Warm 650 MB load + cast, alternated fresh-process rounds (plain, instrument() first, "
              "instrument() after import torch), .pyc present\n\n")
    out.write("| round | start-up | own_cost_s | share | set-up | added process CPU, torch imported | "
              "added process CPU, load + cast done | instrument() after import torch: own_cost_s, share, set-up |\n"
              "|---|---|---|---|---|---|---|---|\n")

    def ms(seconds: float | None) -> str:
        return "-" if seconds is None else f"{seconds * 1e3:.1f} ms"

    for number, row in enumerate(result["pairs"], 1):
        late = row["late"]
        out.write(f"| {number} | {row['startup_s']:.3f} s | {ms(row['own_cost_s'])} | {row['share']:.2%} | "
                  f"{ms(row['setup_s'])} | {ms(row['added_cpu_at_import_s'])} | {ms(row['added_cpu_at_work_end_s'])} | "
                  f"{ms(late['own_cost_s'])}, {late['share']:.2%}, {ms(late['setup_s'])} |\n")
    late = result["late"]
    out.write(f"| median | {result['median_startup_s']:.3f} s | {ms(result['median_own_cost_s'])} | "
              f"{result['median_share']:.2%} | | {ms(result['median_added_cpu_at_import_s'])} | "
              f"{ms(result['median_added_cpu_at_work_end_s'])} | {ms(late['median_own_cost_s'])}, "
              f"{late['median_share']:.2%}, {ms(late['median_setup_s'])} |\n")

    def mean(pair) -> str:
        value, error = pair
        return ms(value) + ("" if error is None else f" ± {error * 1e3:.1f}")

    out.write(f"| mean ± standard error | | {mean(result['mean_own_cost_s'])} | | | "
              f"{mean(result['mean_added_cpu_at_import_s'])} | {mean(result['mean_added_cpu_at_work_end_s'])} | "
              f"added process CPU, load + cast done: {mean(late['mean_added_cpu_at_work_end_s'])} |\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=20)
    common.add_checkpoint_options(parser, "the few-MiB checkpoint, 1 pair: checks it runs, not the share")
    args = parser.parse_args(argv)
    _shape, checkpoint = common.checkpoint_for(args)
    pairs = 1 if args.smoke else args.pairs

    def measured() -> dict:
        with tempfile.TemporaryDirectory(prefix="own-cost-") as work_dir:
            return measure(pairs, list(checkpoint.shards), work_dir)

    return common.measure_and_finish("own_cost_share", args.smoke, measured, render, args.json)


if __name__ == "__main__":
    sys.exit(main())
