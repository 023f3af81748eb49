"""The analyzer at fleet size (issue 25.7): ``capacity`` and ``compare`` over 10,000 start-ups
of about 60 spans each, laid out two ways: one trace file per start-up (as the plugin writes
them, 10,000 files) and all of them in one file (as a Collector's file exporter writes them,
batches of several processes interleaved). Each command runs in a fresh process; the figures
are its wall time, CPU time (user + sys) and peak RSS (``wait4``), and the machine's load
average around it. Goal: <= 5 s and <= 300 MB per command on the 2-core machine.

    python benchmarks/fleet_scale.py                        # 10,000 start-ups (a few minutes)
    python benchmarks/fleet_scale.py --smoke                # 200 start-ups: seconds (CI)
    python benchmarks/fleet_scale.py --startups 2000 --keep /tmp/fleet --out fleet.json

Each start-up: the root, the import and two user phases, a ``Load weights`` span of the
server's own, 16 shards each with a ``deserialize`` span (file, size, cache state, bytes read
from storage) and aggregated ``h2d``/``cast`` leaves, a graph-capture aggregate and a warm-up:
62 spans. Instance types vary (3); one start-up in 25 is SIGTERMed in deserialize and one in
40 is killed (SIGKILL: no root, rebuilt from its progress record), so the unready path is
measured too. ``capacity`` reads all 10,000; ``compare`` reads the first 5,000 against the
other 5,000. Results go in benchmarks/RESULTS-analyzer.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from analyzer_scale import _attr, _span  # noqa: E402 - the same OTLP JSON the other benchmark writes

T0 = 1_790_000_000_000_000_000
MS = 1_000_000
SHARDS = 16
HOST_TYPES = ("g5.12xlarge", "p4d.24xlarge", "g6e.xlarge")
INTERLEAVE = 8  # processes whose batches a Collector file interleaves


def startup(number: int, rng: random.Random) -> tuple[dict, list[dict]]:
    """(resource, spans) of one start-up, in the order the plugin would export them."""
    trace = f"{number + 1:08x}" + f"{rng.getrandbits(96):024x}"
    pid = 1000 + number
    thread = {"thread.id": 140000000000001, "thread.name": "MainThread"}
    start = T0 + number * 3_000 * MS
    host = HOST_TYPES[number % len(HOST_TYPES)]
    slow = {"p4d.24xlarge": 0.8, "g5.12xlarge": 1.0, "g6e.xlarge": 1.3}[host]
    killed = number % 40 == 39
    sigterm = not killed and number % 25 == 24
    spans, cursor, span_id = [], start, 2

    def phase(name, duration_ms, parent=1, **attrs):
        nonlocal cursor, span_id
        end = cursor + int(duration_ms * MS)
        spans.append(_span(trace, span_id, parent, f"coldstart.{name}", cursor, end,
                           {"coldstart.phase": name, **thread, **attrs}))
        span_id += 1
        cursor = end

    phase("import", rng.uniform(800, 1200) * slow)
    phase("import_libraries", rng.uniform(1500, 2500))
    phase("build_model", rng.uniform(500, 900))
    load_id, load_start = span_id, cursor
    span_id += 1
    cold_every = number % 4  # 0: a warm start-up; else every first, second or third shard cold
    stop_at = SHARDS // 2 if (killed or sigterm) else SHARDS
    for index in range(stop_at):
        size = 2 << 30
        cold = bool(cold_every) and index % cold_every == 0
        read_ms = (rng.uniform(3000, 5000) if cold else rng.uniform(80, 120)) * slow
        phase("deserialize", read_ms, parent=load_id, **{
            "coldstart.file.path": f"/models/llama-70b/model-{index + 1:05d}-of-{SHARDS:05d}.safetensors",
            "coldstart.file.size": size, "coldstart.file.format": "safetensors", "coldstart.shard.index": index,
            "coldstart.shard.count": SHARDS, "coldstart.bytes": size, "coldstart.cache.state": "cold" if cold else "warm",
            "coldstart.cache.storage_read_bytes": size if cold else 0})
        for leaf, ms in (("h2d", rng.uniform(150, 250)), ("cast", rng.uniform(20, 40))):
            phase(leaf, ms, parent=load_id, **{"coldstart.aggregate": True, "coldstart.calls": 80,
                                               "coldstart.busy_s": ms / 1000 * 0.95, "coldstart.bytes": size,
                                               "coldstart.copy.pageable_bytes": size if leaf == "h2d" else 0})
    load_end = cursor
    resource = {"attributes": [_attr("service.name", "llm-server"), _attr("host.type", host),
                               _attr("process.pid", pid), _attr("service.instance.id", f"{trace[:8]}-{pid}")]}
    if killed:  # SIGKILL in deserialize: finished spans and a progress record, no root
        record = {"start_ns": start, "attributes": {"coldstart.rank": 0, **thread}}
        still_open = [{"span_id": f"{load_id:016x}", "parent_id": f"{1:016x}", "name": "Load weights",
                       "start_ns": load_start}]
        spans.append(_span(trace, span_id, 1, "coldstart.progress", cursor, cursor, {
            "coldstart.progress.seq": 3, "coldstart.progress.phase": "deserialize",
            "coldstart.progress.root": json.dumps(record), "coldstart.progress.open": json.dumps(still_open),
            "coldstart.progress.bytes_loaded": stop_at * (2 << 30),
            "coldstart.progress.bytes_expected": SHARDS * (2 << 30)}))
        return resource, spans
    spans.append(_span(trace, load_id, 1, "Load weights", load_start, load_end, dict(thread)))
    if not sigterm:
        phase("graph_capture", rng.uniform(2000, 3000), **{"coldstart.aggregate": True, "coldstart.calls": 35,
                                                           "coldstart.busy_s": 2.0})
        phase("warmup", rng.uniform(1000, 1500))
    end = cursor + int(rng.uniform(100, 300) * MS)
    spans.append(_span(trace, 1, None, "model.startup", start, end, {
        "coldstart.ready": not sigterm, "coldstart.end_reason": "sigterm" if sigterm else "ready",
        **({"coldstart.end.phase": "deserialize"} if sigterm else {}), "coldstart.rank": 0,
        "coldstart.world_size": 1, **thread}))
    return resource, spans


def _line(resource: dict, spans: list[dict]) -> str:
    return json.dumps({"resourceSpans": [{"resource": resource, "scopeSpans": [
        {"scope": {"name": "otel_coldstart"}, "spans": spans}]}]}, separators=(",", ":")) + "\n"


def _batches(spans: list[dict]) -> list[list[dict]]:
    """The plugin's export batches: a few lines per start-up."""
    return [spans[i:i + 24] for i in range(0, len(spans), 24)]


def generate(directory: str, count: int, seed: int = 7) -> dict:
    """``a/`` and ``b/``: one file per start-up (the first half, the second half);
    ``a.jsonl`` and ``b.jsonl``: the same start-ups in one file per half, ``all.jsonl`` all of
    them, the batches of INTERLEAVE processes interleaved as a Collector writes them."""
    rng = random.Random(seed)
    half = count // 2
    for side in ("a", "b"):
        os.makedirs(os.path.join(directory, side), exist_ok=True)
    spans_total = 0
    with open(os.path.join(directory, "all.jsonl"), "w") as everything:
        for side, numbers in (("a", range(half)), ("b", range(half, count))):
            with open(os.path.join(directory, f"{side}.jsonl"), "w") as one_file:
                pending: list[list[str]] = []
                for number in numbers:
                    resource, spans = startup(number, rng)
                    spans_total += len(spans)
                    lines = [_line(resource, batch) for batch in _batches(spans)]
                    with open(os.path.join(directory, side, f"startup-{number:05d}.otlp.jsonl"), "w") as own:
                        own.writelines(lines)
                    pending.append(lines)
                    if len(pending) == INTERLEAVE or number == numbers[-1]:
                        while any(pending):  # round robin over the processes' batches
                            for queue in pending:
                                if queue:
                                    line = queue.pop(0)
                                    one_file.write(line)
                                    everything.write(line)
                        pending = []
    return {"startups": count, "spans": spans_total}


def _tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and all its descendants now (Linux /proc): the command may
    read its inputs with several processes (--jobs), and what they hold together is the
    figure. Shared pages are counted in each: an upper bound."""
    total, pending = 0, [pid]
    while pending:
        current = pending.pop()
        try:
            with open(f"/proc/{current}/status") as handle:
                total += next(int(line.split()[1]) for line in handle if line.startswith("VmRSS:")) * 1024
            with open(f"/proc/{current}/task/{current}/children") as handle:
                pending += [int(child) for child in handle.read().split()]
        except (OSError, StopIteration, ValueError):
            continue
    return total


def measure(argv: list[str]) -> dict:
    """One fresh process: wall and CPU seconds (its own and its children's), the peak RSS of
    it and its children together (sampled every 20 ms), exit code, load around it."""
    before = os.getloadavg()[0]
    start = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    while process.poll() is None:  # sampled until it exits (wait4 below then reaps it)
        peak = max(peak, _tree_rss(process.pid))
        time.sleep(0.02)
    wall = time.perf_counter() - start
    stderr = process.stderr.read().decode(errors="replace") if process.stderr else ""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)  # this process's children, all of them so far
    return {"wall_s": round(wall, 3), "cpu_s": round(children.ru_utime + children.ru_stime, 3),
            "peak_rss_mib": round(max(peak, 0) / 2**20, 1), "exit": process.returncode,
            "load_1min": [round(before, 2), round(os.getloadavg()[0], 2)], "stderr_tail": stderr[-300:]}


def commands(directory: str) -> list[tuple[str, list[str]]]:
    cli = [sys.executable, "-m", "otel_coldstart"]
    d = lambda *p: os.path.join(directory, *p)  # noqa: E731
    return [("capacity, one file per start-up", cli + ["capacity", d("a"), d("b")]),
            ("capacity, one file", cli + ["capacity", d("all.jsonl")]),
            ("compare, one file per start-up", cli + ["compare", d("a"), d("b")]),
            ("compare, one file a side", cli + ["compare", d("a.jsonl"), d("b.jsonl")])]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--startups", type=int, default=10_000, help="start-ups in all (default %(default)s)")
    parser.add_argument("--smoke", action="store_true", help="200 start-ups, for CI")
    parser.add_argument("--runs", type=int, default=1, help="runs of each command (default %(default)s)")
    parser.add_argument("--keep", help="generate into (or reuse) this directory and keep it")
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    count = 200 if args.smoke else args.startups
    directory = args.keep or tempfile.mkdtemp(prefix="fleet-scale-")
    marker = os.path.join(directory, f"generated-{count}.json")
    if os.path.exists(marker):
        with open(marker) as handle:
            facts = json.load(handle)
    else:
        facts = generate(directory, count)
        with open(marker, "w") as handle:
            json.dump(facts, handle)
    results = {"python": sys.version.split()[0], "cpus": os.cpu_count(), **facts, "runs": []}
    print(f"{count} start-ups, {facts['spans']} spans; python {results['python']}, {os.cpu_count()} CPUs")
    print("| command | wall s | CPU s | peak RSS MiB | load (1 min) before -> after |\n|---|---:|---:|---:|---|")
    failed = False
    cpu_so_far = 0.0
    for name, argv_ in commands(directory):
        for _ in range(args.runs):
            run = measure(argv_)
            run["cpu_s"], cpu_so_far = round(run["cpu_s"] - cpu_so_far, 3), run["cpu_s"]  # this run's own
            results["runs"].append({"command": name, **run})
            load = " -> ".join(f"{x:.2f}" for x in run["load_1min"])
            print(f"| {name} | {run['wall_s']:.2f} | {run['cpu_s']:.2f} | {run['peak_rss_mib']:.0f} | {load} |")
            if run["exit"] not in (0, 12):  # 12: the killed start-ups' lost parents are no error
                print(f"  exit {run['exit']}: {run['stderr_tail']}", file=sys.stderr)
                failed = True
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(results, handle, indent=2)
    if not args.keep:
        shutil.rmtree(directory)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
