"""Issue 37: what ``otel_coldstart.first_request()`` costs steady-state serving, and the first
request itself.

Fresh processes, alternated: each one instruments (the embedded default: a local trace file),
calls ``ready()``, serves its first request through a ``@first_request()`` handler, then
times ``--calls`` more calls of a handler doing ``--work-us`` microseconds of Python work, in
one of two arms: ``decorated`` (the same handler under ``@first_request()``, every call after
the first) and ``bare`` (the undecorated handler). Each process also runs the ``with
first_request():`` form after the first request. Reported: ns per call of each arm (the
median of the processes), the difference, and the first request's own overhead (its span,
record and flush: the time of the first decorated call less a bare one), with the load
average (other engineers share this machine)::

    python benchmarks/first_request_cost.py --pairs 10 --calls 200000 [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import load_average  # noqa: E402

CHILD = r"""
import json, sys, time
import otel_coldstart
otel_coldstart.instrument()
arm, calls, work_us = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
spin = int(work_us * 25)  # a few Python operations per microsecond on this machine: roughly work_us

def handler(x):
    total = 0
    for i in range(spin):
        total += i
    return total + x

decorated = otel_coldstart.first_request()(handler)
otel_coldstart.ready()
started = time.perf_counter_ns()
decorated(0)  # the first request: recorded
first_ns = time.perf_counter_ns() - started
started = time.perf_counter_ns()
handler(0)
bare_once_ns = time.perf_counter_ns() - started
fn = decorated if arm == "decorated" else handler
for i in range(1000):  # warm
    fn(i)
started = time.perf_counter_ns()
for i in range(calls):
    fn(i)
per_call = (time.perf_counter_ns() - started) / calls
started = time.perf_counter_ns()
for i in range(calls):
    with otel_coldstart.first_request():
        pass
with_ns = (time.perf_counter_ns() - started) / calls
print(json.dumps({"arm": arm, "per_call_ns": per_call, "first_ns": first_ns, "bare_once_ns": bare_once_ns,
                  "with_block_ns": with_ns}))
"""


def run(pairs: int, calls: int, work_us: float) -> dict:
    results: dict[str, list] = {"decorated": [], "bare": []}
    with tempfile.TemporaryDirectory() as out:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        env.update(OTEL_COLDSTART_OUTPUT_DIR=out, OTEL_COLDSTART_SUMMARY="0")
        for pair in range(pairs):
            arms = ("decorated", "bare") if pair % 2 == 0 else ("bare", "decorated")
            for arm in arms:
                done = subprocess.run([sys.executable, "-c", CHILD, arm, str(calls), str(work_us)], env=env,
                                      capture_output=True, text=True, timeout=600, check=True)
                results[arm].append(json.loads(done.stdout.strip().splitlines()[-1]))
    decorated = statistics.median(r["per_call_ns"] for r in results["decorated"])
    bare = statistics.median(r["per_call_ns"] for r in results["bare"])
    every = results["decorated"] + results["bare"]
    first_overhead = statistics.median(r["first_ns"] - r["bare_once_ns"] for r in every)
    return {"pairs": pairs, "calls": calls, "work_us": work_us, "decorated_ns_per_call": decorated,
            "bare_ns_per_call": bare, "overhead_ns_per_call": decorated - bare,
            "overhead_share": (decorated - bare) / bare if bare else None,
            "with_block_ns_per_call": statistics.median(r["with_block_ns"] for r in every),
            "first_request_overhead_ms": first_overhead / 1e6, "load_average": load_average()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--work-us", type=float, default=20.0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    result = run(args.pairs, args.calls, args.work_us)
    print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=2)


if __name__ == "__main__":
    main()
