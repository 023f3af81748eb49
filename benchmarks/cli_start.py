"""How long the ``otel-coldstart`` command takes to start and finish, in a fresh process, for
``--help`` and for ``analyze`` of a small trace (the demo's cold start-up), this checkout
against others alternated run by run, as users run it: bytecode cached
(``PYTHONDONTWRITEBYTECODE`` removed from the environment, one warm-up run of each case
writes the ``.pyc`` files first).

    python benchmarks/cli_start.py --runs 20 --against CHECKOUT [CHECKOUT ...]

A checkout is a directory holding ``otel_coldstart/`` (``git worktree add --detach DIR
COMMIT``, or ``git archive COMMIT | tar -x -C DIR``); each child imports it through
``PYTHONPATH`` and says which file it imported. Figures: per case and checkout, the median
wall time (min-max), and the median of the per-round ratios to this checkout's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import REPO_ROOT, load_average, paired_ratios, rotated, summary  # noqa: E402

TRACE = os.path.join(REPO_ROOT, "tests", "data", "traces", "demo-cold-first-shard.otlp.jsonl")
CASES = {"--help": ["--help"], "analyze x.json": ["analyze", TRACE]}
# The console script's own code (pip's entry-point wrapper), with the file imported said on stderr.
CHILD = ("import sys, otel_coldstart.cli as cli; print(cli.__file__, file=sys.stderr); "
         "sys.argv[0] = 'otel-coldstart'; sys.exit(cli.main())")


def run_once(checkout: str, args: list[str], scratch: str) -> tuple[float, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_") and k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = checkout
    start = time.perf_counter()
    # From the scratch directory: ``-c`` puts the working directory ahead of PYTHONPATH.
    done = subprocess.run([sys.executable, "-c", CHILD, *args], env=env, cwd=scratch, capture_output=True,
                          text=True, timeout=120)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{checkout}: {' '.join(args)}: exit {done.returncode}\n{done.stderr}")
    return elapsed, done.stderr.splitlines()[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--against", nargs="*", default=[], metavar="CHECKOUT")
    args = parser.parse_args()
    checkouts = [REPO_ROOT, *(os.path.abspath(c) for c in args.against)]
    print(f"load average before: {load_average()}")
    with tempfile.TemporaryDirectory() as scratch:
        for name, argv in CASES.items():
            for checkout in checkouts:  # writes the .pyc files, and checks which code is imported
                _, imported = run_once(checkout, argv, scratch)
                assert imported.startswith(checkout), (checkout, imported)
            rounds = []
            for n in range(args.runs):
                rounds.append({c: run_once(c, argv, scratch)[0] for c in rotated(checkouts, n)})
            print(f"\n`otel-coldstart {name}` ({args.runs} rounds)")
            for checkout in checkouts:
                s = summary([r[checkout] for r in rounds])
                ratio = summary(paired_ratios(rounds, checkout, REPO_ROOT, lambda seconds: seconds))
                print(f"  {checkout}: median {s['median'] * 1e3:.0f} ms ({s['min'] * 1e3:.0f}-{s['max'] * 1e3:.0f}); "
                      f"ratio to this checkout {ratio['median']:.2f} ({ratio['min']:.2f}-{ratio['max']:.2f})")
    print(f"\nload average after: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
