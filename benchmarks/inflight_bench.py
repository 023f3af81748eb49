"""What watching a start-up in flight costs: progress records, in-flight gauges, the stall
watchdog (otel_coldstart/inflight.py).

    python benchmarks/inflight_bench.py [--rounds N] [--pairs N] [--smoke] [--json OUT]

Three questions:

1. **Hooks** (one process): the work the board adds on the host's thread at a span
   boundary, timed directly: a span opened and ended, and a file read (opened, its byte
   counter registered, ended). Nothing is added per tensor or per call; this is per span.
2. **The monitor thread's wake-ups** (one process, embedded file exporter, 3 spans open):
   a tick with nothing due (snapshot + progress check: what runs every tick), a tick that
   writes a progress record and flushes it to the file (every ``progress_interval_s``), one
   stall capture (all threads' stacks), and one scrape of the four gauges.
3. **End to end** (fresh processes, paired and rotated): a CPU-bound start-up of 40
   ``phase("step")`` blocks of ~100 ms of matrix products (about 4 s, so the thread wakes
   during it), with ``off`` (progress_interval_s=0, stall_after_s=0: no thread),
   ``default`` (5 s / 120 s) and ``stress`` (0.25 s / 1 s: 20x the records). The region is
   timed inside the child; each side is divided by the ``off`` run of its own round.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import common

CHILD = r"""
import os, sys, time
import otel_coldstart
otel_coldstart.instrument(summary=False, output_dir=sys.argv[1])
import torch
torch.set_num_threads(1)
a = torch.randn(256, 256)
steps, target = int(sys.argv[2]), float(sys.argv[3])
start = time.perf_counter()
for _ in range(steps):
    with otel_coldstart.phase("step"):
        until = time.perf_counter() + target
        while time.perf_counter() < until:
            a = (a @ a).clamp_(-1, 1)
region = time.perf_counter() - start
otel_coldstart.ready()
print("REGION", region, time.process_time())
"""

SIDES = {"off": ("0", "0"), "default": ("5", "120"), "stress": ("0.25", "1")}


def _best_of(fn, batches: int = 3) -> float:
    return min(fn() for _ in range(batches))


def hooks(rounds: int, calls: int) -> dict:
    """ns per span of the board's hooks, timed directly on a real open container: the
    work the host's thread does at a span boundary because the board is attached (a span
    opened, a span ended, a file read registering its byte counter). Timing the whole
    ``phase()`` with and without the board measures the same thing under ~75 us of span
    work and is all noise on a shared machine."""
    from opentelemetry.sdk.trace import TracerProvider

    import otel_coldstart
    from otel_coldstart import semconv, session as _session

    otel_coldstart.instrument(tracer_provider=TracerProvider(), start_at="instrument", summary=False,
                              handle_sigterm=False, progress_interval_s=0, stall_after_s=0)
    session = _session.ACTIVE
    board = session.progress
    session.progress = None  # the container is made without the board; the loops call it
    container = session.start_container(semconv.PHASE_DESERIALIZE, {semconv.FILE_PATH: "/tmp/x.safetensors",
                                                                     semconv.FILE_SIZE: 1 << 20})
    done_attrs = {semconv.PHASE: semconv.PHASE_DESERIALIZE, semconv.FILE_PATH: "/tmp/x.safetensors",
                  semconv.FILE_SIZE: 1 << 20, semconv.BYTES: 1 << 20}

    class _Read:  # what FileRead hands the board: its container and its byte counter
        bytes = 0

    read = _Read()
    read.container = container

    def open_and_end() -> float:
        start = time.perf_counter_ns()
        for _ in range(calls):
            board.span_opened(container)
            board.span_done(container.name, done_attrs)
        return (time.perf_counter_ns() - start) / calls

    def file_read() -> float:
        start = time.perf_counter_ns()
        for _ in range(calls):
            board.span_opened(container)
            board.file_read_opened(read)
            board.span_done(container.name, done_attrs)
        return (time.perf_counter_ns() - start) / calls

    samples = {"span_opened+span_done": [], "span_opened+file_read_opened+span_done": []}
    for _ in range(rounds):
        samples["span_opened+span_done"].append(_best_of(open_and_end))
        samples["span_opened+file_read_opened+span_done"].append(_best_of(file_read))
    container.finish()
    session.progress = board
    otel_coldstart.ready()
    otel_coldstart.uninstrument()
    return {case: {"ns_per_span": common.summary(values)} for case, values in samples.items()}


def wakeups(repeats: int, directory: str) -> dict:
    import otel_coldstart
    from otel_coldstart import inflight, session as _session

    otel_coldstart.instrument(output_dir=directory, start_at="instrument", summary=False, handle_sigterm=False,
                              progress_interval_s=0, stall_after_s=0)
    session = _session.ACTIVE
    board = session.progress
    board.progress_interval_s = 5.0  # records due when asked; no thread runs (started with 0)
    timings = {"tick_nothing_due_us": [], "tick_with_record_us": [], "stall_capture_us": [], "gauge_scrape_us": []}
    source = inflight._GaugeSource()
    source.board = board
    with otel_coldstart.phase("outer"), otel_coldstart.phase("middle"), otel_coldstart.phase("inner"):
        for _ in range(repeats):
            board._next_record_ns = time.time_ns() + 10**12
            start = time.perf_counter_ns()
            board.tick()
            timings["tick_nothing_due_us"].append((time.perf_counter_ns() - start) / 1e3)
            board._next_record_ns = 0
            start = time.perf_counter_ns()
            board.tick()
            timings["tick_with_record_us"].append((time.perf_counter_ns() - start) / 1e3)
            start = time.perf_counter_ns()
            inflight.format_stacks(sys._current_frames(), first=threading.get_ident())  # the capture, no log line
            timings["stall_capture_us"].append((time.perf_counter_ns() - start) / 1e3)
            source._cached = None
            start = time.perf_counter_ns()
            for _ in range(4):  # one scrape reads four gauges
                source.snapshot()
            timings["gauge_scrape_us"].append((time.perf_counter_ns() - start) / 1e3)
    path = otel_coldstart.trace_file()
    otel_coldstart.ready()
    record_bytes = None
    if path and os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            lines = [line for line in handle if '"coldstart.progress"' in line]
        if lines:
            record_bytes = statistics.median(len(line) for line in lines)
    otel_coldstart.uninstrument()
    result = {key: common.summary(values) for key, values in timings.items()}
    result["record_line_bytes"] = record_bytes
    return result


def end_to_end(pairs: int, steps: int, step_s: float) -> dict:
    rounds = []
    with tempfile.TemporaryDirectory() as out:
        for number in range(pairs):
            runs = {}
            for side in common.rotated(list(SIDES), number):
                interval, stall = SIDES[side]
                env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
                env.update({"OTEL_COLDSTART_PROGRESS_INTERVAL_S": interval, "OTEL_COLDSTART_STALL_AFTER_S": stall,
                            "OTEL_COLDSTART_SUMMARY": "0"})
                done = subprocess.run([common.python(), "-c", CHILD, os.path.join(out, side), str(steps), str(step_s)],
                                      env=env, capture_output=True, text=True, timeout=600)
                if done.returncode != 0:
                    raise SystemExit(done.stderr[-2000:])
                region, cpu = (float(x) for x in done.stdout.split("REGION", 1)[1].split()[:2])
                runs[side] = {"region_s": region, "cpu_s": cpu}
            rounds.append(runs)
    result = {"pairs": pairs, "steps": steps, "step_s": step_s, "rounds": rounds}
    for side in ("default", "stress"):
        result[side] = {
            "region_ratio": common.summary(common.paired_ratios(rounds, side, "off", lambda r: r["region_s"])),
            "cpu_ratio": common.summary(common.paired_ratios(rounds, side, "off", lambda r: r["cpu_s"])),
        }
    result["off_region_s"] = common.summary([r["off"]["region_s"] for r in rounds])
    return result


def render(result: dict, out) -> None:
    out.write("### Hooks: added on the host's thread per span (not per tensor or call)\n\n")
    out.write("| hooks | ns per span (median, range) |\n|---|---|\n")
    for case, item in result["hooks"].items():
        s = item["ns_per_span"]
        out.write(f"| {case} | {s['median']:.0f} ({s['min']:.0f}-{s['max']:.0f}) |\n")
    w = result["wakeups"]
    out.write("\n### The monitor thread (3 spans open, embedded file exporter)\n\n")
    out.write("| work | us (median, range) |\n|---|---|\n")
    for key in ("tick_nothing_due_us", "tick_with_record_us", "stall_capture_us", "gauge_scrape_us"):
        s = w[key]
        out.write(f"| {key[:-3]} | {s['median']:.0f} ({s['min']:.0f}-{s['max']:.0f}) |\n")
    out.write(f"\nA progress record is {w['record_line_bytes']} bytes as a line of the trace file.\n")
    e = result["end_to_end"]
    out.write(f"\n### End to end: {e['steps']} phase('step') blocks of {e['step_s']} s CPU work, "
              f"{e['pairs']} rounds (off: {common.fmt_seconds(e['off_region_s'])})\n\n")
    out.write("| side | region / off | process CPU / off |\n|---|---|---|\n")
    for side in ("default", "stress"):
        out.write(f"| {side} ({SIDES[side][0]} s records, {SIDES[side][1]} s stall) | "
                  f"{common.fmt_ratio(e[side]['region_ratio'])} | {common.fmt_ratio(e[side]['cpu_ratio'])} |\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: checks it runs, not speed")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    rounds, calls, pairs, steps, step_s = ((2, 100, 1, 4, 0.02) if args.smoke
                                           else (args.rounds, args.calls, args.pairs, 40, 0.1))

    def measured() -> dict:
        with tempfile.TemporaryDirectory() as scratch:
            return {"hooks": hooks(rounds, calls),
                    "wakeups": wakeups(rounds * 4, os.path.join(scratch, "traces")),
                    "end_to_end": end_to_end(pairs, steps, step_s)}

    return common.measure_and_finish("inflight", args.smoke, measured, render, args.json)


if __name__ == "__main__":
    sys.exit(main())
