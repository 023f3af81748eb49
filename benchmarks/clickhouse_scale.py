"""capacity --clickhouse at fleet size (issue 40): N start-ups of 50 spans each written by SQL
into the Collector ClickHouse exporter's own ``otel_traces`` table in a chDB data directory,
then ``otel-coldstart capacity --clickhouse chdb:PATH`` in a fresh process: its wall time and
the analyzer's own Python heap peak (tracemalloc; the engine's memory is chDB's, aside).
Goal: 100,000 start-ups (5M spans) in <= 10 s and <= 300 MB of Python heap on the 2-core
machine.

    python benchmarks/clickhouse_scale.py                   # 100,000 start-ups
    python benchmarks/clickhouse_scale.py --startups 2000   # seconds

Each start-up: the root, import, import_libraries, build_model, 16 deserialize spans (cold or
warm, file size and storage bytes), 16 h2d and 12 cast aggregates (busy_s), a graph-capture
aggregate and a warm-up, all on one thread, one start-up in 25 SIGTERMed (not ready);
three instance types, two clusters. Results go in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

T0 = 1_780_000_000_000_000_000
STEP_NS = 20 * 10**9  # one start-up every 20 s: 100,000 over 23 days
SPANS = 50

GENERATE = f"""
INSERT INTO otel_traces (Timestamp, TraceId, SpanId, ParentSpanId, SpanName, SpanKind, ServiceName,
                         ResourceAttributes, ScopeName, SpanAttributes, Duration, StatusCode)
SELECT fromUnixTimestamp64Nano(toInt64({T0} + k * {STEP_NS} + off)), tid,
       leftPad(lower(hex(k * 64 + i + 1)), 16, '0'), if(i = 0, '', leftPad(lower(hex(k * 64 + 1)), 16, '0')),
       if(i = 0, 'model.startup', concat('coldstart.', phase)), 'Internal', 'llm-server',
       map('service.name', 'llm-server', 'host.type', host, 'k8s.cluster.name', if(k % 5 = 0, 'staging', 'prod'),
           'process.pid', toString(1000 + k % 30000)),
       'otel_coldstart',
       if(i = 0,
          map('coldstart.ready', if(sigterm, 'false', 'true'), 'coldstart.end_reason', if(sigterm, 'sigterm', 'ready'),
              'thread.id', '140000000000001', 'coldstart.rank', '0', 'coldstart.world_size', '1'),
          mapUpdate(map('coldstart.phase', phase, 'thread.id', '140000000000001'),
             multiIf(phase IN ('h2d', 'cast', 'graph_capture'),
                       map('coldstart.aggregate', 'true', 'coldstart.busy_s', toString(dur * 0.9 / 1e9)),
                     phase = 'deserialize',
                       map('coldstart.file.size', '2147483648', 'coldstart.cache.state', if(cold, 'cold', 'warm'),
                           'coldstart.cache.storage_read_bytes', if(cold, '2147483648', '0')),
                     map()))),
       dur, 'Unset'
FROM (
  SELECT number DIV {SPANS} AS k, number % {SPANS} AS i, cityHash64(number) AS h,
         concat(lower(hex(cityHash64(k))), leftPad(lower(hex(k)), 16, '0')) AS tid,
         ['g5.12xlarge', 'p4d.24xlarge', 'g6e.xlarge'][k % 3 + 1] AS host,
         k % 25 = 24 AS sigterm, k % 4 != 0 AND i % 2 = 0 AS cold,
         multiIf(i = 0, '', i = 1, 'import', i = 2, 'import_libraries', i = 3, 'build_model', i < 20, 'deserialize',
                 i < 36, 'h2d', i < 48, 'cast', i = 48, 'graph_capture', 'warmup') AS phase,
         if(i = 0, 0, (i - 1) * 200000000 + 1000000) AS off,
         toUInt64(if(i = 0, {SPANS - 1} * 200000000 + 50000000,
                     50000000 + h % 140000000 + if(phase = 'deserialize' AND cold, 2000000000, 0)
                     + if(k % 3 = 2, 30000000, 0))) AS dur
  FROM numbers({{n}})
)
"""

# Timed without tracemalloc (it doubles the cost of Python's allocations); the heap peak is
# from a second run of the same command with it.
CHILD = """
import os, sys, time
traced = os.environ.get("BENCH_TRACEMALLOC") == "1"
if traced:
    import tracemalloc
    tracemalloc.start()
started = time.perf_counter()
from otel_coldstart.cli import main
code = main(sys.argv[1:])
wall = time.perf_counter() - started
peak = f"{tracemalloc.get_traced_memory()[1] / 2**20:.1f}" if traced else "-"
print(f"BENCH wall_s={wall:.3f} heap_peak_mb={peak} rc={code}", file=sys.stderr)
"""


def build(path: str, startups: int) -> float:
    from chdb import session

    from otel_coldstart.sources.clickhouse_ddl import TRACES_TABLE

    started = time.perf_counter()
    s = session.Session(path)
    s.query(TRACES_TABLE.format(table="otel_traces"))
    s.query(GENERATE.replace("{n}", str(startups * SPANS)))
    s.query("OPTIMIZE TABLE otel_traces FINAL")
    s.close()
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--startups", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep", default=None, help="chDB directory to keep (reused when it exists)")
    args = parser.parse_args()
    path = args.keep or tempfile.mkdtemp(prefix="ch-scale-")
    if not os.path.exists(os.path.join(path, "built")):
        print(f"writing {args.startups:,} start-ups ({args.startups * SPANS:,} spans) to {path} ...", file=sys.stderr)
        print(f"  {build(path, args.startups):.1f} s", file=sys.stderr)
        open(os.path.join(path, "built"), "w").close()
    end = T0 + args.startups * STEP_NS
    command = [sys.executable, "-c", CHILD, "capacity", "--clickhouse", f"chdb:{path}", "--from", str(T0 / 1e9),
               "--to", str(end / 1e9 + 1), "--format", "json", "-o", os.devnull]
    results = []
    for _ in range(args.runs):
        load = os.getloadavg()[0]
        before = os.times()
        done = subprocess.run(command, capture_output=True, text=True)
        after = os.times()
        line = next((text for text in done.stderr.splitlines() if text.startswith("BENCH")), done.stderr[-500:])
        figures = dict(part.split("=") for part in line.split()[1:]) if line.startswith("BENCH") else {"error": line}
        traced = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "BENCH_TRACEMALLOC": "1"})
        line = next((text for text in traced.stderr.splitlines() if text.startswith("BENCH")), "")
        figures["heap_peak_mb"] = dict(part.split("=") for part in line.split()[1:]).get("heap_peak_mb") if line else None
        figures["cpu_s"] = f"{after.children_user - before.children_user + after.children_system - before.children_system:.2f}"
        figures["load_before"] = f"{load:.2f}"
        results.append(figures)
        print(json.dumps(figures), file=sys.stderr)
    if not args.keep:
        shutil.rmtree(path, ignore_errors=True)
    print(json.dumps({"startups": args.startups, "spans": args.startups * SPANS, "runs": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
