"""CPU to read an OTLP JSON Lines file into Span records, and nothing else (no checks, no
repair, no analysis): the reading path of analyze/compare/capacity (analyze/readers.py
BatchReader, the msgspec fast path). The cyclic collector is paused, as the CLI pauses it.

    python benchmarks/read_cpu.py /tmp/fleet/all.jsonl                    # this checkout, 3 runs
    python benchmarks/read_cpu.py /tmp/fleet/all.jsonl --against /work/main --runs 5

``--against DIR``: another checkout (its ``otel_coldstart/``), run alternately with this one,
each run in a fresh process; the medians and their ratio are printed. CPU time is
``time.process_time()`` of the reading alone; on a shared machine, take it in a quiet window.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_ONE_RUN = """
import gc, sys, time
sys.path.insert(0, sys.argv[1])
from otel_coldstart.analyze.readers import BatchReader
assert __import__("otel_coldstart").__file__.startswith(sys.argv[1])
gc.disable()
start, spans = time.process_time(), 0
for batch in BatchReader(sys.argv[2], 1 << 40):
    spans += len(batch.spans)
print(time.process_time() - start, spans)
"""


def one_run(root: str, path: str) -> tuple[float, int]:
    out = subprocess.run([sys.executable, "-c", _ONE_RUN, os.path.abspath(root), path], check=True,
                         capture_output=True, text=True).stdout.split()
    return float(out[0]), int(out[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--against", metavar="DIR", help="another checkout, run alternately with this one")
    args = parser.parse_args()
    roots = [HERE] + ([args.against] if args.against else [])
    times: dict[str, list[float]] = {root: [] for root in roots}
    for _ in range(args.runs):
        for root in roots:
            cpu, spans = one_run(root, args.file)
            times[root].append(cpu)
            print(f"{root}: {cpu:.2f} s CPU, {spans} spans", flush=True)
    for root, values in times.items():
        print(f"median {statistics.median(values):.2f} s  {root}")
    if args.against:
        print(f"ratio {statistics.median(times[HERE]) / statistics.median(times[args.against]):.2f} "
              f"(this checkout / {args.against})")


if __name__ == "__main__":
    main()
