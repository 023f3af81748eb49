"""What recording the imports after ``instrument()`` costs (patches/imports.py): per imported
module, and in total for ``import torch, transformers``.

Every figure is paired: each run starts two fresh interpreters alternately (A B, B A, ...),
both calling ``instrument()``; in the baseline one the import patch is removed right after
(``patches.imports.unpatch()``), so the only difference is the hook. Bytecode is cached
(``PYTHONDONTWRITEBYTECODE`` dropped; one warm-up run of each side first).

- ``package``: ``import torch, transformers`` (``time.perf_counter`` and ``time.process_time``
  around it); the figure is the median of the per-pair differences and of their ratio to
  the baseline's time. The goal (issue 26): at most 2% of the import time.
- ``self``: the same import in one more interpreter whose hook functions are themselves timed
  (``perf_counter_ns`` around each call): the hook's own time, summed, over the import's CPU
  time; and, inside it, the time of the calls that say why an import was slow (issue 38: the
  storage counter, the thread's CPU clock and its run-queue wait at each end of a top-level
  import). Robust to other tenants' load, where the paired difference is not; it leaves out
  cache effects, which the paired figure includes.
- ``per_module``: 2000 generated one-line modules imported by one top-level import (each
  nested, as a library's modules are) and, separately, 500 imported one by one at top level
  (each a span candidate: the more expensive path); the per-module cost is the paired
  difference divided by the module count.

    python benchmarks/import_hook_cost.py --runs 15 [--json out.json]

Timing on a shared 2-core VM is noisy: take figures in a quiet window; --runs 1 is a smoke run.
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

from common import load_average, machine, write_json  # noqa: E402

NESTED_MODULES = 2000
TOP_LEVEL_MODULES = 500

CHILD = r"""
import json, sys, time
spent = [0, 0]
evidence = [0, 0]  # issue 38's evidence: the time in its calls, how many
if sys.argv[1] == "self":
    from otel_coldstart.patches import imports as _timed
    _enter, _leave, _clock = _timed._enter, _timed._leave, time.perf_counter_ns
    def _timed_enter(name):
        start = _clock(); frame = _enter(name); spent[0] += _clock() - start; spent[1] += 1
        return frame
    def _timed_leave(frame, failed):
        start = _clock(); _leave(frame, failed); spent[0] += _clock() - start
    _timed._enter, _timed._leave = _timed_enter, _timed_leave
    def _timed_evidence(function):
        def timed(*args):
            start = _clock(); result = function(*args); evidence[0] += _clock() - start; evidence[1] += 1
            return result
        return timed
    # Why an import was slow (issue 38): the storage counter, the thread's CPU clock and its
    # run-queue wait at each end of a top-level import, and the attributes they make (the
    # wrappers' own cost included).
    for _name in ("_process_read_blocks", "_runqueue_wait_ns", "_why_slow"):  # the leaves: none calls another
        setattr(_timed, _name, _timed_evidence(getattr(_timed, _name)))
    time.thread_time_ns = _timed_evidence(time.thread_time_ns)
import otel_coldstart
otel_coldstart.instrument(summary=False, handle_sigterm=False)
if sys.argv[1] == "off":
    from otel_coldstart.patches import imports
    imports.unpatch()
kind = sys.argv[2]
from otel_coldstart.patches import imports as _imports
assert _imports.is_patched() == (sys.argv[1] != "off")
c0, t0 = time.process_time(), time.perf_counter()
if kind == "package":
    import torch, transformers
elif kind == "nested":
    import gen_all
else:
    for number in range(int(sys.argv[3])):
        __import__(f"top_{number:05d}")
c1, t1 = time.process_time(), time.perf_counter()
print(json.dumps({"wall_s": t1 - t0, "cpu_s": c1 - c0, "modules": len(sys.modules),
                  "hook_s": spent[0] / 1e9, "hook_calls": spent[1],
                  "evidence_s": evidence[0] / 1e9, "evidence_calls": evidence[1]}))
otel_coldstart.ready()
"""


def _write_modules(directory: str) -> None:
    lines = []
    for number in range(NESTED_MODULES):
        name = f"gen_{number:05d}"
        with open(os.path.join(directory, name + ".py"), "w", encoding="utf-8") as handle:
            handle.write(f"VALUE = {number}\n")
        lines.append(f"import {name}\n")
    with open(os.path.join(directory, "gen_all.py"), "w", encoding="utf-8") as handle:
        handle.writelines(lines)
    for number in range(TOP_LEVEL_MODULES):
        with open(os.path.join(directory, f"top_{number:05d}.py"), "w", encoding="utf-8") as handle:
            handle.write(f"VALUE = {number}\n")


def _run(side: str, kind: str, directory: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_") and k != "PYTHONDONTWRITEBYTECODE"}
    env["OTEL_COLDSTART_OUTPUT_DIR"] = os.path.join(directory, "traces")  # the embedded default: a file
    env["OTEL_COLDSTART_SUMMARY"] = "0"
    env["PYTHONPATH"] = directory + os.pathsep + env.get("PYTHONPATH", "")
    completed = subprocess.run([sys.executable, "-c", CHILD, side, kind, str(TOP_LEVEL_MODULES)], cwd=directory,
                               env=env, capture_output=True, text=True, timeout=600)
    if completed.returncode != 0:
        raise SystemExit(f"child failed ({side} {kind}):\n{completed.stderr}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def _pairs(kind: str, runs: int, directory: str) -> list[tuple[dict, dict]]:
    _run("on", kind, directory), _run("off", kind, directory)  # warm-up: .pyc files, page cache
    pairs = []
    for number in range(runs):
        if number % 2:
            off, on = _run("off", kind, directory), _run("on", kind, directory)
        else:
            on, off = _run("on", kind, directory), _run("off", kind, directory)
        pairs.append((on, off))
    return pairs


def _summary(pairs, per: int | None) -> dict:
    out = {}
    for key in ("wall_s", "cpu_s"):
        deltas = [on[key] - off[key] for on, off in pairs]
        ratios = [(on[key] - off[key]) / off[key] for on, off in pairs if off[key] > 0]
        out[key] = {"baseline_median": statistics.median(off[key] for _, off in pairs),
                    "delta_median": statistics.median(deltas), "delta_min": min(deltas), "delta_max": max(deltas),
                    "ratio_median": statistics.median(ratios) if ratios else None}
        if per:
            out[key]["per_module_us"] = statistics.median(deltas) / per * 1e6
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    before = load_average()
    with tempfile.TemporaryDirectory() as directory:
        _write_modules(directory)
        package = _pairs("package", args.runs, directory)
        timed = [_run("self", "package", directory) for _ in range(args.runs)]
        nested = _pairs("nested", args.runs, directory)
        top = _pairs("top", args.runs, directory)
    doc = {"machine": machine(), "load_before": before, "load_after": load_average(), "runs": args.runs,
           "package": _summary(package, None), "nested": _summary(nested, NESTED_MODULES),
           "top_level": _summary(top, TOP_LEVEL_MODULES),
           "modules_after_package_import": package[0][0]["modules"],
           "self": {"hook_s_median": statistics.median(r["hook_s"] for r in timed),
                    "hook_calls": timed[0]["hook_calls"],
                    "share_of_cpu_median": statistics.median(r["hook_s"] / r["cpu_s"] for r in timed),
                    "evidence_s_median": statistics.median(r["evidence_s"] for r in timed),
                    "evidence_calls": timed[0]["evidence_calls"],
                    "evidence_share_of_cpu_median": statistics.median(r["evidence_s"] / r["cpu_s"] for r in timed)}}
    p, n, t = doc["package"], doc["nested"], doc["top_level"]
    print(f"| measure ({args.runs} paired runs, medians) | baseline | with the hook | cost |")
    print("|---|---:|---:|---:|")
    for label, key in (("`import torch, transformers` wall", "wall_s"), ("`import torch, transformers` CPU", "cpu_s")):
        base, delta, ratio = p[key]["baseline_median"], p[key]["delta_median"], p[key]["ratio_median"]
        print(f"| {label} | {base:.3f} s | {base + delta:.3f} s | {delta * 1e3:+.1f} ms ({ratio * 100:+.2f}%) |")
    own = doc["self"]
    print(f"| hook's own time in `import torch, transformers` ({own['hook_calls']} calls) | | | "
          f"{own['hook_s_median'] * 1e3:.1f} ms ({own['share_of_cpu_median'] * 100:.2f}% of its CPU) |")
    print(f"| of which why imports are slow (issue 38: {own['evidence_calls']} calls) | | | "
          f"{own['evidence_s_median'] * 1e3:.2f} ms ({own['evidence_share_of_cpu_median'] * 100:.3f}% of its CPU) |")
    for label, block in (("per nested module", n), ("per top-level import", t)):
        print(f"| {label} (CPU) | | | {block['cpu_s']['per_module_us']:+.2f} us |")
    print(f"load average before {before}, after {doc['load_after']}")
    if args.json:
        write_json(args.json, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
