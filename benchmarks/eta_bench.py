"""How right, and how cheap, is the live time-to-ready estimate (otel_coldstart/time_to_ready.py)?

    python benchmarks/eta_bench.py [--history N] [--runs N] [--smoke] [--json OUT]

1. **Accuracy** (fresh processes): plain demo start-ups, ``python -m
   otel_coldstart._demo_child`` as ``otel-coldstart demo`` runs it (the first shard evicted
   before each), one after another into one trace directory. The first ``--history`` make
   the history (the very first has none); each of the next ``--runs`` is measured: the
   estimate it recorded itself, in its progress records (written every 0.25 s here so that
   one is near each point; the estimate does not depend on it), at a quarter, half and three
   quarters of its own start-up, against the time it really had left then. Beside it, what
   "the earlier start-ups' median total less the elapsed time" would have said at the same
   moment (the estimate without any position).
2. **Cost off the host's thread**: the history read on the monitor thread, from the real
   trace files of (1) and from a worst-case directory (64 files, each 2 MiB of lines that
   pass every filter); one estimate with 8 earlier start-ups.
3. **Cost to the host** (fresh processes, paired and rotated): ``import otel_coldstart`` +
   ``instrument()`` wall, and a fixed block of pure-Python work started right after it
   (while the monitor thread reads the history), with the worst-case history directory
   against ``OTEL_COLDSTART_HISTORY_DIR=off``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import common
from otel_coldstart import demo, semconv
from otel_coldstart._history import progress_of

POINTS = (0.25, 0.5, 0.75)
SERVICE = "eta-bench"

HOST_CHILD = r"""
import time
started = time.perf_counter()
import otel_coldstart
otel_coldstart.instrument(summary=False, start_at="instrument")
instrument_s = time.perf_counter() - started
started = time.perf_counter()
total = 0
for number in range(3_000_000):  # pure Python: it needs the interpreter the monitor thread shares
    total += number % 7
work_s = time.perf_counter() - started
otel_coldstart.ready()
print("HOST", instrument_s, work_s)
"""


def _env(out_dir: str, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update({"OTEL_SERVICE_NAME": SERVICE, "OTEL_COLDSTART_OUTPUT_DIR": out_dir, "OTEL_COLDSTART_SUMMARY": "0",
                "OTEL_COLDSTART_PROGRESS_INTERVAL_S": "0.25"})
    env.update(extra)
    return env


def accuracy(checkpoint: str, paths: list[str], out: str, history: int, runs: int) -> dict:
    env = _env(out)
    totals: list[float] = []
    measured = []
    for number in range(history + runs):
        demo.set_cache_state(paths, cold={0})
        before = set(os.listdir(out)) if os.path.isdir(out) else set()
        done = subprocess.run([common.python(), "-m", "otel_coldstart._demo_child", checkpoint], env=env,
                              capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise SystemExit(done.stderr[-2000:])
        (name,) = set(os.listdir(out)) - before
        root, records = progress_of(os.path.join(out, name))
        total = (root[1] - root[0]) / 1e9
        if number >= history:
            earlier = sorted(totals[-8:])
            median_total = (earlier[len(earlier) // 2] if len(earlier) % 2 else
                            (earlier[len(earlier) // 2 - 1] + earlier[len(earlier) // 2]) / 2)
            run = {"total_s": total, "points": {}}
            estimated = [(t, a) for t, a in records if semconv.PROGRESS_REMAINING_S in a]
            for share in POINTS:
                at_ns = root[0] + int((root[1] - root[0]) * share)
                if not estimated:
                    continue
                t, attributes = min(estimated, key=lambda r: abs(r[0] - at_ns))
                truth = (root[1] - t) / 1e9
                elapsed = (t - root[0]) / 1e9
                naive = max(0.0, median_total - elapsed)
                run["points"][str(share)] = {
                    "offset_s": elapsed, "off_by_s": abs(t - at_ns) / 1e9, "truth_s": truth,
                    "estimate_s": attributes[semconv.PROGRESS_REMAINING_S],
                    "error": (attributes[semconv.PROGRESS_REMAINING_S] - truth) / truth if truth > 0 else None,
                    "naive_error": (naive - truth) / truth if truth > 0 else None,
                    "history": attributes.get(semconv.PROGRESS_REMAINING_HISTORY),
                    "basis": attributes.get(semconv.PROGRESS_REMAINING_BASIS)}
            measured.append(run)
        totals.append(total)
    result = {"history_runs": history, "runs": measured, "history_totals_s": totals[:history], "points": {}}
    for share in POINTS:
        key = str(share)
        errors = [r["points"][key]["error"] for r in measured if key in r["points"]]
        naive = [r["points"][key]["naive_error"] for r in measured if key in r["points"]]
        errors = [e for e in errors if e is not None]
        naive = [e for e in naive if e is not None]
        result["points"][key] = {
            "abs_error": common.summary([abs(e) for e in errors]) if errors else None,
            "within_20pct": sum(1 for e in errors if abs(e) <= 0.2), "n": len(errors),
            "naive_abs_error": common.summary([abs(e) for e in naive]) if naive else None}
    result["total_s"] = common.summary([r["total_s"] for r in measured])
    return result


def worst_case_history(directory: str, files: int = 64, file_bytes: int = 2 << 20) -> None:
    """Files whose every line passes the reader's filters and parses: the most work a
    directory can make it do (within its budgets)."""
    os.makedirs(directory, exist_ok=True)
    start = 1_700_000_000 * 10**9
    spans = [{"traceId": f"{n:032x}", "spanId": "1" * 16, "name": "coldstart.step", "startTimeUnixNano": str(start),
              "endTimeUnixNano": str(start + 10**9), "attributes": [
                  {"key": "coldstart.phase", "value": {"stringValue": "step"}}]} for n in range(40)]
    line = (json.dumps({"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": SERVICE}}]}, "scopeSpans": [{"spans": spans}]}]}) + "\n")
    body = line * (file_bytes // len(line))
    for number in range(files):
        with open(os.path.join(directory, f"startup-{number:03d}.otlp.jsonl"), "w", encoding="utf-8") as handle:
            handle.write(body)


def reading(real_dir: str, worst_dir: str, repeats: int) -> dict:
    from otel_coldstart import time_to_ready
    from otel_coldstart.inflight import Snapshot

    def read(directory):
        sources = time_to_ready.sources_for([directory], {"service.name": SERVICE}, None, None, 0)
        started, cpu = time.perf_counter(), time.thread_time()
        live = time_to_ready.LiveEstimate.load(sources)
        return live, (time.perf_counter() - started) * 1e3, (time.thread_time() - cpu) * 1e3

    result = {}
    for label, directory in (("real", real_dir), ("worst_case", worst_dir)):
        walls, cpus, found = [], [], 0
        for _ in range(repeats):
            live, wall, cpu = read(directory)
            walls.append(wall)
            cpus.append(cpu)
            found = live.startups
        result[label] = {"wall_ms": common.summary(walls), "cpu_ms": common.summary(cpus), "startups": found,
                         "files": len([n for n in os.listdir(directory) if n.endswith((".json", ".jsonl"))])}
    live, _, _ = read(real_dir)
    if live.startups:
        # Half-way through the newest earlier start-up: its spans open then, and the one ended last.
        from types import SimpleNamespace

        newest = live.history.startups[0]
        half = newest.total_s / 2
        open_spans = tuple(SimpleNamespace(name=key[0], phase=key[1], start_ns=int(start_s * 1e9),
                                           thread_id=None, attributes={}, file_read=None)
                           for key, start_s, end_s, _ in newest.steps if start_s <= half < end_s)
        ended = [(key, end_s) for key, _, end_s, _ in newest.steps if end_s <= half]
        last = (ended[-1][0][0], {semconv.PHASE: ended[-1][0][1]}, int(ended[-1][1] * 1e9)) if ended else None
        snap = Snapshot(int(half * 1e9), half, "x", 0.0, None, open_spans, 0, None, 0, 0, None, last)
        calls = 2000
        started = time.perf_counter_ns()
        for _ in range(calls):
            live.estimate(snap)
        result["estimate_us"] = (time.perf_counter_ns() - started) / calls / 1e3
        result["estimate_startups"] = live.startups
    return result


def host_cost(worst_dir: str, pairs: int, scratch: str) -> dict:
    sides = {"off": {"OTEL_COLDSTART_HISTORY_DIR": "off"}, "worst_history": {"OTEL_COLDSTART_HISTORY_DIR": worst_dir}}
    rounds = []
    for number in range(pairs):
        runs = {}
        for side in common.rotated(list(sides), number):
            done = subprocess.run([common.python(), "-c", HOST_CHILD], env=_env(os.path.join(scratch, side),
                                                                               **sides[side]),
                                  capture_output=True, text=True, timeout=300)
            if done.returncode != 0:
                raise SystemExit(done.stderr[-2000:])
            instrument_s, work_s = (float(x) for x in done.stdout.split("HOST", 1)[1].split()[:2])
            runs[side] = {"instrument_s": instrument_s, "work_s": work_s}
        rounds.append(runs)
    return {"pairs": pairs, "rounds": rounds,
            "instrument_ratio": common.summary(common.paired_ratios(rounds, "worst_history", "off",
                                                                    lambda r: r["instrument_s"])),
            "work_ratio": common.summary(common.paired_ratios(rounds, "worst_history", "off", lambda r: r["work_s"])),
            "instrument_off_ms": common.summary([r["off"]["instrument_s"] * 1e3 for r in rounds]),
            "work_off_s": common.summary([r["off"]["work_s"] for r in rounds])}


def render(result: dict, out) -> None:
    a = result["accuracy"]
    out.write(f"### Accuracy: {len(a['runs'])} demo start-ups measured after {a['history_runs']} as history "
              f"(total {common.fmt_seconds(a['total_s'])})\n\n")
    out.write("| point of the start-up | |error| of the estimate (median, range) | within 20% | "
              "|error| of 'median total - elapsed' |\n|---|---|---|---|\n")
    for share in POINTS:
        p = a["points"][str(share)]
        if not p["abs_error"]:
            continue
        e, n = p["abs_error"], p["naive_abs_error"]
        out.write(f"| {share:.0%} | {e['median']:.0%} ({e['min']:.0%}-{e['max']:.0%}) | {p['within_20pct']}/{p['n']} "
                  f"| {n['median']:.0%} ({n['min']:.0%}-{n['max']:.0%}) |\n")
    out.write("\nPer run, at half: " + "; ".join(
        f"{r['points']['0.5']['estimate_s']:.2f} s for {r['points']['0.5']['truth_s']:.2f} s"
        for r in a["runs"] if "0.5" in r["points"]) + "\n")
    r = result["reading"]
    out.write("\n### The history read (monitor thread) and one estimate\n\n| directory | files | start-ups kept | "
              "wall ms (median, range) | thread CPU ms |\n|---|---|---|---|---|\n")
    for label in ("real", "worst_case"):
        item = r[label]
        out.write(f"| {label} | {item['files']} | {item['startups']} | {item['wall_ms']['median']:.1f} "
                  f"({item['wall_ms']['min']:.1f}-{item['wall_ms']['max']:.1f}) | {item['cpu_ms']['median']:.1f} |\n")
    if "estimate_us" in r:
        out.write(f"\nOne estimate from {r['estimate_startups']} earlier start-ups: {r['estimate_us']:.1f} us.\n")
    h = result["host"]
    out.write(f"\n### Cost to the host: worst-case history directory vs the estimate off, {h['pairs']} pairs\n\n"
              "| measurement | worst / off (median, range) | off |\n|---|---|---|\n")
    out.write(f"| import + instrument() wall | {common.fmt_ratio(h['instrument_ratio'])} | "
              f"{h['instrument_off_ms']['median']:.0f} ms |\n")
    out.write(f"| pure-Python block right after instrument() | {common.fmt_ratio(h['work_ratio'])} | "
              f"{common.fmt_seconds(h['work_off_s'])} |\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--history", type=int, default=3, help="start-ups run first, as history")
    parser.add_argument("--runs", type=int, default=10, help="start-ups measured")
    parser.add_argument("--pairs", type=int, default=8, help="rounds of the cost-to-the-host comparison")
    parser.add_argument("--checkpoint-dir", default=None, help=f"default {demo.default_cache_dir()}")
    parser.add_argument("--smoke", action="store_true", help="tiny counts: checks it runs, not accuracy or speed")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    history, runs, pairs, repeats = (1, 1, 1, 2) if args.smoke else (args.history, args.runs, args.pairs, 10)
    checkpoint = args.checkpoint_dir or demo.default_cache_dir()
    paths = demo.generate_checkpoint(checkpoint)

    def measured() -> dict:
        with tempfile.TemporaryDirectory() as scratch:
            out = os.path.join(scratch, "traces")
            worst = os.path.join(scratch, "worst-history")
            worst_case_history(worst, files=4 if args.smoke else 64)
            return {"accuracy": accuracy(checkpoint, paths, out, history, runs),
                    "reading": reading(out, worst, repeats),
                    "host": host_cost(worst, pairs, scratch)}

    return common.measure_and_finish("time_to_ready", args.smoke, measured, render, args.json)


if __name__ == "__main__":
    sys.exit(main())
