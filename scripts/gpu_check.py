#!/usr/bin/env python3
"""GPU check of the device phases: one command, a verdict per check. Needs a CUDA GPU.

Each check runs its workloads in fresh processes (CUDA must start under the instrumentation,
and instrumented and plain runs must not share a process), compares what the plugin reports
with an independent measurement, and gives PASS, FAIL, INCONCLUSIVE (the measurement could
not tell: the baseline itself failed, or the check was not sensitive enough on this machine)
or SKIP (a dependency of that check is missing):

- ``stall``: wall time of pinned non-blocking shard loads (``safe_open`` per shard,
  ``pin_memory()``, ``.to("cuda", non_blocking=True)``), instrumented vs plain, best of
  several runs: within 2%. Once with the device as fast as it is, once with the device side
  slowed to the host side's pace (``torch.cuda._sleep``), where a host wait added at a shard's
  end would cost most. A plain run that synchronises at each shard's end (the defect, made
  on purpose) must be more than 2% slower, or the check is INCONCLUSIVE.
- ``throughput``: the plugin's H2D figures against independent ones: pinned non-blocking
  throughput within +-20% of an event-timed bulk copy of the same bytes; pageable blocking
  throughput within +-20% of a synchronize()-timed loop of the same copies; pinned at least
  1.5x pageable; bytes and the pinned/pageable split as Copy.cu moves them (a blocking
  bf16->fp32 H2D moves fp32 bytes from pageable memory; a non-blocking one bf16 bytes from
  pinned memory).
- ``capture_race``: a capture loop over batch sizes in torch's default (``global``) capture
  mode while another thread pins memory and queues non-blocking copies, plain and
  instrumented: no capture error, replays equal eager results, the capture count and batch
  sizes right, the other thread's copies and pins all counted. A plain run that fails makes
  it INCONCLUSIVE (the workload, not the plugin).
- ``cast_copy``: GPU casts and device-to-device copies (``copy_``, also on a side stream):
  the plugin's device time (``coldstart.copy.async_s``) within +-20% (+0.5 ms) of
  ``synchronize()``-bracketed truth; a blocking H2D queued behind a GPU cast keeps its own
  time and reports the wait (``coldstart.copy.waited_s``); non-blocking ``copy_`` into
  preallocated parameters timed too.
- ``runtime_init``: the plugin's ``runtime_init`` spans (driver start through
  ``is_available()``, then ``_lazy_init``) against the same steps timed separately in a plain
  process (0.5x-2x, +-50 ms), and a ``.to("cuda")`` that is the first CUDA touch does not
  contain the init (its span and the init's do not overlap).
- ``vllm``: ``scripts/gpu_check_vllm.py --decoder``: vLLM on a small generated decoder model
  (random weights, no hub), asserting graph-capture and compile spans. SKIP without vLLM.

Figures go to ``benchmarks/gpu-check/<UTC time>.json`` and ``.md`` (never overwritten) and a
summary is printed. Exit codes: 0 every check passed; 1 a check failed; 2 bad arguments;
3 no CUDA device; 4 a dependency (torch, safetensors, opentelemetry-sdk, otel_coldstart) is
missing; 5 nothing failed but a check was INCONCLUSIVE or SKIPPED. Takes 3-6 minutes on one
H200 (estimated); checks that would run past ``--budget-s`` (540 s) are INCONCLUSIVE, so the
figures are written before scripts/gpu-check.sh's 10-minute limit (124).

Nothing here has run on a GPU yet (written without one): read the first run's figures
critically, and fix the check if a verdict is wrong for a reason outside the plugin.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NO_CUDA, EXIT_MISSING_DEPENDENCY, EXIT_INCONCLUSIVE = 0, 1, 2, 3, 4, 5
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECKS = ("stall", "throughput", "capture_race", "cast_copy", "runtime_init", "vllm")

STALL_TOLERANCE = 0.02  # instrumented may be at most 2% slower than plain
THROUGHPUT_TOLERANCE = 0.20
PINNED_OVER_PAGEABLE = 1.5
DEVICE_TIME_TOLERANCE = 0.20
DEVICE_TIME_SLACK_S = 0.0005
INIT_RATIO = (0.5, 2.0)
INIT_SLACK_S = 0.05
CAPTURE_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
CAPTURE_ROUNDS = 3
CHILD_TIMEOUT_S = 240


class CheckFailed(Exception):
    pass


class OutOfTime(Exception):
    """The run's time budget is spent: the check did not run (INCONCLUSIVE, not FAIL)."""


# time.monotonic() by which every child must be done (set by main from --budget-s), so the
# run writes its figures before the shell wrapper's 10-minute limit kills it.
_deadline = float("inf")


def _time_left(wanted_s: float) -> float:
    left = _deadline - time.monotonic()
    if left < 10:
        raise OutOfTime("the time budget (--budget-s) is spent: not run")
    return min(wanted_s, left)


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


@dataclass
class Verdict:
    check: str
    status: str  # PASS | FAIL | INCONCLUSIVE | SKIP
    reasons: list = field(default_factory=list)
    figures: dict = field(default_factory=dict)


# --- judges: pure functions over figures (tested on CPU with healthy and defective figures) -----

def _verdict(check: str, figures: dict, failures: list, inconclusive: list | None = None) -> Verdict:
    if failures:
        return Verdict(check, "FAIL", failures, figures)
    if inconclusive:
        return Verdict(check, "INCONCLUSIVE", inconclusive, figures)
    return Verdict(check, "PASS", [], figures)


def judge_stall(figures: dict) -> Verdict:
    """figures: {variant: {"plain_s", "instrumented_s", "defect_s"}} (best-of-runs wall times)."""
    failures, inconclusive = [], []
    for variant, f in figures.items():
        plain, instrumented, defect = f["plain_s"], f["instrumented_s"], f.get("defect_s")
        f["overhead"] = instrumented / plain - 1.0
        if instrumented > plain * (1 + STALL_TOLERANCE):
            failures.append(f"{variant}: instrumented {instrumented:.3f} s vs plain {plain:.3f} s "
                            f"(+{f['overhead'] * 100:.1f}% > {STALL_TOLERANCE * 100:.0f}%)")
        if defect is not None:
            f["defect_overhead"] = defect / plain - 1.0
            if defect <= plain * (1 + STALL_TOLERANCE):
                inconclusive.append(f"{variant}: a wait at each shard's end costs only "
                                    f"{f['defect_overhead'] * 100:.1f}% here: this variant cannot see one")
    if inconclusive and len(inconclusive) < len(figures):
        inconclusive = []  # one sensitive variant is enough
    return _verdict("stall", figures, failures, inconclusive)


def _within(value, reference, tolerance, slack=0.0) -> bool:
    return value is not None and reference is not None and abs(value - reference) <= tolerance * reference + slack


def judge_throughput(figures: dict) -> Verdict:
    failures = []
    pinned, pageable = figures.get("plugin_pinned_gbps"), figures.get("plugin_pageable_gbps")
    if not _within(pinned, figures.get("bulk_pinned_gbps"), THROUGHPUT_TOLERANCE):
        failures.append(f"pinned non-blocking: plugin {pinned} GB/s vs event-timed bulk copy "
                        f"{figures.get('bulk_pinned_gbps')} GB/s (more than {THROUGHPUT_TOLERANCE:.0%} apart)")
    if not _within(pageable, figures.get("reference_pageable_gbps"), THROUGHPUT_TOLERANCE):
        failures.append(f"pageable blocking: plugin {pageable} GB/s vs synchronize()-timed "
                        f"{figures.get('reference_pageable_gbps')} GB/s")
    if not (pinned and pageable and pinned >= PINNED_OVER_PAGEABLE * pageable):
        failures.append(f"pinned {pinned} GB/s is not >= {PINNED_OVER_PAGEABLE}x pageable {pageable} GB/s")
    failures += figures.get("accounting_failures", [])
    return _verdict("throughput", figures, failures)


def judge_capture_race(figures: dict) -> Verdict:
    plain, instrumented = figures.get("plain", {}), figures.get("instrumented", {})
    if plain.get("error"):
        return Verdict("capture_race", "INCONCLUSIVE",
                       [f"the workload fails without the plugin too: {plain['error']}"], figures)
    failures = []
    if instrumented.get("error"):
        failures.append(f"instrumented run failed: {instrumented['error']}")
    failures += instrumented.get("failures", [])
    if not instrumented.get("copies") or not instrumented.get("captures_while_copying"):
        return _verdict("capture_race", figures, failures,
                        ["the copy thread and the captures did not overlap: nothing was tested"])
    return _verdict("capture_race", figures, failures)


def judge_cast_copy(figures: dict) -> Verdict:
    failures = list(figures.get("failures", []))
    for name in ("gpu_cast", "d2d_copy", "side_stream_copy", "param_copy"):
        f = figures.get(name)
        if f is None:
            continue
        if not _within(f.get("plugin_device_s"), f.get("truth_s"), DEVICE_TIME_TOLERANCE, DEVICE_TIME_SLACK_S):
            failures.append(f"{name}: plugin device time {f.get('plugin_device_s')} s vs synchronize()-bracketed "
                            f"{f.get('truth_s')} s")
    behind = figures.get("h2d_behind_cast")
    if behind is not None:
        if behind["h2d_busy_s"] > 0.25 * behind["cast_truth_s"] + 0.002:
            failures.append(f"a blocking H2D behind a {behind['cast_truth_s'] * 1e3:.1f} ms GPU cast was charged "
                            f"{behind['h2d_busy_s'] * 1e3:.1f} ms (the cast's time)")
        if not _within(behind.get("h2d_waited_s"), behind["expected_wait_s"], 0.3, 0.002):
            failures.append(f"waited_s {behind.get('h2d_waited_s')} s, expected about {behind['expected_wait_s']} s "
                            f"(the casts' device time not yet done when the copy was called)")
    return _verdict("cast_copy", figures, failures)


def _ratio_ok(value, reference) -> bool:
    if value is None or reference is None:
        return False
    if abs(value - reference) <= INIT_SLACK_S:
        return True
    return reference > 0 and INIT_RATIO[0] <= value / reference <= INIT_RATIO[1]


def judge_runtime_init(figures: dict) -> Verdict:
    plain, instrumented = figures.get("plain", {}), figures.get("instrumented", {})
    failures = list(instrumented.get("failures", []))
    if not _ratio_ok(instrumented.get("driver_s"), plain.get("is_available_s")):
        failures.append(f"driver step {instrumented.get('driver_s')} s vs is_available() timed alone "
                        f"{plain.get('is_available_s')} s")
    if not _ratio_ok(instrumented.get("lazy_init_s"), plain.get("lazy_init_s")):
        failures.append(f"lazy_init step {instrumented.get('lazy_init_s')} s vs torch.cuda.init() timed alone "
                        f"{plain.get('lazy_init_s')} s")
    if instrumented.get("init_overlaps_copy"):
        failures.append("the first .to('cuda') span contains the runtime init (double counted)")
    copy_s, alone = instrumented.get("first_copy_busy_s"), plain.get("first_alloc_and_copy_s")
    if copy_s is not None and alone is not None and copy_s > alone * INIT_RATIO[1] + INIT_SLACK_S:
        failures.append(f"first copy {copy_s} s vs first allocation + copy timed alone {alone} s")
    return _verdict("runtime_init", figures, failures)


def judge_vllm(figures: dict) -> Verdict:
    if figures.get("skipped"):
        return Verdict("vllm", "SKIP", [figures["skipped"]], figures)
    failures = list(figures.get("failures", []))
    if figures.get("exit_code") not in (0, None):
        failures.append(f"gpu_check_vllm.py exited {figures.get('exit_code')}")
    return _verdict("vllm", figures, failures)


JUDGES = {"stall": judge_stall, "throughput": judge_throughput, "capture_race": judge_capture_race,
          "cast_copy": judge_cast_copy, "runtime_init": judge_runtime_init, "vllm": judge_vllm}


# --- the parent: runs children, judges, writes figures ----------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", choices=CHECKS, help="run only this check (repeatable)")
    parser.add_argument("--out-dir", default=os.path.join(ROOT, "benchmarks", "gpu-check"),
                        help="where the JSON and Markdown figures go (default benchmarks/gpu-check)")
    parser.add_argument("--shard-mib", type=int, default=256, help="size of each checkpoint shard (MiB)")
    parser.add_argument("--shards", type=int, default=6)
    parser.add_argument("--budget-s", type=float, default=540,
                        help="seconds the whole run may take; checks past it are INCONCLUSIVE (default 540)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-args", help=argparse.SUPPRESS)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_OK
    if args.shards < 2 or not 8 <= args.shard_mib <= 4096:
        print("gpu-check: --shards must be >= 2 and --shard-mib in 8..4096", file=sys.stderr)
        return EXIT_USAGE
    try:
        import opentelemetry.sdk  # noqa: F401
        import safetensors  # noqa: F401
        import torch

        import otel_coldstart  # noqa: F401
    except ImportError as exc:
        print(f"gpu-check: missing dependency: {exc.name} (pip install -e . safetensors)", file=sys.stderr)
        return EXIT_MISSING_DEPENDENCY
    if args.child:
        return run_child(args.child, json.loads(args.child_args or "{}"))
    if not torch.cuda.is_available():
        print("gpu-check: no CUDA device: this check needs a CUDA GPU (the CPU tests cover the rest)",
              file=sys.stderr)
        return EXIT_NO_CUDA
    global _deadline
    _deadline = time.monotonic() + args.budget_s
    checks = args.only or list(CHECKS)
    started = time.time()
    verdicts = []
    with tempfile.TemporaryDirectory(prefix="otel-coldstart-gpu-check-") as workdir:
        files = write_shards(workdir, args.shards, args.shard_mib * 1024 * 1024)
        for check in checks:
            print(f"gpu-check: {check} ...", file=sys.stderr, flush=True)
            try:
                figures = RUNNERS[check](workdir, files)
                verdict = JUDGES[check](figures)
            except OutOfTime as late:
                verdict = Verdict(check, "INCONCLUSIVE", [str(late)])
            except CheckFailed as failure:
                verdict = Verdict(check, "FAIL", [str(failure)])
            except Exception as error:  # a broken check is a failed check, with its reason
                verdict = Verdict(check, "FAIL", [f"{type(error).__name__}: {error}"])
            verdicts.append(verdict)
            print(f"gpu-check: {check}: {verdict.status} {'; '.join(verdict.reasons)}", file=sys.stderr, flush=True)
    report = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
              "wall_s": round(time.time() - started, 1), "environment": environment(),
              "checks": [asdict(v) for v in verdicts]}
    json_path, md_path = write_report(args.out_dir, report)
    print(render_summary(report))
    print(f"figures: {json_path} {md_path}")
    statuses = {v.status for v in verdicts}
    if "FAIL" in statuses:
        return EXIT_FAILED
    return EXIT_INCONCLUSIVE if statuses - {"PASS"} else EXIT_OK


def environment() -> dict:
    import torch

    loadavg = None
    with contextlib.suppress(OSError):
        with open("/proc/loadavg") as handle:
            loadavg = handle.read().split()[:3]
    return {"device": torch.cuda.get_device_name(0), "device_count": torch.cuda.device_count(),
            "torch": torch.__version__, "cuda": torch.version.cuda, "loadavg": loadavg,
            "python": sys.version.split()[0]}


def write_report(out_dir: str, report: dict) -> tuple[str, str]:
    os.makedirs(out_dir, exist_ok=True)
    stamp = report["started"].replace(":", "")
    base = os.path.join(out_dir, stamp)
    suffix = 0
    while os.path.exists(base + ".json") or os.path.exists(base + ".md"):  # never overwrite
        suffix += 1
        base = os.path.join(out_dir, f"{stamp}-{suffix}")
    with open(base + ".json", "x") as handle:
        json.dump(report, handle, indent=1, default=str)
    with open(base + ".md", "x") as handle:
        handle.write(render_markdown(report))
    return base + ".json", base + ".md"


def render_summary(report: dict) -> str:
    env = report["environment"]
    lines = [f"gpu-check on {env['device']} (torch {env['torch']}, CUDA {env['cuda']}) in {report['wall_s']} s"]
    for check in report["checks"]:
        lines.append(f"  {check['status']:<12} {check['check']:<13} {'; '.join(check['reasons'])}")
    return "\n".join(lines)


def render_markdown(report: dict) -> str:
    env = report["environment"]
    lines = [f"# GPU check, {report['started']}", "",
             f"{env['device']} x{env['device_count']}, torch {env['torch']}, CUDA {env['cuda']}, "
             f"load {env['loadavg']}, {report['wall_s']} s", "",
             "| check | verdict | reasons |", "|---|---|---|"]
    for check in report["checks"]:
        lines.append(f"| {check['check']} | {check['status']} | {'; '.join(check['reasons']) or '-'} |")
    lines.append("")
    for check in report["checks"]:
        lines += [f"## {check['check']}", "", "```json", json.dumps(check["figures"], indent=1, default=str), "```", ""]
    return "\n".join(lines)


def run_child_process(name: str, child_args: dict, timeout_s: float = CHILD_TIMEOUT_S) -> dict:
    """One workload in a fresh interpreter; its figures come back as JSON on the last stdout line."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OTEL_COLDSTART_SUMMARY="0")
    for key in list(env):
        if key.startswith("OTEL_EXPORTER_OTLP"):
            del env[key]  # the children write their own trace file
    command = [sys.executable, os.path.abspath(__file__), "--child", name, "--child-args", json.dumps(child_args)]
    timeout_s = _time_left(timeout_s)
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"{name} did not finish in {timeout_s:.0f} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"error": f"{name} exited {done.returncode}: {done.stderr.strip()[-1500:]}"}
    return json.loads(lines[-1])


def _require(result: dict) -> dict:
    if "error" in result:
        raise CheckFailed(result["error"])
    return result


def run_stall(workdir: str, files: list) -> dict:
    base = {"files": files, "runs": 5}
    calibration = _require(run_child_process("calibrate", base))
    variants = {"device_as_is": 0, "device_at_host_pace": calibration["sleep_cycles_per_tensor"]}
    figures = {}
    for variant, cycles in variants.items():
        times = {}
        for mode in ("plain", "instrumented", "defect", "plain", "instrumented"):  # interleaved
            result = _require(run_child_process("stall", dict(base, mode=mode, sleep_cycles=cycles)))
            times.setdefault(mode, []).append(min(result["wall_s"]))
        figures[variant] = {"plain_s": min(times["plain"]), "instrumented_s": min(times["instrumented"]),
                            "defect_s": min(times["defect"]), "sleep_cycles_per_tensor": cycles,
                            "all_runs_s": times}
    return figures


def run_throughput(workdir: str, files: list) -> dict:
    return _require(run_child_process("throughput", {"files": files}))


def run_capture_race(workdir: str, files: list) -> dict:
    return {mode: run_child_process("capture_race", {"mode": mode}) for mode in ("plain", "instrumented")}


def run_cast_copy(workdir: str, files: list) -> dict:
    return _require(run_child_process("cast_copy", {}))


def run_runtime_init(workdir: str, files: list) -> dict:
    return {mode: _require(run_child_process("runtime_init", {"mode": mode})) for mode in ("plain", "instrumented")}


def run_vllm(workdir: str, files: list) -> dict:
    import importlib.util

    if importlib.util.find_spec("vllm") is None:  # not imported here: it is slow and touches CUDA
        return {"skipped": "vLLM is not installed (pip install vllm)"}
    timeout_s = _time_left(420)
    command = [sys.executable, os.path.join(ROOT, "scripts", "gpu_check_vllm.py"), "--decoder", "--json",
               "--timeout", str(max(30, int(timeout_s) - 20))]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"failures": [f"gpu_check_vllm.py did not finish in {timeout_s:.0f} s"]}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    figures = json.loads(lines[-1]) if lines else {"failures": [done.stderr.strip()[-1500:]]}
    figures["exit_code"] = done.returncode
    if done.returncode == EXIT_MISSING_DEPENDENCY:
        return {"skipped": done.stderr.strip()[-300:]}
    return figures


RUNNERS = {"stall": run_stall, "throughput": run_throughput, "capture_race": run_capture_race,
           "cast_copy": run_cast_copy, "runtime_init": run_runtime_init, "vllm": run_vllm}


def write_shards(workdir: str, shards: int, shard_bytes: int) -> list:
    """bf16 safetensors shards of [2048, 4096] tensors (16 MiB each), random bits."""
    import torch
    from safetensors.torch import save_file

    generator = torch.Generator().manual_seed(0)
    per_tensor = 2048 * 4096 * 2
    files = []
    for shard in range(shards):
        state = {f"layers.{shard}.w{i}": torch.randn(2048, 4096, generator=generator).to(torch.bfloat16)
                 for i in range(max(1, shard_bytes // per_tensor))}
        path = os.path.join(workdir, f"model-{shard + 1:05d}-of-{shards:05d}.safetensors")
        save_file(state, path)
        files.append(path)
    return files


# --- children: each runs in a fresh process ----------------------------------------------------------

class _Instrumented:
    """instrument() with an OTLP JSON file exporter first, before anything touches CUDA; the
    trace is read back through the analyzer's reader, as a user's file would be."""

    def __init__(self) -> None:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor

        import otel_coldstart
        from otel_coldstart.export import OtlpJsonFileExporter

        self.dir = tempfile.mkdtemp(prefix="gpu-check-trace-")
        self.path = os.path.join(self.dir, "trace.otlp.jsonl")
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(OtlpJsonFileExporter(self.path)))
        otel_coldstart.instrument(tracer_provider=self.provider, start_at="instrument", summary=False,
                                  handle_sigterm=False)

    def finish(self) -> "_Trace":
        import otel_coldstart
        from otel_coldstart.analyze.readers import read_trace_file

        otel_coldstart.ready()
        self.provider.force_flush()
        otel_coldstart.uninstrument()
        return _Trace(read_trace_file(self.path))


class _Trace:
    def __init__(self, spans) -> None:
        self.spans = spans
        self.by_id = {s.span_id: s for s in spans}

    def phase_span(self, name: str):
        found = [s for s in self.spans if s.name == f"coldstart.{name}"]
        _check(len(found) == 1, f"expected one span for phase {name}, found {len(found)}")
        return found[0]

    def under(self, ancestor_name: str, phase: str) -> list:
        """Aggregates of ``phase`` anywhere below the span of phase ``ancestor_name``."""
        ancestor = self.phase_span(ancestor_name)
        found = []
        for span in self.spans:
            if span.phase != phase or not span.is_aggregate:
                continue
            parent = self.by_id.get(span.parent_id)
            while parent is not None and parent.span_id != ancestor.span_id:
                parent = self.by_id.get(parent.parent_id)
            if parent is not None:
                found.append(span)
        return found


def _sum(spans, key: str) -> float:
    return sum(s.attributes.get(key, 0) or 0 for s in spans)


def _effective_s(spans) -> float:
    """Seconds of device time for queued work (bytes / the span's throughput), else busy time."""
    from otel_coldstart import semconv

    total = 0.0
    for span in spans:
        rate, nbytes = span.attributes.get(semconv.THROUGHPUT), span.attributes.get(semconv.BYTES, 0)
        total += nbytes / rate if isinstance(rate, (int, float)) and rate > 0 and nbytes else span.busy_ns / 1e9
    return total


def run_child(name: str, args: dict) -> int:
    figures = CHILDREN[name](args)
    print(json.dumps(figures, default=str))
    return EXIT_OK


def _load_pinned(files, sleep_cycles: int, synchronize_each_shard: bool = False) -> dict:
    """The loader the overlap matters for: a shard is read, pinned and queued; the next shard is
    read while the previous one's copies run."""
    import torch
    from safetensors import safe_open

    out = {}
    for path in files:
        with safe_open(path, framework="pt") as handle:
            for name in handle.keys():
                staged = handle.get_tensor(name).pin_memory()
                out[name] = staged.to("cuda", non_blocking=True)
                if sleep_cycles:
                    torch.cuda._sleep(sleep_cycles)  # the device side as slow as the host side
        if synchronize_each_shard:
            torch.cuda.synchronize()  # the defect, on purpose: a host wait at each shard's end
    return out


def child_calibrate(args: dict) -> dict:
    """GPU clock (cycles per second of torch.cuda._sleep) and host time per tensor of the
    loader, so the slowed device takes as long per tensor as the host."""
    import torch

    torch.zeros(1, device="cuda")
    _load_pinned(args["files"], 0)  # warm: page cache, pinned allocator
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(50_000_000)
    end.record()
    end.synchronize()
    cycles_per_s = 50_000_000 / (start.elapsed_time(end) / 1e3)
    from safetensors import safe_open

    tensors = 0
    began = time.perf_counter()
    for path in args["files"]:
        with safe_open(path, framework="pt") as handle:
            for name in handle.keys():
                handle.get_tensor(name).pin_memory()
                tensors += 1
    host_per_tensor_s = (time.perf_counter() - began) / tensors
    return {"cycles_per_s": cycles_per_s, "host_per_tensor_s": host_per_tensor_s,
            "sleep_cycles_per_tensor": int(cycles_per_s * host_per_tensor_s)}


def child_stall(args: dict) -> dict:
    import torch

    instrumented = _Instrumented() if args["mode"] == "instrumented" else None
    import otel_coldstart

    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    _load_pinned(args["files"], args["sleep_cycles"])  # warm-up run, not counted
    torch.cuda.synchronize()
    walls = []
    for run in range(args["runs"]):
        context = otel_coldstart.phase(f"load_{run}") if instrumented else contextlib.nullcontext()
        torch.cuda.synchronize()
        began = time.perf_counter()
        with context:
            loaded = _load_pinned(args["files"], args["sleep_cycles"], args["mode"] == "defect")
            torch.cuda.synchronize()
        walls.append(time.perf_counter() - began)
        del loaded
    figures = {"wall_s": walls}
    if instrumented:
        from otel_coldstart import semconv

        trace = instrumented.finish()
        h2d = trace.under("load_0", semconv.PHASE_H2D)
        figures["async_resolved"] = all(semconv.COPY_ASYNC_S in s.attributes for s in h2d)
    return figures


def child_throughput(args: dict) -> dict:
    import torch
    from safetensors.torch import load_file

    from otel_coldstart import semconv

    instrumented = _Instrumented()
    import otel_coldstart

    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    host = {}
    for path in args["files"]:
        host.update(load_file(path))
    tensors = list(host.values())
    total = sum(t.nbytes for t in tensors)
    pinned = [t.pin_memory() for t in tensors]
    warm = [t.to("cuda") for t in tensors]  # warm the path: the caching allocator holds the blocks after
    torch.cuda.synchronize()
    del warm
    with otel_coldstart.phase("pageable"):
        kept = [t.to("cuda") for t in tensors]
        torch.cuda.synchronize()
    del kept
    with otel_coldstart.phase("pinned"):
        kept = [t.to("cuda", non_blocking=True) for t in pinned]
        torch.cuda.synchronize()
    del kept
    few = pinned[:4]
    few_bytes = sum(t.nbytes for t in few)
    with otel_coldstart.phase("blocking_cast_h2d"):  # bf16 -> fp32, blocking: converted on the host
        kept = [t.to("cuda", torch.float32) for t in few]
    with otel_coldstart.phase("queued_cast_h2d"):  # bf16 -> fp32, non-blocking: bf16 crosses, cast on the GPU
        kept = [t.to("cuda", torch.float32, non_blocking=True) for t in few]
        torch.cuda.synchronize()
    del kept
    trace = instrumented.finish()  # ready(): the patches are off for the reference figures below

    failures = []
    figures: dict = {"bytes": total, "tensors": len(tensors)}
    for phase, memory in (("pageable", "pageable"), ("pinned", "pinned")):
        h2d = trace.under(phase, semconv.PHASE_H2D)
        nbytes = _sum(h2d, semconv.BYTES)
        split = _sum(h2d, semconv.COPY_PINNED_BYTES if memory == "pinned" else semconv.COPY_PAGEABLE_BYTES)
        if nbytes != total or split != total or _sum(h2d, semconv.CALLS) != len(tensors):
            failures.append(f"{phase}: bytes {nbytes}, {memory} bytes {split}, calls {_sum(h2d, semconv.CALLS)}; "
                            f"expected {total} bytes, {len(tensors)} calls")
        if memory == "pinned" and not all(semconv.COPY_ASYNC_S in s.attributes for s in h2d):
            failures.append("pinned: queued copies were not resolved from events")
        figures[f"plugin_{memory}_gbps"] = nbytes / _effective_s(h2d) / 1e9 if h2d else None
    blocking = trace.under("blocking_cast_h2d", semconv.PHASE_H2D)
    if (_sum(blocking, semconv.BYTES), _sum(blocking, semconv.COPY_PAGEABLE_BYTES)) != (2 * few_bytes, 2 * few_bytes):
        failures.append(f"blocking bf16->fp32 H2D: {_sum(blocking, semconv.BYTES)} bytes, "
                        f"{_sum(blocking, semconv.COPY_PAGEABLE_BYTES)} pageable; Copy.cu moves {2 * few_bytes} "
                        f"fp32 bytes from a pageable temporary")
    queued = trace.under("queued_cast_h2d", semconv.PHASE_H2D)
    if (_sum(queued, semconv.BYTES), _sum(queued, semconv.COPY_PINNED_BYTES)) != (few_bytes, few_bytes):
        failures.append(f"non-blocking bf16->fp32 H2D: {_sum(queued, semconv.BYTES)} bytes, "
                        f"{_sum(queued, semconv.COPY_PINNED_BYTES)} pinned; Copy.cu moves {few_bytes} bf16 bytes "
                        f"from the pinned source")

    # Independent figures, with every patch removed.
    big = torch.empty(total, dtype=torch.uint8).pin_memory()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    rates = []
    for _ in range(3):
        torch.cuda.synchronize()
        start.record()
        on_device = big.to("cuda", non_blocking=True)
        end.record()
        end.synchronize()
        rates.append(total / (start.elapsed_time(end) / 1e3) / 1e9)
        del on_device
    figures["bulk_pinned_gbps"] = max(rates)
    torch.cuda.synchronize()
    began = time.perf_counter()
    kept = [t.to("cuda") for t in tensors]
    torch.cuda.synchronize()
    figures["reference_pageable_gbps"] = total / (time.perf_counter() - began) / 1e9
    figures["accounting_failures"] = failures
    return figures


def _mlp(torch):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).cuda()


def child_capture_race(args: dict) -> dict:
    import threading

    import torch

    instrumented = _Instrumented() if args["mode"] == "instrumented" else None
    import otel_coldstart
    from otel_coldstart.patches import cuda_graphs

    figures: dict = {"failures": []}
    mlp = _mlp(torch)
    inputs = {n: torch.randn(n, 1024, device="cuda") for n in CAPTURE_SIZES}
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():  # warm-up off the capture stream, as torch advises
        for n in CAPTURE_SIZES:
            mlp(inputs[n])
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    stop = threading.Event()
    capturing = threading.Event()
    counts = {"copies": 0, "pins": 0, "captures_while_copying": 0, "error": None}
    # The copy thread allocates nothing on the GPU and reuses its staging buffers: a cudaMalloc
    # or a stream synchronize from another thread would break a global-mode capture by itself,
    # with or without the plugin. It does pin (allocations and copies, served by torch's host
    # cache after the first ones) and queue non-blocking copies on its own stream.
    pool = 8
    staging = [torch.randn(1 << 18).pin_memory() for _ in range(pool)]
    on_device = [torch.empty(1 << 18, device="cuda") for _ in range(pool)]
    small = torch.randn(1 << 12)
    copy_stream = torch.cuda.Stream()
    with torch.cuda.stream(copy_stream):
        staging[0].to("cuda", non_blocking=True)  # the block the thread's .to() re-uses from the cache
    torch.cuda.synchronize()

    def copier():
        try:
            i = 0
            while not stop.is_set():
                with torch.cuda.stream(copy_stream):
                    torch.empty(1 << 12, pin_memory=True)  # a pinned allocation (vLLM's staging buffers)
                    small.pin_memory()  # a pin copy
                    on_device[i % pool].copy_(staging[i % pool], non_blocking=True)  # vLLM's param.copy_
                    staging[(i + 1) % pool].to("cuda", non_blocking=True) if i % 16 == 0 else None
                copies = 2 if i % 16 == 0 else 1
                i += 1
                counts["pins"] += 2
                counts["copies"] += copies
                if capturing.is_set():
                    counts["captures_while_copying"] += 1
                time.sleep(0.0005)
        except Exception as error:
            counts["error"] = f"copy thread: {type(error).__name__}: {error}"

    thread = threading.Thread(target=copier, name="copier")
    graphs, outputs = {}, {}
    thread.start()
    try:
        phase = otel_coldstart.phase("captures") if instrumented else contextlib.nullcontext()
        with phase, torch.no_grad():
            for round_ in range(CAPTURE_ROUNDS):
                for n in CAPTURE_SIZES:
                    graph = torch.cuda.CUDAGraph()
                    capturing.set()
                    with cuda_graphs.batch_size(n), torch.cuda.graph(graph):  # default: capture_error_mode="global"
                        outputs[n] = mlp(inputs[n])
                    capturing.clear()
                    graphs[n] = graph
    except Exception as error:
        figures["error"] = f"capture: {type(error).__name__}: {error}"
    finally:
        stop.set()
        thread.join()
    if counts["error"]:
        figures["error"] = figures.get("error") or counts["error"]
    figures.update(copies=counts["copies"], pins=counts["pins"], captures_while_copying=counts["captures_while_copying"])
    if "error" in figures:
        return figures
    with torch.no_grad():
        for n in CAPTURE_SIZES:
            graphs[n].replay()
        torch.cuda.synchronize()
        for n in CAPTURE_SIZES:
            if not torch.allclose(outputs[n], mlp(inputs[n]), rtol=1e-3, atol=1e-3):
                figures["failures"].append(f"replay for batch {n} differs from eager")
    if instrumented:
        from otel_coldstart import semconv

        trace = instrumented.finish()
        captures = trace.under("captures", semconv.PHASE_GRAPH_CAPTURE)
        expected = len(CAPTURE_SIZES) * CAPTURE_ROUNDS
        calls = _sum(captures, semconv.CALLS)
        sizes = [list(s.attributes.get(semconv.GRAPH_BATCH_SIZES, ())) for s in captures]
        if len(captures) != 1 or calls != expected or sizes != [list(CAPTURE_SIZES)]:
            figures["failures"].append(f"captures: {len(captures)} aggregate(s), {calls} calls, sizes {sizes}; "
                                       f"expected 1, {expected}, {list(CAPTURE_SIZES)}")
        copier_spans = [s for s in trace.spans if s.is_aggregate and s.attributes.get(semconv.THREAD_NAME) == "copier"]
        h2d_calls = sum(s.attributes.get(semconv.CALLS, 0) for s in copier_spans if s.phase == semconv.PHASE_H2D)
        pin_calls = sum(s.attributes.get(semconv.CALLS, 0) for s in copier_spans if s.phase == semconv.PHASE_PIN)
        if h2d_calls != counts["copies"] or pin_calls != counts["pins"]:
            figures["failures"].append(f"copy thread: {h2d_calls} h2d and {pin_calls} pin calls recorded; it made "
                                       f"{counts['copies']} copies and {counts['pins']} pins")
        figures["untimed_copies"] = sum(s.attributes.get(semconv.COPY_UNTIMED_CALLS, 0) for s in copier_spans)
        figures["pre_capture_s"] = _sum(captures, semconv.GRAPH_PRE_CAPTURE_S)
        figures["capture_s"] = _sum(captures, semconv.BUSY_S)
    return figures


def _truth(torch, work) -> float:
    torch.cuda.synchronize()
    began = time.perf_counter()
    result = work()
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - began
    del result
    return elapsed


def child_cast_copy(args: dict) -> dict:
    import torch

    from otel_coldstart import semconv

    instrumented = _Instrumented()
    import otel_coldstart

    torch.zeros(1, device="cuda")
    # Large tensors (256 MiB each): every call keeps the device busy far longer than the host
    # takes to queue the next one, so the truth below is device time, not launch gaps.
    sources = [torch.randn(8192, 16384, device="cuda", dtype=torch.bfloat16) for _ in range(8)]  # 2 GiB
    targets = [torch.empty_like(t) for t in sources]
    side = torch.cuda.Stream()
    host_params = [torch.randn(4096, 4096).to(torch.bfloat16).pin_memory() for _ in range(8)]
    device_params = [torch.empty(4096, 4096, device="cuda", dtype=torch.bfloat16) for _ in host_params]
    [t.to(torch.float32) for t in sources[:2]]  # warm the kernels
    torch.cuda.synchronize()
    truths = {}

    def casts():
        return [t.to(torch.float32) for _ in range(2) for t in sources]

    def d2d():
        for _ in range(4):
            for source, target in zip(sources, targets):
                target.copy_(source)

    def side_d2d():
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            d2d()
        torch.cuda.current_stream().wait_stream(side)

    def params():
        for _ in range(8):
            for host, device in zip(host_params, device_params):
                device.copy_(host, non_blocking=True)

    for name, work in (("gpu_cast", casts), ("d2d_copy", d2d), ("side_stream_copy", side_d2d), ("param_copy", params)):
        with otel_coldstart.phase(name):
            truths[name] = _truth(torch, work)
    small = torch.randn(1 << 18)
    with otel_coldstart.phase("h2d_behind_cast"):
        torch.cuda.synchronize()
        began = time.perf_counter()
        queued = casts() + casts()  # queued GPU work, no sync
        launched_s = time.perf_counter() - began
        small.to("cuda")  # blocking: waits for the casts, then copies 1 MiB
        torch.cuda.synchronize()
        del queued
    cast_truth = _truth(torch, lambda: casts() + casts())
    trace = instrumented.finish()

    figures: dict = {"failures": []}
    phases = {"gpu_cast": semconv.PHASE_CAST, "d2d_copy": semconv.PHASE_D2D, "side_stream_copy": semconv.PHASE_D2D,
              "param_copy": semconv.PHASE_H2D}
    for name, phase in phases.items():
        spans = trace.under(name, phase)
        async_s = [s.attributes.get(semconv.COPY_ASYNC_S) for s in spans]
        if not spans or None in async_s:
            figures["failures"].append(f"{name}: no device time on {len(spans)} {phase} aggregate(s)")
            continue
        figures[name] = {"truth_s": truths[name], "plugin_device_s": sum(async_s),
                         "plugin_host_busy_s": _sum(spans, semconv.BUSY_S),
                         "untimed_calls": _sum(spans, semconv.COPY_UNTIMED_CALLS)}
    h2d = trace.under("h2d_behind_cast", semconv.PHASE_H2D)
    # The copy waits for what the device still had to do when it was called.
    figures["h2d_behind_cast"] = {"cast_truth_s": cast_truth, "launched_s": launched_s,
                                  "expected_wait_s": max(0.0, cast_truth - launched_s),
                                  "h2d_busy_s": _sum(h2d, semconv.BUSY_S),
                                  "h2d_waited_s": _sum(h2d, semconv.COPY_WAITED_S)}
    return figures


def child_runtime_init(args: dict) -> dict:
    if args["mode"] == "plain":
        import torch

        began = time.perf_counter()
        torch.cuda.is_available()
        available = time.perf_counter()
        torch.cuda.init()  # _lazy_init
        initialised = time.perf_counter()
        torch.zeros(1, device="cuda")  # the primary context, on the first allocation
        torch.ones(1 << 20).to("cuda")
        torch.cuda.synchronize()
        done = time.perf_counter()
        return {"is_available_s": available - began, "lazy_init_s": initialised - available,
                "first_alloc_and_copy_s": done - initialised}
    instrumented = _Instrumented()
    import torch

    from otel_coldstart import semconv

    torch.cuda.is_available()
    with __import__("otel_coldstart").phase("first_touch"):
        torch.ones(1 << 20).to("cuda")  # the first CUDA touch is a copy
        torch.cuda.synchronize()
    trace = instrumented.finish()
    steps = {s.attributes.get(semconv.RUNTIME_STEP): s for s in trace.spans if s.phase == semconv.PHASE_RUNTIME_INIT}
    figures: dict = {"failures": [], "steps": sorted(k for k in steps if k)}
    if set(steps) != {semconv.RUNTIME_STEP_DRIVER, semconv.RUNTIME_STEP_LAZY_INIT}:
        figures["failures"].append(f"runtime_init steps {sorted(map(str, steps))}, expected driver and lazy_init")
    driver, init = steps.get(semconv.RUNTIME_STEP_DRIVER), steps.get(semconv.RUNTIME_STEP_LAZY_INIT)
    figures["driver_s"] = driver.duration_ns / 1e9 if driver else None
    figures["lazy_init_s"] = init.duration_ns / 1e9 if init else None
    copies = trace.under("first_touch", semconv.PHASE_H2D)
    if copies and init:
        figures["first_copy_busy_s"] = _sum(copies, semconv.BUSY_S)
        figures["init_overlaps_copy"] = any(c.start_ns < init.end_ns and init.start_ns < c.end_ns for c in copies)
    else:
        figures["failures"].append("no h2d aggregate for the first copy")
    return figures


CHILDREN = {"calibrate": child_calibrate, "stall": child_stall, "throughput": child_throughput,
            "capture_race": child_capture_race, "cast_copy": child_cast_copy, "runtime_init": child_runtime_init}


if __name__ == "__main__":
    sys.exit(main())
