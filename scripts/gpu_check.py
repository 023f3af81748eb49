#!/usr/bin/env python3
"""GPU check of the device phases: one command, a verdict per check. Needs a CUDA GPU.

Each check runs its workloads in fresh processes (CUDA must start under the instrumentation,
and instrumented and plain runs must not share a process), compares what the plugin reports
with an independent measurement, and gives PASS, FAIL, INCONCLUSIVE (the measurement could
not tell) or SKIP (a dependency of that check is missing).

Every check also runs a **negative control**: the same measurement with a known defect
planted (a host synchronize in the plugin, a byte miscount, a capture-illegal call, ...).
The control must FAIL; if it passes, the check could not have failed either, and the verdict
is INCONCLUSIVE whatever the measurement said. The plants are the functions in ``PLANTS``;
the CPU tests (tests/device/test_gpu_check_controls.py) run each check's measurement and its
control on CPU stand-ins (a simulated device timeline, stand-in events and graphs) and show
the control failing and the measurement passing, so a GPU run has a check that can fail.

Figures go to ``benchmarks/gpu-check/<UTC time>.json`` and ``.md`` (never overwritten), with
each check's wall time and estimate, and a summary is printed. The estimated run time is
printed before the checks start; the default sizes are chosen so the estimate is at most
half of scripts/gpu-check.sh's 600 s limit. Checks that would run past ``--budget-s``
(540 s) are INCONCLUSIVE, so the figures are always written before that limit (124).

Exit codes: 0 every check passed; 1 a check failed; 2 bad arguments; 3 no CUDA device;
4 a dependency (torch, safetensors, opentelemetry-sdk, otel_coldstart) is missing; 5 nothing
failed but a check was INCONCLUSIVE or SKIPPED.

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
import textwrap
import time
from dataclasses import asdict, dataclass, field

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NO_CUDA, EXIT_MISSING_DEPENDENCY, EXIT_INCONCLUSIVE = 0, 1, 2, 3, 4, 5
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECKS = ("stall", "throughput", "bytes", "capture_race", "cast_copy", "windows", "runtime_init", "vllm")

# What each check compares, what it would fail on, and its negative control (--help prints it).
CHECK_HELP = {
    "stall": "wall time of pinned non-blocking shard loads (safe_open per shard, pin_memory(), "
             ".to('cuda', non_blocking=True)), instrumented vs plain, best of the runs: within 2%; once with "
             "the device as it is, once slowed to the host's pace (torch.cuda._sleep). Fails on a host wait "
             "at an aggregate's end. Control: the plugin with a planted synchronize() on each aggregate's "
             "events (plant host_sync) must be more than 2% slower in some variant.",
    "throughput": "the plugin's H2D bandwidth (analyze.breakdown.bandwidth_sample over the trace): pinned "
                  "non-blocking within 20% of an event-timed bulk copy, pageable blocking within 20% of a "
                  "synchronize()-timed loop, pinned >= 1.5x pageable, neither above the recorded host link "
                  "bound, and that bound not below what the bulk copy did. Fails on launch-time bandwidth. "
                  "Control: bandwidth from busy time (plant launch_bandwidth) must fail.",
    "bytes": "bytes over the bus and pinned/pageable of the whole Copy.cu table (BYTE_CASES: same-dtype "
             "and cast H2D, blocking and not, transposed, sliced and broadcast sources, copy_ casts into "
             "parameters, D2H with and without casts, torch.load(map_location='cuda')) against the figures "
             "Copy.cu gives, written out by hand. Control: the source's bytes from the caller's memory "
             "(plant byte_miscount, the first round's rule) must fail.",
    "capture_race": "a capture loop over 9 batch sizes x 3 in torch's default ('global') capture mode while "
                    "another thread copies (copy_ between pre-allocated pinned and device buffers, inside "
                    "every capture: a handshake proves it) and pins between captures, plain and instrumented: "
                    "no capture error, replays equal eager, 27 captures in one aggregate with the sizes, every "
                    "copy and pin counted. A plain run that fails is INCONCLUSIVE. Control: the copy thread "
                    "queries a CUDA event inside each capture (plant capture_illegal, the call the plugin's "
                    "gate keeps out of captures): the capture must fail.",
    "cast_copy": "device time (coldstart.copy.async_s) of GPU casts, device-to-device copies (also on a side "
                 "stream) and non-blocking copy_ into parameters within 20% (+0.5 ms) of synchronize()-"
                 "bracketed truth; a blocking H2D queued behind 0.2 s of device work keeps its own time and "
                 "reports the wait (coldstart.copy.waited_s). Control: no events (plant no_events, GPU work "
                 "timed by its launch) must fail.",
    "windows": "issue 23's second part, in one process: a no-op .to()/.float() of a CUDA tensor makes no "
               "CUDA event (noop_events); two threads casting on the default stream report the stream's time "
               "once between them, within 25% (+1 ms) of the same casts timed alone (shared_stream); a "
               "non-blocking copy of a transposed host tensor (the host makes a contiguous temporary first) "
               "reports the copy's device time, not the temporary's (idle_start, within 30% + 1 ms); a blocking "
               "H2D behind queued casts reports waited_s every time (blocking_waits); captures begun with "
               "torch._C._CUDAGraph (unseen by the wrappers) in global mode while another thread copies and "
               "settles all succeed and replay right (unseen_capture). Control: a segment's idle start counted "
               "(plant idle_counted) must fail idle_start.",
    "runtime_init": "the driver and lazy_init runtime_init spans against is_available() and "
                    "torch.cuda.init() timed alone in a plain process (0.5x-2x or +-50 ms); the first "
                    ".to('cuda') does not contain the init. Control: the copy initialising CUDA inside its "
                    "own clock (plant init_in_copy) must fail.",
    "vllm": "scripts/gpu_check_vllm.py --decoder: vLLM on a generated 2-layer Llama (random weights, no "
            "tokenizer, no hub) with capture sizes 1, 2, 4, 8: graph-capture spans covering them, compile "
            "spans, runtime init. SKIP without vLLM. Control: the same span checks with the capture spans "
            "taken out (plant blind_to_captures: a plugin blind to captures) must fail.",
}

STALL_TOLERANCE = 0.02  # instrumented may be at most 2% slower than plain
STALL_RUNS = 4
THROUGHPUT_TOLERANCE = 0.20
PINNED_OVER_PAGEABLE = 1.5
DEVICE_TIME_TOLERANCE = 0.20
DEVICE_TIME_SLACK_S = 0.0005
BEHIND_SLEEP_S = 0.2  # device work queued ahead of the blocking copy in cast_copy
MIN_SENSIBLE_WAIT_S = 0.02  # below it, a blocking copy has nothing to wait for: nothing to see
INIT_RATIO = (0.5, 2.0)
INIT_SLACK_S = 0.05
CAPTURE_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
CAPTURE_ROUNDS = 3
CHILD_TIMEOUT_S = 240
DEFAULT_SHARDS, DEFAULT_SHARD_MIB = 4, 256
HALF_OF_THE_LIMIT_S = 300  # scripts/gpu-check.sh stops the run at 600 s: plan for half of it

# Estimates of a run on one H200-class GPU on PCIe Gen5 with a warm page cache. Nothing of this
# has run on a GPU yet: the report keeps each check's real wall time to replace them.
CHILD_START_S = 8.0  # a fresh child: interpreter, import torch, CUDA init, primary context
LOAD_S_PER_GIB = 0.6  # safe_open, pin_memory() and queueing the H2D copies of warm shards
WRITE_S_PER_GIB = 4.0  # generating and saving the random shards
VLLM_S = 150.0  # vLLM import, engine start, compile, 4 captures, 4 tokens


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
    wall_s: float | None = None
    estimated_s: float | None = None


def estimate_s(checks, shards: int = DEFAULT_SHARDS, shard_mib: int = DEFAULT_SHARD_MIB,
               vllm_installed: bool = True) -> dict:
    """Seconds each check is expected to take ("setup": writing the shards)."""
    gib = shards * shard_mib / 1024
    load = LOAD_S_PER_GIB * gib
    runs = STALL_RUNS
    captures = len(CAPTURE_SIZES) * CAPTURE_ROUNDS
    per_check = {
        # plain child: calibration and runs; instrumented child: a run and a planted run each
        # time (a planted wait at the host's pace costs about one more load).
        "stall": 2 * CHILD_START_S + load * (1 + 2 * (1 + runs) + 2 * (1 + 3 * runs)),
        "throughput": CHILD_START_S + 3 * load + 1.0,
        "bytes": CHILD_START_S + 4.0,
        "capture_race": 3 * (CHILD_START_S + captures * 0.05 + 2.0),  # plain, instrumented, control
        "cast_copy": CHILD_START_S + 2 * (1.0 + BEHIND_SLEEP_S) + 2.0,
        "windows": CHILD_START_S + 3.0,
        "runtime_init": 3 * (CHILD_START_S + 1.0),
        "vllm": VLLM_S if vllm_installed else 1.0,
    }
    estimate = {"setup": WRITE_S_PER_GIB * gib} if any(c in ("stall", "throughput") for c in checks) else {}
    estimate.update({check: round(per_check[check], 1) for check in checks})
    return estimate


# --- negative controls: defects planted in the plugin (context managers, undone on exit) ------------

@contextlib.contextmanager
def _replaced(owner, name: str, replacement):
    original = getattr(owner, name)
    setattr(owner, name, replacement(original))
    try:
        yield
    finally:
        setattr(owner, name, original)


def plant_host_sync():
    """The plugin waits for an aggregate's device work when it ends (synchronize() on its end
    events before the query), the defect the stall check exists for."""
    from otel_coldstart.patches import _device_windows

    def waiting(real):
        def try_resolve(work, gate=_device_windows.gate):
            for window in list(work.open):
                gate(window.end_event.synchronize)
            return real(work, gate)
        return try_resolve

    return _replaced(_device_windows, "try_resolve", waiting)


def plant_launch_bandwidth():
    """Bandwidth from busy time for queued work (bytes over launch time), as the first round
    had it."""
    from otel_coldstart import semconv
    from otel_coldstart.patches import _device_windows

    def launch_timed(real):
        def settle(aggregate, final_deadline):
            done = real(aggregate, final_deadline)
            if done and aggregate.busy_ns > 0 and aggregate.bytes > 0:
                aggregate.attributes[semconv.THROUGHPUT] = aggregate.bytes / (aggregate.busy_ns / 1e9)
            return done
        return settle

    return _replaced(_device_windows, "settle", launch_timed)


def plant_byte_miscount():
    """The source's bytes from the caller's memory, whatever Copy.cu does (the first round's
    rule): wrong for blocking casts, non-contiguous and broadcast sources."""
    from otel_coldstart.patches import _cuda_copy

    def source_bytes(real):
        def bus_copy(direction, numel, src_itemsize, dst_itemsize, same_dtype, one_block, host_contiguous,
                     host_pinned, non_blocking):
            return _cuda_copy.BusCopy(numel * src_itemsize, host_pinned, None)
        return bus_copy

    return _replaced(_cuda_copy, "bus_copy", source_bytes)


def plant_no_events():
    """No CUDA events: GPU casts, d2d copies and queued copies timed by their launch, and a
    blocking copy charged whatever it waited for."""
    from otel_coldstart.patches import _device_windows

    stack = contextlib.ExitStack()
    stack.enter_context(_replaced(_device_windows, "mark", lambda real: lambda device: None))
    stack.enter_context(_replaced(_device_windows, "mark_blocking", lambda real: lambda device: None))
    return stack


def plant_idle_counted():
    """A segment's idle start counted as device time (the host's work inside the call before
    its copy reached the stream), as before issue 23 finding 7."""
    from otel_coldstart.patches import _device_windows

    def counted(real):
        def join_inside(window, *args):
            opened = window.start_event is None
            result = real(window, *args)
            if opened:
                window.idle_ns = 0
            return result
        return join_inside

    return _replaced(_device_windows, "_join_inside", counted)


def plant_init_in_copy():
    """A copy that is the first CUDA touch initialises CUDA inside its own clock."""
    from otel_coldstart.patches import tensor_ops

    return _replaced(tensor_ops, "_initialise_cuda_first", lambda real: lambda: None)


PLANTS = {"host_sync": plant_host_sync, "launch_bandwidth": plant_launch_bandwidth,
          "byte_miscount": plant_byte_miscount, "no_events": plant_no_events,
          "init_in_copy": plant_init_in_copy, "idle_counted": plant_idle_counted}
# The capture_race control is planted in the workload (a raw event query inside the captures,
# child_capture_race's "planted" mode), the vllm control in the spans (captures taken out).
CONTROLS = {"stall": "host_sync", "throughput": "launch_bandwidth", "bytes": "byte_miscount",
            "capture_race": "capture_illegal", "cast_copy": "no_events", "windows": "idle_counted",
            "runtime_init": "init_in_copy",
            "vllm": "blind_to_captures"}


# --- judges: pure functions over figures (tested on CPU with healthy and defective figures) -----

def _verdict(check: str, figures: dict, failures: list, inconclusive: list | None = None) -> Verdict:
    if failures:
        return Verdict(check, "FAIL", failures, figures)
    if inconclusive:
        return Verdict(check, "INCONCLUSIVE", inconclusive, figures)
    return Verdict(check, "PASS", [], figures)


def with_control(check: str, measured: Verdict, control: Verdict | None) -> Verdict:
    """The measurement's verdict, unless it passed while its negative control did not fail:
    then the check could not have failed here, and says so."""
    figures = {"measured": measured.figures, "control": control.figures if control else None,
               "plant": CONTROLS.get(check)}
    if measured.status != "PASS" or control is None:
        return Verdict(check, measured.status, measured.reasons, figures)
    if control.status != "FAIL":
        return Verdict(check, "INCONCLUSIVE", [
            f"negative control: with {CONTROLS.get(check)} planted the check gave {control.status}, not FAIL: "
            f"it could not have failed here either"], figures)
    return Verdict(check, "PASS", [], figures)


def judge_stall(figures: dict) -> Verdict:
    """figures: {variant: {"plain_s", "instrumented_s"}} (best-of-runs wall times)."""
    failures = []
    for variant, f in figures.items():
        plain, instrumented = f["plain_s"], f["instrumented_s"]
        f["overhead"] = instrumented / plain - 1.0
        if instrumented > plain * (1 + STALL_TOLERANCE):
            failures.append(f"{variant}: instrumented {instrumented:.3f} s vs plain {plain:.3f} s "
                            f"(+{f['overhead'] * 100:.1f}% > {STALL_TOLERANCE * 100:.0f}%)")
    return _verdict("stall", figures, failures)


def _within(value, reference, tolerance, slack=0.0) -> bool:
    return value is not None and reference is not None and abs(value - reference) <= tolerance * reference + slack


def judge_throughput(figures: dict) -> Verdict:
    failures = []
    pinned, pageable = figures.get("plugin_pinned_gbps"), figures.get("plugin_pageable_gbps")
    bulk = figures.get("bulk_pinned_gbps")
    if not _within(pinned, bulk, THROUGHPUT_TOLERANCE):
        failures.append(f"pinned non-blocking: plugin {pinned} GB/s vs event-timed bulk copy "
                        f"{bulk} GB/s (more than {THROUGHPUT_TOLERANCE:.0%} apart)")
    if not _within(pageable, figures.get("reference_pageable_gbps"), THROUGHPUT_TOLERANCE):
        failures.append(f"pageable blocking: plugin {pageable} GB/s vs synchronize()-timed "
                        f"{figures.get('reference_pageable_gbps')} GB/s")
    if not (pinned and pageable and pinned >= PINNED_OVER_PAGEABLE * pageable):
        failures.append(f"pinned {pinned} GB/s is not >= {PINNED_OVER_PAGEABLE}x pageable {pageable} GB/s")
    bound = figures.get("link_gbps")
    if bound is not None:
        if bulk is not None and bulk > bound:
            failures.append(f"the recorded host link bound ({figures.get('link')}: {bound:.1f} GB/s) is below "
                            f"what the link did ({bulk:.1f} GB/s): the bound is wrong")
        for name, value in (("pinned", pinned), ("pageable", pageable)):
            if value is not None and value > bound:
                failures.append(f"plugin {name} {value:.1f} GB/s is above the host link bound {bound:.1f} GB/s")
    failures += figures.get("accounting_failures", [])
    return _verdict("throughput", figures, failures)


def judge_bytes(figures: dict) -> Verdict:
    failures = list(figures.get("failures", []))
    if not figures.get("cases"):
        failures.append("no case was measured")
    return _verdict("bytes", figures, failures)


def judge_capture_race(figures: dict) -> Verdict:
    plain, instrumented = figures.get("plain", {}), figures.get("instrumented", {})
    if plain.get("error"):
        return Verdict("capture_race", "INCONCLUSIVE",
                       [f"the workload fails without the plugin too: {plain['error']}"], figures)
    failures = []
    if instrumented.get("error"):
        failures.append(f"instrumented run failed: {instrumented['error']}")
    failures += instrumented.get("failures", [])
    if not failures and (not instrumented.get("copies") or not instrumented.get("captures_while_copying")):
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
    inconclusive = []
    if behind is not None:
        expected = behind["expected_wait_s"]
        if behind["h2d_busy_s"] > 0.25 * expected + 0.002:
            failures.append(f"a blocking H2D queued behind {expected * 1e3:.1f} ms of device work was charged "
                            f"{behind['h2d_busy_s'] * 1e3:.1f} ms (the wait)")
        if not _within(behind.get("h2d_waited_s"), expected, 0.3, 0.002):
            failures.append(f"waited_s {behind.get('h2d_waited_s')} s, expected about {expected} s "
                            f"(the device work not yet done when the copy was called)")
        if expected < MIN_SENSIBLE_WAIT_S:
            inconclusive.append(f"the blocking copy had only {expected * 1e3:.1f} ms to wait for: a wait "
                                f"charged to it could not be seen")
    return _verdict("cast_copy", figures, failures, inconclusive)


WINDOWS_TOLERANCE, WINDOWS_SLACK_S = 0.25, 0.001
IDLE_TOLERANCE = 0.30


def judge_windows(figures: dict) -> Verdict:
    failures = list(figures.get("failures", []))
    if figures.get("noop_events", 0):
        failures.append(f"noop_events: {figures['noop_events']} CUDA events made for no-op moves")
    shared = figures.get("shared_stream") or {}
    if not _within(shared.get("plugin_s"), shared.get("truth_s"), WINDOWS_TOLERANCE, WINDOWS_SLACK_S):
        failures.append(f"shared_stream: the threads' async_s sum to {shared.get('plugin_s')} s vs "
                        f"{shared.get('truth_s')} s of the same casts timed alone")
    idle = figures.get("idle_start") or {}
    if not _within(idle.get("plugin_s"), idle.get("truth_s"), IDLE_TOLERANCE, WINDOWS_SLACK_S):
        failures.append(f"idle_start: async_s {idle.get('plugin_s')} s vs the copy's own {idle.get('truth_s')} s "
                        f"(the host's temporary took {idle.get('host_prep_s')} s)")
    waits = figures.get("blocking_waits") or {}
    if waits.get("with_wait") != waits.get("reps"):
        failures.append(f"blocking_waits: waited_s reported {waits.get('with_wait')} of {waits.get('reps')} times")
    failures += [f"unseen_capture: {error}" for error in figures.get("capture_errors", [])]
    inconclusive = []
    if idle and (idle.get("host_prep_s") or 0) < 2 * (idle.get("truth_s") or 0) * IDLE_TOLERANCE:
        inconclusive.append("idle_start: the host's temporary was too quick for a counted idle start to show")
    return _verdict("windows", figures, failures, inconclusive)


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


JUDGES = {"stall": judge_stall, "throughput": judge_throughput, "bytes": judge_bytes,
          "capture_race": judge_capture_race, "cast_copy": judge_cast_copy, "windows": judge_windows,
          "runtime_init": judge_runtime_init,
          "vllm": judge_vllm}


def judge(check: str, result: dict) -> Verdict:
    """A runner's result ``{"measured": figures, "control": figures | None}`` judged."""
    if "measured" not in result:  # a skipped check, or a runner that could not run its control
        return JUDGES[check](result)
    control = result.get("control")
    return with_control(check, JUDGES[check](result["measured"]),
                        JUDGES[check](control) if control is not None else None)


# --- the parent: runs children, judges, writes figures ----------------------------------------------

def _help_epilog() -> str:
    lines = ["checks (each with a negative control that must FAIL, else the check is INCONCLUSIVE):", ""]
    for check in CHECKS:
        lines.append(textwrap.fill(f"{check}: {CHECK_HELP[check]}", 100, initial_indent="  ",
                                   subsequent_indent="      ", break_on_hyphens=False))
        lines.append("")
    lines += ["exit codes: 0 all passed, 1 a check failed, 2 bad arguments, 3 no CUDA device, 4 missing "
              "dependency, 5 inconclusive or skipped", "",
              f"The estimated run time is printed first; the defaults keep it under {HALF_OF_THE_LIMIT_S} s, half of "
              "scripts/gpu-check.sh's 600 s limit."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=_help_epilog(),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append", choices=CHECKS, help="run only this check (repeatable)")
    parser.add_argument("--out-dir", default=os.path.join(ROOT, "benchmarks", "gpu-check"),
                        help="where the JSON and Markdown figures go (default benchmarks/gpu-check)")
    parser.add_argument("--shard-mib", type=int, default=DEFAULT_SHARD_MIB,
                        help=f"size of each checkpoint shard (MiB, default {DEFAULT_SHARD_MIB})")
    parser.add_argument("--shards", type=int, default=DEFAULT_SHARDS, help=f"shards (default {DEFAULT_SHARDS})")
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
    import importlib.util

    estimate = estimate_s(checks, args.shards, args.shard_mib, importlib.util.find_spec("vllm") is not None)
    total = sum(estimate.values())
    print(f"gpu-check: estimated {total:.0f} s ({', '.join(f'{k} {v:.0f} s' for k, v in estimate.items())}); "
          f"budget {args.budget_s:.0f} s", file=sys.stderr, flush=True)
    started = time.time()
    verdicts = []
    with tempfile.TemporaryDirectory(prefix="otel-coldstart-gpu-check-") as workdir:
        files = write_shards(workdir, args.shards, args.shard_mib * 1024 * 1024) if "setup" in estimate else []
        for check in checks:
            print(f"gpu-check: {check} ...", file=sys.stderr, flush=True)
            began = time.monotonic()
            try:
                verdict = judge(check, RUNNERS[check](workdir, files))
            except OutOfTime as late:
                verdict = Verdict(check, "INCONCLUSIVE", [str(late)])
            except CheckFailed as failure:
                verdict = Verdict(check, "FAIL", [str(failure)])
            except Exception as error:  # a broken check is a failed check, with its reason
                verdict = Verdict(check, "FAIL", [f"{type(error).__name__}: {error}"])
            verdict.wall_s = round(time.monotonic() - began, 1)
            verdict.estimated_s = estimate.get(check)
            verdicts.append(verdict)
            print(f"gpu-check: {check}: {verdict.status} {'; '.join(verdict.reasons)}", file=sys.stderr, flush=True)
    report = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
              "wall_s": round(time.time() - started, 1), "estimated_s": round(total, 1),
              "environment": environment(), "checks": [asdict(v) for v in verdicts]}
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
    lines = [f"gpu-check on {env['device']} (torch {env['torch']}, CUDA {env['cuda']}) in {report['wall_s']} s "
             f"(estimated {report.get('estimated_s')} s)"]
    for check in report["checks"]:
        lines.append(f"  {check['status']:<12} {check['check']:<13} {check.get('wall_s')} s  "
                     f"{'; '.join(check['reasons'])}")
    return "\n".join(lines)


def render_markdown(report: dict) -> str:
    env = report["environment"]
    lines = [f"# GPU check, {report['started']}", "",
             f"{env['device']} x{env['device_count']}, torch {env['torch']}, CUDA {env['cuda']}, "
             f"load {env['loadavg']}, {report['wall_s']} s (estimated {report.get('estimated_s')} s)", "",
             "| check | verdict | wall s | estimated s | reasons |", "|---|---|---:|---:|---|"]
    for check in report["checks"]:
        lines.append(f"| {check['check']} | {check['status']} | {check.get('wall_s')} | {check.get('estimated_s')} | "
                     f"{'; '.join(check['reasons']) or '-'} |")
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
    base = {"files": files, "runs": STALL_RUNS}
    plain = _require(run_child_process("stall", dict(base, mode="plain", calibrate=True)))
    variants = {"device_as_is": 0, "device_at_host_pace": plain["calibration"]["sleep_cycles_per_tensor"]}
    instrumented = _require(run_child_process("stall", dict(base, mode="instrumented", variants=variants)))
    measured, control = {}, {}
    for variant in variants:
        plain_s = min(plain["walls"][variant]["run"])
        measured[variant] = {"plain_s": plain_s, "instrumented_s": min(instrumented["walls"][variant]["run"]),
                             "all_runs_s": {"plain": plain["walls"][variant]["run"],
                                            "instrumented": instrumented["walls"][variant]["run"]}}
        control[variant] = {"plain_s": plain_s, "instrumented_s": min(instrumented["walls"][variant]["planted"])}
    measured["device_as_is"]["async_resolved"] = instrumented.get("async_resolved")
    return {"measured": measured, "control": control}


def run_throughput(workdir: str, files: list) -> dict:
    return throughput_result(_require(run_child_process("throughput", {"files": files})))


def throughput_result(figures: dict) -> dict:
    """The control is the same figures with the planted pass's pinned bandwidth."""
    figures = dict(figures)
    control = dict(figures, plugin_pinned_gbps=figures.pop("planted_pinned_gbps"))
    control.pop("planted_pinned_gbps", None)
    return {"measured": figures, "control": control}


def run_bytes(workdir: str, files: list) -> dict:
    figures = _require(run_child_process("bytes", {}))
    return {"measured": figures["measured"], "control": figures["control"]}


def run_capture_race(workdir: str, files: list) -> dict:
    plain = run_child_process("capture_race", {"mode": "plain"})
    instrumented = run_child_process("capture_race", {"mode": "instrumented"})
    planted = run_child_process("capture_race", {"mode": "planted"})
    return {"measured": {"plain": plain, "instrumented": instrumented},
            "control": {"plain": plain, "instrumented": planted}}


def run_cast_copy(workdir: str, files: list) -> dict:
    figures = _require(run_child_process("cast_copy", {}))
    return {"measured": figures["measured"], "control": figures["control"]}


def run_windows(workdir: str, files: list) -> dict:
    figures = _require(run_child_process("windows", {}))
    return {"measured": figures["measured"], "control": figures["control"]}


def run_runtime_init(workdir: str, files: list) -> dict:
    plain = _require(run_child_process("runtime_init", {"mode": "plain"}))
    instrumented = _require(run_child_process("runtime_init", {"mode": "instrumented"}))
    planted = _require(run_child_process("runtime_init", {"mode": "planted"}))
    return {"measured": {"plain": plain, "instrumented": instrumented},
            "control": {"plain": plain, "instrumented": planted}}


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
    if "control_failures" not in figures:  # vLLM failed before the spans could be checked
        return figures
    control = {"failures": figures.pop("control_failures"), "exit_code": 0}
    return {"measured": figures, "control": control}


RUNNERS = {"stall": run_stall, "throughput": run_throughput, "bytes": run_bytes, "capture_race": run_capture_race,
           "cast_copy": run_cast_copy, "windows": run_windows, "runtime_init": run_runtime_init, "vllm": run_vllm}


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


# --- reading the plugin's figures back (the same functions read the CPU runs in the tests) ---------

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

    def finish(self) -> Trace:
        import otel_coldstart
        from otel_coldstart.analyze.readers import read_trace_file

        otel_coldstart.ready()
        self.provider.force_flush()
        otel_coldstart.uninstrument()
        return Trace(read_trace_file(self.path))


class Trace:
    """Analyzer span records (a trace file's, or a session's) with lookups by phase span."""

    def __init__(self, spans) -> None:
        self.spans = list(spans)
        self.by_id = {s.span_id: s for s in self.spans}

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


def bandwidth_gbps(spans) -> float | None:
    """The plugin's bandwidth over these spans, as the analyzer computes it (device time of
    queued work, host time of synchronous work), in GB/s; None if no byte's time is known."""
    from otel_coldstart.analyze.breakdown import bandwidth_sample

    samples = [s for s in map(bandwidth_sample, spans) if s is not None]
    nbytes, ns = sum(b for b, _ in samples), sum(t for _, t in samples)
    return nbytes / ns if nbytes and ns else None  # bytes per ns is GB/s


def link_figures(trace: Trace) -> dict:
    from otel_coldstart import semconv
    from otel_coldstart.analyze.breakdown import link_of

    link, bound = link_of(s for s in trace.spans if s.phase == semconv.PHASE_RUNTIME_INIT)
    return {"link": link, "link_gbps": bound / 1e9 if bound is not None else None}


def throughput_figures(trace: Trace, total_bytes: int, tensors: int) -> dict:
    """The plugin's pinned and pageable H2D figures (phases "pinned", "pageable",
    "pinned_planted"), their bytes and split, and the recorded link."""
    from otel_coldstart import semconv

    failures = []
    figures: dict = {"bytes": total_bytes, "tensors": tensors, **link_figures(trace)}
    for phase, memory in (("pageable", "pageable"), ("pinned", "pinned")):
        h2d = trace.under(phase, semconv.PHASE_H2D)
        nbytes = _sum(h2d, semconv.BYTES)
        split = _sum(h2d, semconv.COPY_PINNED_BYTES if memory == "pinned" else semconv.COPY_PAGEABLE_BYTES)
        if nbytes != total_bytes or split != total_bytes or _sum(h2d, semconv.CALLS) != tensors:
            failures.append(f"{phase}: bytes {nbytes}, {memory} bytes {split}, calls {_sum(h2d, semconv.CALLS)}; "
                            f"expected {total_bytes} bytes, {tensors} calls")
        if memory == "pinned" and not all(semconv.COPY_ASYNC_S in s.attributes for s in h2d):
            failures.append("pinned: queued copies were not resolved from events")
        figures[f"plugin_{memory}_gbps"] = bandwidth_gbps(h2d)
    figures["planted_pinned_gbps"] = bandwidth_gbps(trace.under("pinned_planted", semconv.PHASE_H2D))
    figures["accounting_failures"] = failures
    return figures


# --- the Copy.cu table -----------------------------------------------------------------------------

ROWS, COLS = 512, 1024
N = ROWS * COLS  # elements of every destination (1 MiB in bf16)
BF16, F32 = 2, 4


@dataclass(frozen=True)
class TensorSpec:
    device: str  # "cpu" | "cuda"
    dtype: str  # "bfloat16" | "float32"
    layout: str = "contiguous"  # contiguous | transposed (dense, not contiguous) | sliced (not dense) | row (1 x COLS)
    pinned: bool = False


@dataclass(frozen=True)
class ByteCase:
    """One copy, and what Copy.cu moves for it, written out by hand (not from _cuda_copy)."""

    name: str
    op: str  # "to" | "cpu" | "copy_" | "load"
    source: TensorSpec
    destination: TensorSpec | None = None  # copy_: into it; to: None
    to: tuple = ()  # Tensor.to's arguments: ("cuda",) or ("cuda", "float32")
    non_blocking: bool = False
    expected: tuple = ()  # (phase, bytes, pinned bytes, pageable bytes)
    why: str = ""


_PINNED_BF16 = TensorSpec("cpu", "bfloat16", pinned=True)
_DEVICE_BF16 = TensorSpec("cuda", "bfloat16")
BYTE_CASES = (
    ByteCase("to_pinned", "to", _PINNED_BF16, to=("cuda",), expected=("h2d", N * BF16, N * BF16, 0),
             why="same dtype, one block: one cudaMemcpy of the caller's pinned memory"),
    ByteCase("to_pageable", "to", TensorSpec("cpu", "bfloat16"), to=("cuda",), expected=("h2d", N * BF16, 0, N * BF16),
             why="the same from pageable memory"),
    ByteCase("to_pinned_non_blocking", "to", _PINNED_BF16, to=("cuda",), non_blocking=True,
             expected=("h2d", N * BF16, N * BF16, 0), why="queued from the pinned source"),
    ByteCase("to_cast_blocking", "to", _PINNED_BF16, to=("cuda", "float32"), expected=("h2d", N * F32, 0, N * F32),
             why="blocking: converted on the host into a pageable fp32 temporary, fp32 bytes cross"),
    ByteCase("to_cast_non_blocking", "to", _PINNED_BF16, to=("cuda", "float32"), non_blocking=True,
             expected=("h2d", N * BF16, N * BF16, 0), why="non-blocking: bf16 bytes from the pinned source, cast on "
                                                          "the GPU after"),
    ByteCase("to_transposed", "to", TensorSpec("cpu", "bfloat16", "transposed", True), to=("cuda",),
             expected=("h2d", N * BF16, N * BF16, 0), why="Tensor.to keeps a dense layout's strides: one block"),
    ByteCase("copy_transposed_into_param", "copy_", TensorSpec("cpu", "bfloat16", "transposed", True), _DEVICE_BF16,
             expected=("h2d", N * BF16, 0, N * BF16), why="into a contiguous parameter: .contiguous() on the host, "
                                                          "pageable"),
    ByteCase("copy_sliced_into_param", "copy_", TensorSpec("cpu", "bfloat16", "sliced", True), _DEVICE_BF16,
             expected=("h2d", N * BF16, 0, N * BF16), why="a slice with gaps: made contiguous on the host, pageable"),
    ByteCase("copy_broadcast", "copy_", TensorSpec("cpu", "bfloat16", "row", True), _DEVICE_BF16,
             expected=("h2d", N * BF16, 0, N * BF16), why="a broadcast row: expanded to the destination on the host, "
                                                          "the destination's bytes, pageable"),
    ByteCase("copy_cast_blocking", "copy_", TensorSpec("cpu", "float32", pinned=True), _DEVICE_BF16,
             expected=("h2d", N * BF16, 0, N * BF16), why="vLLM's param.data.copy_(w), fp32 checkpoint into a bf16 "
                                                          "model: converted on the host, half the source's bytes"),
    ByteCase("copy_cast_non_blocking", "copy_", TensorSpec("cpu", "float32", pinned=True), _DEVICE_BF16,
             non_blocking=True, expected=("h2d", N * F32, N * F32, 0),
             why="non-blocking: the fp32 source crosses from its pinned memory, cast on the GPU"),
    ByteCase("copy_pinned_non_blocking", "copy_", _PINNED_BF16, _DEVICE_BF16, non_blocking=True,
             expected=("h2d", N * BF16, N * BF16, 0), why="one block, queued from pinned memory"),
    ByteCase("cpu", "cpu", _DEVICE_BF16, expected=("d2h", N * BF16, 0, 0),
             why="D2H, one block (pinned/pageable is reported for H2D only)"),
    ByteCase("to_cpu_cast", "to", _DEVICE_BF16, to=("cpu", "float32"), expected=("d2h", N * BF16, 0, 0),
             why="blocking D2H with a cast: bf16 crosses into a host temporary, converted on the host"),
    ByteCase("copy_into_pinned_non_blocking", "copy_", _DEVICE_BF16, TensorSpec("cpu", "bfloat16", pinned=True),
             non_blocking=True, expected=("d2h", N * BF16, 0, 0), why="D2H into a pinned buffer, one block"),
    ByteCase("copy_cast_into_pinned_non_blocking", "copy_", _DEVICE_BF16, TensorSpec("cpu", "float32", pinned=True),
             non_blocking=True, expected=("d2h", N * F32, 0, 0),
             why="non-blocking D2H with a cast: cast on the GPU first, fp32 crosses"),
    ByteCase("torch_load_map_location", "load", TensorSpec("cpu", "bfloat16"),
             expected=("h2d", N * BF16 + COLS * F32, 0, N * BF16 + COLS * F32),
             why="torch.load(map_location='cuda') moves each storage with UntypedStorage.to, from pageable memory "
                 "(a bf16 weight and an fp32 bias here)"),
)


def host_tensor(torch, spec: TensorSpec):
    """The host-side facts of a spec: a real CPU tensor of its dtype and layout (not pinned)."""
    dtype = getattr(torch, spec.dtype)
    if spec.layout == "transposed":
        return torch.randn(COLS, ROWS).to(dtype).t()
    if spec.layout == "sliced":
        return torch.randn(ROWS, 2 * COLS).to(dtype)[:, :COLS]
    if spec.layout == "row":
        return torch.randn(1, COLS).to(dtype)
    return torch.randn(ROWS, COLS).to(dtype)


def byte_failures(trace: Trace, cases=BYTE_CASES, prefix: str = "bytes_") -> tuple[list, dict]:
    """Each case's recorded bytes and split (aggregates below its phase) against Copy.cu's."""
    from otel_coldstart import semconv

    failures, measured = [], {}
    for case in cases:
        phase = case.expected[0]
        spans = trace.under(prefix + case.name, phase)
        got = (phase, int(_sum(spans, semconv.BYTES)), int(_sum(spans, semconv.COPY_PINNED_BYTES)),
               int(_sum(spans, semconv.COPY_PAGEABLE_BYTES)))
        measured[case.name] = got
        if got != tuple(case.expected):
            failures.append(f"{case.name}: recorded {got[1:]} (bytes, pinned, pageable), Copy.cu moves "
                            f"{tuple(case.expected[1:])}: {case.why}")
    return failures, measured


# --- the device-time figures of cast_copy ----------------------------------------------------------

CAST_COPY_PHASES = {"gpu_cast": "cast", "d2d_copy": "d2d", "side_stream_copy": "d2d", "param_copy": "h2d"}


def cast_copy_figures(trace: Trace, truths: dict, behind: dict, prefix: str = "") -> dict:
    """The plugin's device time of each workload (phases ``prefix + name``) next to its truth,
    and the blocking copy behind queued device work (phase ``prefix + "h2d_behind_cast"``)."""
    from otel_coldstart import semconv

    figures: dict = {"failures": []}
    for name, phase in CAST_COPY_PHASES.items():
        spans = trace.under(prefix + name, phase)
        async_s = [s.attributes.get(semconv.COPY_ASYNC_S) for s in spans]
        if not spans or None in async_s:
            figures["failures"].append(f"{name}: no device time on {len(spans)} {phase} aggregate(s)")
            continue
        figures[name] = {"truth_s": truths[name], "plugin_device_s": sum(async_s),
                         "plugin_host_busy_s": _sum(spans, semconv.BUSY_S),
                         "untimed_calls": _sum(spans, semconv.COPY_UNTIMED_CALLS)}
    h2d = trace.under(prefix + "h2d_behind_cast", semconv.PHASE_H2D)
    figures["h2d_behind_cast"] = dict(behind, h2d_busy_s=_sum(h2d, semconv.BUSY_S),
                                      h2d_waited_s=_sum(h2d, semconv.COPY_WAITED_S))
    return figures


def runtime_init_figures(trace: Trace) -> dict:
    from otel_coldstart import semconv

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


# --- children: each runs in a fresh process --------------------------------------------------------------

def run_child(name: str, args: dict) -> int:
    figures = CHILDREN[name](args)
    print(json.dumps(figures, default=str))
    return EXIT_OK


def _load_pinned(files, sleep_cycles: int) -> dict:
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
    return out


def _calibrate(files) -> dict:
    """GPU clock (cycles per second of torch.cuda._sleep) and host time per tensor of the
    loader, so the slowed device takes as long per tensor as the host."""
    import torch
    from safetensors import safe_open

    cycles_per_s = _sleep_cycles_per_s(torch)
    tensors = 0
    began = time.perf_counter()
    for path in files:
        with safe_open(path, framework="pt") as handle:
            for name in handle.keys():
                handle.get_tensor(name).pin_memory()
                tensors += 1
    host_per_tensor_s = (time.perf_counter() - began) / tensors
    return {"cycles_per_s": cycles_per_s, "host_per_tensor_s": host_per_tensor_s,
            "sleep_cycles_per_tensor": int(cycles_per_s * host_per_tensor_s)}


def _sleep_cycles_per_s(torch) -> float:
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(50_000_000)
    end.record()
    end.synchronize()
    return 50_000_000 / (start.elapsed_time(end) / 1e3)


def child_stall(args: dict) -> dict:
    """Plain: calibration, then runs per variant. Instrumented: per variant, a run and a run
    with the host wait planted (plant_host_sync), alternately."""
    import torch

    instrumented = _Instrumented() if args["mode"] == "instrumented" else None
    import otel_coldstart

    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    files = args["files"]
    _load_pinned(files, 0)  # warm: page cache, pinned allocator
    torch.cuda.synchronize()
    figures: dict = {"walls": {}}
    variants = args.get("variants")
    if args.get("calibrate"):
        figures["calibration"] = _calibrate(files)
        variants = {"device_as_is": 0, "device_at_host_pace": figures["calibration"]["sleep_cycles_per_tensor"]}
    kinds = ("run", "planted") if instrumented else ("run",)
    for variant, cycles in variants.items():
        _load_pinned(files, cycles)  # warm-up run, not counted
        torch.cuda.synchronize()
        walls = figures["walls"][variant] = {kind: [] for kind in kinds}
        for run in range(args["runs"]):
            for kind in kinds:
                plant = plant_host_sync() if kind == "planted" else contextlib.nullcontext()
                phase = otel_coldstart.phase(f"{variant}_{kind}_{run}") if instrumented else contextlib.nullcontext()
                torch.cuda.synchronize()
                began = time.perf_counter()
                with plant, phase:
                    loaded = _load_pinned(files, cycles)
                    torch.cuda.synchronize()
                walls[kind].append(time.perf_counter() - began)
                del loaded
    if instrumented:
        from otel_coldstart import semconv

        trace = instrumented.finish()
        h2d = trace.under("device_as_is_run_0", semconv.PHASE_H2D)
        figures["async_resolved"] = bool(h2d) and all(semconv.COPY_ASYNC_S in s.attributes for s in h2d)
    return figures


def child_throughput(args: dict) -> dict:
    import torch
    from safetensors.torch import load_file

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
    with plant_launch_bandwidth(), otel_coldstart.phase("pinned_planted"):  # the negative control
        kept = [t.to("cuda", non_blocking=True) for t in pinned]
        torch.cuda.synchronize()
    del kept
    trace = instrumented.finish()  # ready(): the patches are off for the reference figures below
    figures = throughput_figures(trace, total, len(tensors))

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
    kept = [t.to("cuda") for t in tensors]  # noqa: F841 - the copies stay alive until timed
    torch.cuda.synchronize()
    figures["reference_pageable_gbps"] = total / (time.perf_counter() - began) / 1e9
    return figures


def prepare_byte_case(torch, case: ByteCase, workdir: str):
    """One case of the table on the GPU: its tensors made now (their own copies to the device
    must not count), the copy itself returned, to be called inside the case's phase. The CPU
    tests run the same table through the wrappers with described tensors."""
    def real(spec: TensorSpec):
        tensor = host_tensor(torch, spec)
        if spec.pinned:
            tensor = tensor.pin_memory()
        return tensor.to("cuda") if spec.device == "cuda" else tensor

    if case.op == "load":
        path = os.path.join(workdir, f"{case.name}.pt")
        torch.save({"w": host_tensor(torch, case.source), "b": torch.randn(COLS)}, path)
        return lambda: torch.load(path, map_location="cuda", weights_only=True)
    source = real(case.source)
    if case.op == "copy_":
        destination = real(case.destination)
        return lambda: destination.copy_(source, non_blocking=case.non_blocking)
    if case.op == "cpu":
        return source.cpu
    to = [getattr(torch, a) if a in ("float32", "bfloat16") else a for a in case.to]
    return lambda: source.to(*to, non_blocking=case.non_blocking)


def child_bytes(args: dict) -> dict:
    import torch

    instrumented = _Instrumented()
    import otel_coldstart

    torch.zeros(1, device="cuda")
    workdir = tempfile.mkdtemp(prefix="gpu-check-bytes-")
    for prefix, plant in (("bytes_", contextlib.nullcontext), ("planted_", plant_byte_miscount)):
        for case in BYTE_CASES:
            copy = prepare_byte_case(torch, case, workdir)
            torch.cuda.synchronize()
            with plant(), otel_coldstart.phase(prefix + case.name):
                copy()
                torch.cuda.synchronize()
    trace = instrumented.finish()
    failures, measured = byte_failures(trace, prefix="bytes_")
    planted_failures, planted = byte_failures(trace, prefix="planted_")
    return {"measured": {"failures": failures, "cases": measured},
            "control": {"failures": planted_failures, "cases": planted}}


def _mlp(torch, device: str = "cuda", hidden: int = 4096):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(1024, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, 1024)).to(device)


def child_capture_race(args: dict) -> dict:
    """Captures in global mode on the main thread while a copy thread works.

    The copy thread allocates nothing while a capture is open: ``copy_`` between buffers made
    beforehand (pinned host, device), on its own stream. torch.cuda.graph's ``__enter__``
    empties the caching allocators, so an allocation (``.to("cuda")``, ``pin_memory()``) during
    another thread's global capture would need cudaMalloc/cudaHostAlloc, and the host
    allocator's event queries: the capture would break for the workload's own fault. It pins
    (an allocation and a copy) only between captures (``pin_gate``, held around each capture).
    A handshake inside every capture (``in_capture``/``copied``) makes sure a copy happened
    while it was open. Mode ``planted`` (the negative control) has the copy thread query a
    CUDA event inside each capture, unguarded: the call the plugin's gate keeps out of
    captures. ``device="cpu"``: the same on CPU stand-ins (the tests)."""
    import threading

    import torch

    device = args.get("device", "cuda")
    on_gpu = device == "cuda"
    mode = args["mode"]
    instrumented = _Instrumented() if mode != "plain" else None
    import otel_coldstart
    from otel_coldstart.patches import cuda_graphs

    figures: dict = {"failures": []}
    mlp = _mlp(torch, device, args.get("hidden", 4096))
    inputs = {n: torch.randn(n, 1024, device=device) for n in CAPTURE_SIZES}
    with torch.no_grad():
        if on_gpu:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up off the capture stream, as torch advises
                for n in CAPTURE_SIZES:
                    mlp(inputs[n])
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
        else:
            for n in CAPTURE_SIZES:
                mlp(inputs[n])

    pool = 8
    staging = [torch.randn(1 << 18) for _ in range(pool)]
    if on_gpu:
        staging = [t.pin_memory() for t in staging]
    targets = [torch.empty(1 << 18, device=device) for _ in range(pool)]
    small = torch.randn(1 << 12)
    copy_stream = torch.cuda.Stream() if on_gpu else None
    probe = None
    if mode == "planted":
        probe = torch.cuda.Event()
        probe.record(copy_stream)  # created and recorded outside any capture; queried inside them
    if on_gpu:
        torch.cuda.synchronize()

    stop = threading.Event()
    in_capture = threading.Event()
    copied = threading.Event()
    pin_gate = threading.Lock()
    counts = {"copies": 0, "pins": 0, "copies_in_capture": 0, "captures_while_copying": 0, "error": None}

    def copier():
        try:
            with torch.cuda.stream(copy_stream) if on_gpu else contextlib.nullcontext():
                i = 0
                while not stop.is_set():
                    inside = in_capture.is_set()  # seen before the copy: the copy is inside the capture
                    targets[i % pool].copy_(staging[i % pool], non_blocking=True)
                    counts["copies"] += 1
                    if inside:
                        counts["copies_in_capture"] += 1
                        if probe is not None:
                            probe.query()  # the planted capture-illegal call
                        copied.set()
                    if on_gpu and pin_gate.acquire(blocking=False):  # no capture open: pins are safe
                        try:
                            torch.empty(1 << 12, pin_memory=True)  # a pinned allocation (vLLM's staging)
                            small.pin_memory()  # a pin copy
                            counts["pins"] += 2
                        finally:
                            pin_gate.release()
                    i += 1
                    time.sleep(0.0005)
        except Exception as error:
            counts["error"] = f"copy thread: {type(error).__name__}: {error}"
            copied.set()

    thread = threading.Thread(target=copier, name="copier")
    graphs, outputs = {}, {}
    thread.start()
    try:
        phase = otel_coldstart.phase("captures") if instrumented else contextlib.nullcontext()
        with phase, torch.no_grad():
            for _ in range(CAPTURE_ROUNDS):
                for n in CAPTURE_SIZES:
                    if counts["error"]:
                        raise RuntimeError(counts["error"])  # no copy thread left to race with
                    graph = torch.cuda.CUDAGraph()
                    with pin_gate:
                        copied.clear()
                        # default: capture_error_mode="global"
                        with cuda_graphs.batch_size(n), torch.cuda.graph(graph):
                            in_capture.set()
                            outputs[n] = mlp(inputs[n])
                            overlapped = copied.wait(2.0)  # a copy ran while this capture was open
                            in_capture.clear()
                        counts["captures_while_copying"] += bool(overlapped)
                    graphs[n] = graph
    except Exception as error:
        figures["error"] = f"capture: {type(error).__name__}: {error}"
    finally:
        in_capture.clear()
        stop.set()
        thread.join()
    if counts["error"]:
        figures["error"] = figures.get("error") or counts["error"]
    figures.update({k: v for k, v in counts.items() if k != "error"})
    if "error" in figures:
        if instrumented:
            with contextlib.suppress(Exception):
                instrumented.finish()
        return figures
    with torch.no_grad():
        for n in CAPTURE_SIZES:
            graphs[n].replay()
        if on_gpu:
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
        copy_phase = semconv.PHASE_H2D if on_gpu else semconv.PHASE_H2H
        copy_calls = sum(s.attributes.get(semconv.CALLS, 0) for s in copier_spans if s.phase == copy_phase)
        pin_calls = sum(s.attributes.get(semconv.CALLS, 0) for s in copier_spans if s.phase == semconv.PHASE_PIN)
        if copy_calls != counts["copies"] or pin_calls != counts["pins"]:
            figures["failures"].append(f"copy thread: {copy_calls} {copy_phase} and {pin_calls} pin calls recorded; "
                                       f"it made {counts['copies']} copies and {counts['pins']} pins")
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
    cycles_per_s = _sleep_cycles_per_s(torch)
    torch.cuda.synchronize()

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

    small = torch.randn(1 << 18)
    cast_truth = _truth(torch, casts)
    results = {}
    for prefix, plant in (("", contextlib.nullcontext), ("planted_", plant_no_events)):
        truths = {}
        with plant():
            for name, work in (("gpu_cast", casts), ("d2d_copy", d2d), ("side_stream_copy", side_d2d),
                               ("param_copy", params)):
                with otel_coldstart.phase(prefix + name):
                    truths[name] = _truth(torch, work)
            with otel_coldstart.phase(prefix + "h2d_behind_cast"):
                torch.cuda.synchronize()
                began = time.perf_counter()
                torch.cuda._sleep(int(cycles_per_s * BEHIND_SLEEP_S))  # device busy (not ours: untimed)
                queued = casts()  # timed GPU casts behind it: the tail the blocking copy waits for
                launched_s = time.perf_counter() - began
                small.to("cuda")  # blocking: waits for the sleep and the casts, then copies 1 MiB
                torch.cuda.synchronize()
                del queued
        results[prefix] = (truths, {"sleep_s": BEHIND_SLEEP_S, "cast_truth_s": cast_truth, "launched_s": launched_s,
                                    "expected_wait_s": max(0.0, BEHIND_SLEEP_S + cast_truth - launched_s)})
    trace = instrumented.finish()
    return {"measured": cast_copy_figures(trace, *results[""]),
            "control": cast_copy_figures(trace, *results["planted_"], prefix="planted_")}


def _async_s(trace: Trace, phase: str, parent: str) -> float:
    return _sum(trace.under(parent, phase), "coldstart.copy.async_s")


def child_windows(args: dict) -> dict:
    """Issue 23's second part on a device; the control (a segment's idle start counted) is run
    in the same process, on the idle_start workload only."""
    import threading

    import torch

    instrumented = _Instrumented()
    import otel_coldstart

    torch.zeros(1, device="cuda")
    figures: dict = {"failures": []}
    # noop_events: moves that return their tensor make no event.
    made = []
    real_event = torch.cuda.Event

    class CountingEvent(real_event):
        def __init__(self, *a, **k):
            made.append(1)
            super().__init__(*a, **k)

    resident = torch.ones(1024, device="cuda")
    torch.cuda.Event = CountingEvent
    try:
        with otel_coldstart.phase("noop"):
            for _ in range(100):
                resident.to("cuda"), resident.float(), resident.to(resident.device, torch.float32)
        figures["noop_events"] = len(made)
    finally:
        torch.cuda.Event = real_event
    # shared_stream: two threads casting on the default stream.
    sources = [torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    [t.to(torch.float32) for t in sources[:1]]
    truth = _truth(torch, lambda: [t.to(torch.float32) for _ in range(2) for t in sources])

    def caster(name):
        with otel_coldstart.phase(name):
            kept = [t.to(torch.float32) for t in sources]
        torch.cuda.synchronize()
        del kept

    threads = [threading.Thread(target=caster, args=(f"caster{i}",)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # idle_start: a transposed host tensor; the host makes it contiguous inside the call.
    host = torch.randn(4096, 8192).t()
    contiguous = host.contiguous()
    began = time.perf_counter()
    host.contiguous()
    host_prep_s = time.perf_counter() - began
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    kept = contiguous.to("cuda", non_blocking=True)
    end.record()
    end.synchronize()
    copy_s = start.elapsed_time(end) / 1e3
    del kept

    def idle_start(name):
        torch.cuda.synchronize()
        with otel_coldstart.phase(name):
            moved = host.to("cuda", non_blocking=True)
        torch.cuda.synchronize()
        return moved

    idle_start("idle")
    with plant_idle_counted():
        idle_start("idle_planted")
    # blocking_waits: a blocking H2D behind queued casts, ten times.
    small = torch.randn(1024, 1024)
    for rep_index in range(10):
        with otel_coldstart.phase(f"behind{rep_index}"):
            kept = [t.to(torch.float32) for t in sources]
            small.to("cuda")
        torch.cuda.synchronize()
        del kept
    # unseen_capture: torch._C._CUDAGraph directly (no wrapper sees it), global mode.
    weight = torch.randn(512, 512, device="cuda")
    static_in, host_buffer = torch.randn(64, 512, device="cuda"), torch.randn(1024, 1024).pin_memory()
    device_buffer = torch.empty(1024, 1024, device="cuda")
    stop, errors = threading.Event(), []

    def copier():
        index = 0
        while not stop.is_set():
            with otel_coldstart.phase(f"copies{index}"):  # each phase end settles (queries) its events
                device_buffer.copy_(host_buffer, non_blocking=True)
            index += 1

    side = torch.cuda.Stream()
    thread = threading.Thread(target=copier)
    thread.start()
    try:
        for _ in range(20):
            graph = torch._C._CUDAGraph()
            with torch.cuda.stream(side):
                try:
                    graph.capture_begin(capture_error_mode="global")
                    static_out = static_in @ weight
                    graph.capture_end()
                except Exception as error:  # noqa: BLE001 - the check's finding
                    errors.append(f"{type(error).__name__}: {error}")
                    continue
            graph.replay()
            torch.cuda.synchronize()
            if not torch.allclose(static_out, static_in @ weight, atol=1e-3):
                errors.append("a replay differs from eager")
    finally:
        stop.set()
        thread.join()
    figures["capture_errors"] = errors
    trace = instrumented.finish()
    plugin_shared = sum(_async_s(trace, "cast", f"caster{i}") for i in range(2))
    figures["shared_stream"] = {"plugin_s": plugin_shared, "truth_s": truth}
    idle = {"truth_s": copy_s, "host_prep_s": host_prep_s}
    with_wait = sum(1 for i in range(10) if _sum(trace.under(f"behind{i}", "h2d"), "coldstart.copy.waited_s") > 0)
    figures["blocking_waits"] = {"reps": 10, "with_wait": with_wait}
    control = dict(figures, idle_start=dict(idle, plugin_s=_async_s(trace, "h2d", "idle_planted")))
    figures["idle_start"] = dict(idle, plugin_s=_async_s(trace, "h2d", "idle"))
    return {"measured": figures, "control": control}


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

    torch.cuda.is_available()
    with plant_init_in_copy() if args["mode"] == "planted" else contextlib.nullcontext():
        with __import__("otel_coldstart").phase("first_touch"):
            torch.ones(1 << 20).to("cuda")  # the first CUDA touch is a copy
            torch.cuda.synchronize()
    return runtime_init_figures(instrumented.finish())


CHILDREN = {"stall": child_stall, "throughput": child_throughput, "bytes": child_bytes,
            "capture_race": child_capture_race, "cast_copy": child_cast_copy, "windows": child_windows,
            "runtime_init": child_runtime_init}


if __name__ == "__main__":
    sys.exit(main())
