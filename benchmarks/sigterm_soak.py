"""SIGTERM soak: kill busy start-ups at random moments and check that every one exits
promptly, dies of SIGTERM, and leaves a trace that says what was running.

Each run is a fresh process that instruments (embedded default exporter: the OTLP JSON
file), then loops for ever inside a ``phase()``:

- ``copy_loop``: ``.to(torch.float16)`` and ``copy_`` on small tensors, the tightest loop
  through the per-call patches and the recorder's lock (where a handler that ended the
  start-up inside the signal handler used to hang);
- ``load_loop``: ``safe_open`` / ``get_tensor`` over a generated 4-shard checkpoint.

It prints ``GO`` from inside the phase; SIGTERM follows after a random delay (0-300 ms).
A run passes when the process exits within ``export_timeout_s + 1 s`` of the signal, with
status -15, and its trace holds ``model.startup`` (end reason ``sigterm``) and the loop's
phase span marked ``coldstart.interrupted``. A run still alive 30 s after the signal is a
hang (killed, counted).

    .venv/bin/python benchmarks/sigterm_soak.py --runs 200 --json /tmp/soak.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
if REPO not in sys.path:
    sys.path.insert(0, REPO)

EXPORT_TIMEOUT_S = 2.0
HANG_AFTER_S = 30.0

CHILD = r"""
import sys
import otel_coldstart
otel_coldstart.instrument(export_timeout_s=float(sys.argv[2]), summary=False)
import torch
from safetensors import safe_open
torch.set_num_threads(1)
mode = sys.argv[1]
shards = sys.argv[3:]
with otel_coldstart.phase(mode):
    print("GO", flush=True)
    if mode == "copy_loop":
        src = torch.ones(64)
        dst = torch.empty(64)
        while True:
            src.to(torch.float16)
            dst.copy_(src)
    else:
        while True:
            for path in shards:
                with safe_open(path, framework="pt") as handle:
                    for name in handle.keys():
                        handle.get_tensor(name)
"""


def make_checkpoint(directory: str) -> list[str]:
    from otel_coldstart.demo import LlamaShape, generate_checkpoint

    shape = LlamaShape(vocab=512, hidden=64, intermediate=128, layers=2, shards=4)
    return [str(p) for p in generate_checkpoint(directory, shape)]


def one_run(mode: str, shards: list[str], workdir: str, rng: random.Random) -> dict:
    out_dir = tempfile.mkdtemp(prefix=f"{mode}-", dir=workdir)
    env = dict(os.environ, OTEL_COLDSTART_OUTPUT_DIR=out_dir)
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    env.pop("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", None)
    proc = subprocess.Popen([sys.executable, "-c", CHILD, mode, str(EXPORT_TIMEOUT_S), *shards],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=out_dir)
    result = {"mode": mode}
    try:
        line = proc.stdout.readline().strip()
        if line != "GO":
            proc.kill()
            proc.wait()
            result.update(error="child did not start: " + proc.stderr.read()[-500:])
            return result
        delay = rng.uniform(0.0, 0.3)
        time.sleep(delay)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=HANG_AFTER_S)
            result["hang"] = False
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            result["hang"] = True
        result.update(delay_s=delay, exit_s=time.monotonic() - sent, returncode=proc.returncode)
        result.update(check_trace(out_dir, mode))
        stderr = proc.stderr.read()
        result["traceback"] = "Traceback" in stderr
        return result
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def check_trace(out_dir: str, phase: str) -> dict:
    from otel_coldstart import semconv
    from otel_coldstart.analyze.readers import read_trace_file

    files = [os.path.join(out_dir, n) for n in os.listdir(out_dir) if n.endswith(".otlp.jsonl")]
    if len(files) != 1:
        return {"root": False, "end_reason": None, "phase_interrupted": False, "files": len(files)}
    spans = read_trace_file(files[0])
    roots = [s for s in spans if s.name == semconv.SPAN_ROOT]
    phases = [s for s in spans if s.name == semconv.phase_span_name(phase)]
    return {
        "root": len(roots) == 1,
        "end_reason": roots[0].attributes.get(semconv.END_REASON) if roots else None,
        "end_phase": roots[0].attributes.get(semconv.END_PHASE) if roots else None,
        "phase_interrupted": len(phases) == 1 and phases[0].attributes.get(semconv.INTERRUPTED) is True,
        "spans": len(spans),
    }


def passed(run: dict) -> bool:
    return (not run.get("error") and not run["hang"] and run["returncode"] == -signal.SIGTERM
            and run["exit_s"] <= EXPORT_TIMEOUT_S + 1.0 and run["root"] and run["end_reason"] == "sigterm"
            and run["phase_interrupted"] and not run["traceback"])


def summarise(runs: list[dict]) -> dict:
    exits = [r["exit_s"] for r in runs if "exit_s" in r]
    return {
        "runs": len(runs),
        "passed": sum(passed(r) for r in runs),
        "hangs": sum(bool(r.get("hang")) for r in runs),
        "errors": sum(bool(r.get("error")) for r in runs),
        "status_minus_15": sum(r.get("returncode") == -signal.SIGTERM for r in runs),
        "within_bound": sum(r.get("exit_s", 1e9) <= EXPORT_TIMEOUT_S + 1.0 for r in runs),
        "with_root": sum(bool(r.get("root")) for r in runs),
        "phase_interrupted": sum(bool(r.get("phase_interrupted")) for r in runs),
        "exit_s_median": statistics.median(exits) if exits else None,
        "exit_s_p95": sorted(exits)[max(0, int(len(exits) * 0.95) - 1)] if exits else None,
        "exit_s_max": max(exits) if exits else None,
        "export_timeout_s": EXPORT_TIMEOUT_S,
        "by_mode": {mode: sum(passed(r) for r in runs if r["mode"] == mode)
                    for mode in ("copy_loop", "load_loop")},
        "loadavg": _loadavg(),
    }


def _loadavg() -> str | None:
    try:
        with open("/proc/loadavg", encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="SIGTERMs to send (half per loop kind)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--json", help="write every run and the summary here")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    runs = []
    with tempfile.TemporaryDirectory(prefix="sigterm-soak-") as workdir:
        shards = make_checkpoint(os.path.join(workdir, "ckpt"))
        for index in range(args.runs):
            mode = "copy_loop" if index % 2 == 0 else "load_loop"
            run = one_run(mode, shards, workdir, rng)
            runs.append(run)
            if not passed(run):
                print(f"run {index} ({mode}) FAILED: {json.dumps(run)}", file=sys.stderr, flush=True)
    summary = summarise(runs)
    print(json.dumps(summary, indent=2))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"summary": summary, "runs": runs}, handle, indent=1)
    return 0 if summary["passed"] == summary["runs"] else 1


if __name__ == "__main__":
    sys.exit(main())
