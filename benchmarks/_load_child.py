"""One start-up, in a fresh process: load a checkpoint, assign it into a model, cast it.

    python benchmarks/_load_child.py SIDE FORMAT PATH...

SIDE is ``plain`` (nothing added), ``coldstart`` (``otel_coldstart.instrument()`` as the
first statement, the embedded default exporter, ``ready()`` after the cast), ``coldstart_late``
(the same, ``instrument()`` right after ``import torch``, as a server that imports torch first
calls it: what the plugin imports then is imported already, see own_cost_share.py) or ``profiler``
(the load inside ``torch.profiler.profile()``). FORMAT is ``safetensors`` (PATHs are the
shards, read through ``safe_open`` as transformers does) or ``bin`` (one ``torch.load``).

This file imports nothing from otel_coldstart unless SIDE says so: the plain side must pay
for nothing it would not pay without the plugin. It prints one JSON line on stdout.

The interpreter's full (generation-2) collection runs when the objects that survived since
the last one pass a quarter of the heap: ~100 ms with torch imported, at a point that any
difference in what a process allocated before moves (benchmarks/gc_phase.py measures it).
The child reports the full collections that start inside the load + cast, and three
environment variables control the schedule (unset: the process as it is):

- ``BENCH_GC_PHASE=aligned``: ``gc.collect()`` right before the load + cast, on every side:
  both start the window with the same (empty) backlog, so a full collection inside it is the
  window's own allocations' doing;
- ``BENCH_BALLAST=N``: N empty lists kept alive, made before anything else (a stand-in for
  the objects a plugin, or any other import, adds: the control);
- ``BENCH_HEADROOM=1``: instead of the load + cast, count the objects that can be allocated
  at the window's start before the next full collection begins, print it and exit.
"""

import gc
import os
import sys
import threading
import time

_BALLAST = [[] for _ in range(int(os.environ.get("BENCH_BALLAST") or 0))]
SIDE = sys.argv[1]
INSTRUMENT_S = INSTRUMENT_CPU_S = None


def _instrument() -> tuple[float, float]:
    """``import otel_coldstart; otel_coldstart.instrument()``: its wall time (the import of the
    plugin and the OTel SDK, and instrument()) and the CPU of this, the host's, thread (what the
    plugin costs the start-up on a machine whose other tenants stretch wall times)."""
    global otel_coldstart
    began, began_cpu = time.perf_counter(), time.thread_time()
    import otel_coldstart

    otel_coldstart.instrument()
    return time.perf_counter() - began, time.thread_time() - began_cpu


if SIDE == "coldstart":
    INSTRUMENT_S, INSTRUMENT_CPU_S = _instrument()

import json  # noqa: E402
import resource  # noqa: E402

import torch  # noqa: E402
from torch import nn  # noqa: E402

if SIDE == "coldstart_late":  # instrument() as a server that imported torch first calls it
    INSTRUMENT_S, INSTRUMENT_CPU_S = _instrument()

# The process's CPU since it started (time.process_time: every thread, the plugin's too, and the
# interpreter's start-up): the sides compare by it, since a plugin that imports a module first
# moves its cost out of ``import torch``, and only the process total shows what was added.
CPU_AFTER_IMPORT_S = time.process_time()  # the set-up (either coldstart side) and import torch, and nothing else


def load_state(fmt: str, paths: list[str]) -> dict:
    if fmt == "bin":
        return torch.load(paths[0], map_location="cpu", weights_only=True)
    from safetensors import safe_open

    state = {}
    for path in paths:
        with safe_open(path, framework="pt") as shard:
            for key in shard.keys():
                state[key] = shard.get_tensor(key)
    return state


def empty_model(state: dict) -> tuple[nn.Module, dict]:
    """A module tree with the state dict's parameter names on the meta device (no memory, no
    init), as accelerate's init_empty_weights builds it. Returns it with, for each name, the
    module that owns the parameter and the parameter's attribute name."""
    owners = {}
    with torch.device("meta"):
        root = nn.Module()
        for name, tensor in state.items():
            *path, leaf = name.split(".")
            module = root
            for part in path:
                if part not in module._modules:
                    module.add_module(part, nn.Module())
                module = module._modules[part]
            module.register_parameter(leaf, nn.Parameter(torch.empty(tensor.shape, dtype=tensor.dtype)))
            owners[name] = (module, leaf)
    return root, owners


def start_up(fmt: str, paths: list[str]) -> tuple[int, float]:
    """Returns (elements cast to fp16, seconds the checkpoint read alone took)."""
    began = time.perf_counter()
    state = load_state(fmt, paths)
    load_s = time.perf_counter() - began
    model, owners = empty_model(state)
    # Put each loaded tensor in place of its meta parameter, one by one, as accelerate's
    # set_module_tensor_to_device does (Module.load_state_dict scans the whole state dict once
    # per module: quadratic, seconds at 20,000 tensors, and the same with or without us).
    for name, tensor in state.items():
        module, leaf = owners[name]
        module._parameters[leaf] = nn.Parameter(tensor, requires_grad=False)
    del state
    model.to(torch.float16)
    return sum(p.numel() for p in model.parameters() if p.dtype == torch.float16), load_s


class _Collections:
    """A gc callback: how many collections of each generation ran, and for how long (the
    full, generation-2 ones are the schedule's lottery; the young ones are what any
    allocation pays)."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self._began = None

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        elif self._began is not None:
            generation = info.get("generation", 0)
            self.count[generation] += 1
            self.seconds[generation] += time.perf_counter() - self._began
            self._began = None


def _task_cpu_ns() -> dict:
    """CPU time of each of this process's threads so far, in ns (``/proc/self/task/*/schedstat``:
    exact, where ``/proc/.../stat`` counts 10 ms ticks). Empty where the kernel has no schedstat."""
    cpu = {}
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return cpu
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as handle:
                cpu[int(tid)] = int(handle.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return cpu


def _threads_cpu_s(before: dict, after: dict, process_cpu_s: float) -> dict | None:
    """The window's CPU by who spent it: the host's main thread; torch's own (intra-op) threads,
    which are not Python threads; the Python threads other than the main one (the plugin's:
    the in-flight monitor, the export and SIGTERM threads); and threads that began and ended
    inside the window (the process's CPU no live thread accounts for: the plugin's short-lived
    export threads). None without schedstat."""
    if not before or not after:
        return None
    python_threads = {thread.native_id: thread for thread in threading.enumerate()}
    main_id = threading.main_thread().native_id
    spent = {"main": 0.0, "torch": 0.0, "other_python": 0.0}
    for tid, ns in after.items():
        seconds = (ns - before.get(tid, 0)) / 1e9
        if tid == main_id:
            spent["main"] += seconds
        elif tid in python_threads:
            spent["other_python"] += seconds
        else:
            spent["torch"] += seconds
    # process_time() and schedstat are different clocks: a fraction of a ms apart, never below 0.
    spent["ended"] = max(0.0, process_cpu_s - sum(spent.values()))
    return spent


def _headroom() -> int:
    """Objects the process can allocate (and keep) before the next full collection starts."""
    started = []

    def watch(phase: str, info: dict) -> None:
        if phase == "start" and info.get("generation") == 2:
            started.append(True)

    gc.callbacks.append(watch)
    kept = []
    while not started:
        kept.append([])
    gc.callbacks.remove(watch)
    return len(kept)


def main() -> None:
    fmt, paths = sys.argv[2], sys.argv[3:]
    first_profile_s = None
    if SIDE == "profiler":
        # The first profile() in a process imports torch._inductor and sets up the profiler
        # (about a second here): timed apart so the peer can be quoted with and without it.
        began = time.perf_counter()
        with torch.profiler.profile():
            pass
        first_profile_s = time.perf_counter() - began
    if os.environ.get("BENCH_GC_PHASE") == "aligned":
        gc.collect()
    if os.environ.get("BENCH_HEADROOM"):
        print(json.dumps({"side": SIDE, "headroom": _headroom()}), flush=True)
        return
    collections = _Collections()
    gc.callbacks.append(collections)
    tasks_before = _task_cpu_ns()
    began, began_cpu = time.perf_counter(), time.process_time()
    if SIDE == "profiler":
        with torch.profiler.profile():
            cast, load_s = start_up(fmt, paths)
    else:
        cast, load_s = start_up(fmt, paths)
    work_s = time.perf_counter() - began  # load + assign + cast: every intercepted call, no ready()
    # The CPU all the process's threads spent in it (torch's, ours): what other tenants of a
    # shared machine disturb much less than the wall time.
    cpu_at_work_end_s = time.process_time()
    work_cpu_s = cpu_at_work_end_s - began_cpu
    tasks_after = _task_cpu_ns()
    gc.callbacks.remove(collections)
    ready_s = ready_cpu_s = None
    if SIDE in ("coldstart", "coldstart_late"):
        ready_began = time.perf_counter()
        ready_began_cpu = time.thread_time()
        otel_coldstart.ready()  # ends the start-up: unpatch, metrics, file export (summary: a thread of ours)
        ready_s = time.perf_counter() - ready_began
        ready_cpu_s = time.thread_time() - ready_began_cpu
    region_s = time.perf_counter() - began
    print(json.dumps({
        "side": SIDE,
        "region_s": region_s,
        "work_s": work_s,
        "work_cpu_s": work_cpu_s,
        "load_s": load_s,
        "first_profile_s": first_profile_s,
        "instrument_s": INSTRUMENT_S,
        "ready_s": ready_s,
        "instrument_cpu_s": INSTRUMENT_CPU_S,
        "ready_cpu_s": ready_cpu_s,
        "cast_elements": cast,
        "cpu_after_import_s": CPU_AFTER_IMPORT_S,  # process CPU when torch is imported
        "cpu_at_work_end_s": cpu_at_work_end_s,  # process CPU when the load + cast is done (before ready())
        "gc_full_in_work": collections.count[2],  # full collections that ran inside the load + cast
        "gc_full_s": collections.seconds[2],
        "gc_young_in_work": collections.count[:2],  # generation 0 and 1
        "gc_young_s": sum(collections.seconds[:2]),
        "threads_cpu_s": _threads_cpu_s(tasks_before, tasks_after, work_cpu_s),
        "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        # Wall clock when the work is done: the parent subtracts it from the moment the
        # process has exited, giving the exit tail (atexit handlers, interpreter teardown).
        "done_wall": time.time(),
    }), flush=True)


main()
