"""How the analyzer scales: generate OTLP JSON Lines traces of 10k, 100k and 1M spans, run
``otel-coldstart analyze --format json`` on each in a fresh process, report wall time and
peak RSS (and both per span, which should stay flat if cost grows linearly).

    python benchmarks/analyzer_scale.py                 # 10k, 100k, 1M spans (minutes, ~GBs)
    python benchmarks/analyzer_scale.py --smoke         # 300 and 3k spans: seconds (CI)
    python benchmarks/analyzer_scale.py --sizes 50000 --keep /tmp/traces --out results.json

The traces look like a big sharded start-up as the plugin writes it: one ``model.startup``
root, per-shard ``coldstart.deserialize`` spans carrying file and cache facts, aggregated
h2d/cast leaves under each shard with io and copy attributes, and a user span ("Load
weights") enclosing the shards, in batches of 1000 spans per line like the Collector's
file exporter. Results go in benchmarks/RESULTS-analyzer.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

FULL_SIZES = (10_000, 100_000, 1_000_000)
SMOKE_SIZES = (300, 3_000)
BATCH = 1000
T0 = 1_790_000_000_000_000_000


def _attr(key, value):
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    if isinstance(value, float):
        return {"key": key, "value": {"doubleValue": value}}
    return {"key": key, "value": {"stringValue": value}}


def _span(trace, span_id, parent, name, start, end, attrs):
    span = {"traceId": trace, "spanId": f"{span_id:016x}", "name": name, "kind": 1,
            "startTimeUnixNano": str(start), "endTimeUnixNano": str(end),
            "attributes": [_attr(k, v) for k, v in attrs.items()], "status": {}}
    if parent is not None:
        span["parentSpanId"] = f"{parent:016x}"
    return span


def generate_spans(total: int):
    """Yield ``total`` OTLP span dicts of one start-up (single thread: phases tile the root)."""
    trace = "c0ffee" + "0" * 26
    thread = {"thread.id": 140000000000001, "thread.name": "MainThread"}
    shards = max(1, -(-(total - 2) // 3))  # each shard: deserialize + h2d + cast (last may be cut)
    step = 3_000_000  # ns per shard
    end = T0 + 200_000_000 + shards * step + 50_000_000
    yield _span(trace, 1, None, "model.startup", T0, end, {
        "coldstart.ready": True, "coldstart.end_reason": "ready", "coldstart.rank": 0,
        "coldstart.world_size": 1, **thread})
    yield _span(trace, 2, 1, "Load weights", T0 + 150_000_000, end - 10_000_000, dict(thread))
    emitted, span_id = 2, 3
    for index in range(shards):
        if emitted >= total:
            return
        start = T0 + 200_000_000 + index * step
        cold = index % 16 == 0
        size = 64 << 20
        shard_id = span_id
        yield _span(trace, shard_id, 2, "coldstart.deserialize", start, start + step // 3, {
            "coldstart.phase": "deserialize", "coldstart.file.path": f"/ckpt/model-{index:06d}.safetensors",
            "coldstart.file.size": size, "coldstart.file.format": "safetensors",
            "coldstart.shard.index": index, "coldstart.shard.count": shards, "coldstart.bytes": size,
            "coldstart.cache.state": "cold" if cold else "warm",
            "coldstart.io.read_bytes": size if cold else 0, **thread})
        span_id += 1
        emitted += 1
        for offset, phase in ((1, "h2d"), (2, "cast")):
            if emitted >= total:
                return
            leaf_start = start + offset * step // 3
            yield _span(trace, span_id, 2, f"coldstart.{phase}", leaf_start, leaf_start + step // 3 - 1000, {
                "coldstart.phase": phase, "coldstart.aggregate": True, "coldstart.calls": 40,
                "coldstart.busy_s": (step // 3 - 1000) / 1e9 * 0.9, "coldstart.bytes": size,
                "coldstart.io.read_bytes": 0, "coldstart.copy.pageable_bytes": size if phase == "h2d" else 0,
                "coldstart.copy.pinned_bytes": 0, **thread})
            span_id += 1
            emitted += 1


def write_trace(path: str, total: int) -> int:
    resource = {"attributes": [_attr("service.name", "bench"), _attr("host.type", "bench.large")]}
    batch = []
    with open(path, "w", encoding="utf-8") as handle:
        for span in generate_spans(total):
            batch.append(span)
            if len(batch) == BATCH:
                handle.write(json.dumps({"resourceSpans": [{"resource": resource, "scopeSpans": [
                    {"scope": {"name": "otel_coldstart"}, "spans": batch}]}]}) + "\n")
                batch = []
        if batch:
            handle.write(json.dumps({"resourceSpans": [{"resource": resource, "scopeSpans": [
                {"scope": {"name": "otel_coldstart"}, "spans": batch}]}]}) + "\n")
    return os.path.getsize(path)


def measure(argv: list[str]) -> tuple[float, int, int]:
    """Wall seconds, peak RSS in bytes and exit code of one fresh process."""
    start = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.stderr is not None:
        process.stderr.close()
    return wall, usage.ru_maxrss * 1024, process.returncode  # Linux reports KiB


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    parser.add_argument("--sizes", type=int, nargs="+", help="span counts (default 10k 100k 1M)")
    parser.add_argument("--keep", help="directory to write the generated traces to (kept)")
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    sizes = args.sizes or (SMOKE_SIZES if args.smoke else FULL_SIZES)
    directory = args.keep or tempfile.mkdtemp(prefix="analyzer-scale-")
    os.makedirs(directory, exist_ok=True)
    baseline_wall, baseline_rss, _ = measure([sys.executable, "-c", "import otel_coldstart.cli"])
    results = {"python": sys.version.split()[0], "baseline": {"wall_s": baseline_wall, "peak_rss_bytes": baseline_rss},
               "runs": []}
    print(f"{'spans':>10}{'file MiB':>10}{'wall s':>9}{'us/span':>9}{'peak RSS MiB':>14}{'RSS B/span':>12}")
    for size in sizes:
        path = os.path.join(directory, f"trace-{size}.otlp.jsonl")
        file_bytes = write_trace(path, size)
        wall, rss, code = measure([sys.executable, "-m", "otel_coldstart", "analyze", path, "--format", "json"])
        if code != 0:
            print(f"analyze exited {code} on {path}", file=sys.stderr)
            return 1
        run = {"spans": size, "file_bytes": file_bytes, "wall_s": wall, "peak_rss_bytes": rss,
               "us_per_span": (wall - baseline_wall) / size * 1e6,
               "rss_bytes_per_span": (rss - baseline_rss) / size}
        results["runs"].append(run)
        print(f"{size:>10}{file_bytes / 2**20:>10.1f}{wall:>9.2f}{run['us_per_span']:>9.1f}"
              f"{rss / 2**20:>14.1f}{run['rss_bytes_per_span']:>12.0f}")
        if not args.keep:
            os.unlink(path)
    if not args.keep:
        os.rmdir(directory)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
