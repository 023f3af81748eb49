"""What importing otel-coldstart and calling instrument() costs a fresh process, as users run it:
bytecode cached (``PYTHONDONTWRITEBYTECODE`` removed from the environment, one warm-up run
compiles the ``.pyc`` files first), the embedded default exporter (OTLP JSON file).

Per run, in a fresh interpreter: the wall time of ``import otel_coldstart`` and of
``otel_coldstart.instrument()`` (``time.perf_counter`` around each), their CPU time
(``time.process_time``: what the process itself spent, which other tenants' load inflates
much less than wall time), and the
``coldstart.import.own_s`` the plugin records on its import span. Alternately, the same
statement under ``python -X importtime``: the cumulative import time of ``otel_coldstart``
and of the OpenTelemetry SDK modules it pulls in. Medians with min-max, and the machine's
load average before and after (this VM's 2 cores are shared).

    python benchmarks/import_cost.py --runs 15 [--torch-first] [--json out.json]
    python benchmarks/import_cost.py --runs 30 --against CHECKOUT [CHECKOUT ...]

``--against`` compares checkouts side by side (``git worktree add --detach DIR COMMIT``): this
one and each other, alternated process by process in one run (the child imports each
through ``PYTHONPATH``, and says which file it imported), with and without torch first. On
this VM the same code's fixed cost moves by 1.5x from one hour to the next, so a figure is
only comparable with one measured beside it.

``--torch-first`` imports torch and safetensors before the first clock (as a serving framework's
process has), so what is measured is the plugin's own share; ``ready()`` is timed too, and the
fixed cost row is import + ``instrument()`` + ``ready()`` (issue 24: <= 30 ms, <= 15 ms with
torch first).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import load_average, machine  # noqa: E402

CHILD = r"""
import json, time
FIRST
c0, t0 = time.process_time(), time.perf_counter()
import otel_coldstart
c1, t1 = time.process_time(), time.perf_counter()
otel_coldstart.instrument(summary=False, handle_sigterm=False)
c2, t2 = time.process_time(), time.perf_counter()
own = None
from otel_coldstart.controller import CONTROLLER  # loaded by instrument(): the face is lazy
session = CONTROLLER.session
if session is not None:
    for record in session.records():
        if record.name == "coldstart.import":
            own = record.attributes.get("coldstart.import.own_s")
c3, t3 = time.process_time(), time.perf_counter()
otel_coldstart.ready()
c4, t4 = time.process_time(), time.perf_counter()
print(json.dumps({"file": otel_coldstart.__file__, "import_s": t1 - t0, "instrument_s": t2 - t1, "own_s": own, "ready_s": t4 - t3,
                  "import_cpu_s": c1 - c0, "instrument_cpu_s": c2 - c1, "ready_cpu_s": c4 - c3}))
"""
# --torch-first: the host imported torch and safetensors before the plugin (the common case for
# a plugin loaded by a serving framework); what is left is the plugin's own share.
TORCH_FIRST = "import torch, safetensors.torch"
IMPORTTIME_MODULES = ("otel_coldstart", "otel_coldstart.controller", "opentelemetry.sdk.trace", "opentelemetry.sdk.resources", "wrapt",
                      "opentelemetry.trace")
_IMPORTTIME_LINE = re.compile(r"^import time:\s+(\d+)\s+\|\s+(\d+)\s+\|(\s*)(\S+)\s*$")


def _env(output_dir: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_") and k != "PYTHONDONTWRITEBYTECODE"}
    env["OTEL_COLDSTART_OUTPUT_DIR"] = output_dir
    return env


def child(torch_first: bool) -> str:
    return CHILD.replace("FIRST", TORCH_FIRST if torch_first else "")


def _fixed_cpu_s(run: dict) -> float:
    return run["import_cpu_s"] + run["instrument_cpu_s"] + run["ready_cpu_s"]


def _fixed_wall_s(run: dict) -> float:
    return run["import_s"] + run["instrument_s"] + run["ready_s"]


def compare_checkouts(checkouts: list[str], runs: int, env: dict) -> list[dict]:
    """Each checkout's fixed cost, with and without torch first, alternated process by process
    (the order reversed every other round, so that neither always runs first)."""
    results = {(checkout, torch_first): [] for torch_first in (True, False) for checkout in checkouts}
    for (checkout, torch_first) in results:  # warm-up: compiles each checkout's .pyc files
        run_once(dict(env, PYTHONPATH=checkout), torch_first)
    for number in range(runs):
        order = checkouts if number % 2 == 0 else checkouts[::-1]
        for torch_first in (True, False):
            for checkout in order:
                run = run_once(dict(env, PYTHONPATH=checkout), torch_first)
                if not os.path.realpath(run["file"]).startswith(os.path.realpath(checkout) + os.sep):
                    raise SystemExit(f"the child imported {run['file']}, not {checkout}'s otel_coldstart")
                results[(checkout, torch_first)].append(run)
    return [{"checkout": checkout, "commit": _commit(checkout), "torch_first": torch_first, "runs": found}
            for (checkout, torch_first), found in results.items()]


def _commit(checkout: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", checkout, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10)
    except OSError:
        return None
    return done.stdout.strip() or None


def run_once(env: dict, torch_first: bool = False) -> dict:
    # Run from the scratch directory: ``-c`` puts the working directory first on sys.path, ahead
    # of PYTHONPATH, so a child started in a checkout imports that checkout whatever it was given.
    done = subprocess.run([sys.executable, "-c", child(torch_first)], env=env, capture_output=True, text=True,
                          timeout=120, check=True, cwd=env["OTEL_COLDSTART_OUTPUT_DIR"])
    return json.loads(done.stdout.strip().splitlines()[-1])


def importtime_once(env: dict, torch_first: bool = False) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", child(torch_first)], env=env,
                          capture_output=True, text=True, timeout=120, check=True, cwd=env["OTEL_COLDSTART_OUTPUT_DIR"])
    cumulative: dict[str, float] = {}
    for line in done.stderr.splitlines():
        match = _IMPORTTIME_LINE.match(line)
        if match and match.group(4) in IMPORTTIME_MODULES and match.group(4) not in cumulative:
            cumulative[match.group(4)] = int(match.group(2)) / 1e6
    return cumulative


def _summary(values: list[float]) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    return f"{statistics.median(values) * 1000:.0f} ms ({min(values) * 1000:.0f}-{max(values) * 1000:.0f})"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="fresh processes per measurement (default 15)")
    parser.add_argument("--json", default=None, help="also write every run here")
    parser.add_argument("--torch-first", action="store_true",
                        help="import torch and safetensors before the first clock (the plugin's own share)")
    parser.add_argument("--against", nargs="+", metavar="CHECKOUT", default=None,
                        help="other checkouts to alternate with this one (fixed cost only, both with and "
                             "without torch first)")
    args = parser.parse_args(argv)
    if args.against:
        return _main_against(args)
    with tempfile.TemporaryDirectory(prefix="coldstart-import-") as output_dir:
        env = _env(output_dir)
        run_once(env, args.torch_first)  # warm-up: compiles and caches the .pyc files
        load_before = load_average()
        runs, importtimes = [], []
        for _ in range(args.runs):
            runs.append(run_once(env, args.torch_first))
            importtimes.append(importtime_once(env, args.torch_first))
        load_after = load_average()
    rows = [
        ("import otel_coldstart (wall, in the process)", _summary([r["import_s"] for r in runs])),
        ("otel_coldstart.instrument() (wall)", _summary([r["instrument_s"] for r in runs])),
        ("import + instrument() (wall)", _summary([r["import_s"] + r["instrument_s"] for r in runs])),
        ("import + instrument() (CPU time of the process: less sensitive to other load)",
         _summary([r["import_cpu_s"] + r["instrument_cpu_s"] for r in runs])),
        ("coldstart.import.own_s (recorded on the span)", _summary([r["own_s"] for r in runs])),
        ("ready() (wall)", _summary([r["ready_s"] for r in runs])),
        ("fixed cost: import + instrument() + ready() (wall)", _summary([_fixed_wall_s(r) for r in runs])),
        ("fixed cost (CPU time of the process)", _summary([_fixed_cpu_s(r) for r in runs])),
    ]
    for module in IMPORTTIME_MODULES:
        rows.append((f"-X importtime cumulative: {module}", _summary([t.get(module) for t in importtimes])))
    facts = machine()
    print(f"runs: {args.runs} fresh processes per row, bytecode cached"
          f"{'; torch and safetensors imported first' if args.torch_first else ''}; python {sys.version.split()[0]}; "
          f"commit {facts.get('git_commit')}; load average {load_before} -> {load_after}")
    print("| measurement | median (min-max) |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")
    if args.json:
        with open(args.json, "x", encoding="utf-8") as handle:
            json.dump({"machine": facts, "load_before": load_before, "load_after": load_after, "runs": runs,
                       "importtime": importtimes}, handle, indent=1)
    return 0


def _main_against(args) -> int:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    checkouts = [here] + [os.path.abspath(path) for path in args.against]
    for checkout in checkouts:
        if not os.path.isfile(os.path.join(checkout, "otel_coldstart", "__init__.py")):
            raise SystemExit(f"{checkout}: not a checkout of otel-coldstart (no otel_coldstart/__init__.py)")
    with tempfile.TemporaryDirectory(prefix="coldstart-import-") as output_dir:
        load_before = load_average()
        results = compare_checkouts(checkouts, args.runs, _env(output_dir))
        load_after = load_average()
    print(f"runs: {args.runs} fresh processes per row, checkouts alternated process by process, bytecode cached; "
          f"python {sys.version.split()[0]}; load average {load_before} -> {load_after}")
    print("| checkout | commit | torch imported first | fixed cost, CPU time of the process | same, wall |\n"
          "|---|---|---|---|---|")
    for result in results:
        runs = result["runs"]
        print(f"| {result['checkout']} | {result['commit'] or '-'} | {'yes' if result['torch_first'] else 'no'} | "
              f"{_summary([_fixed_cpu_s(r) for r in runs])} | {_summary([_fixed_wall_s(r) for r in runs])} |")
    if args.json:
        with open(args.json, "x", encoding="utf-8") as handle:
            json.dump({"machine": machine(), "load_before": load_before, "load_after": load_after,
                       "results": results}, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
