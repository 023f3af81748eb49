"""Every check of scripts/gpu_check.py, measurement and negative control, on CPU stand-ins.

On a GPU each check measures the plugin and then runs the same measurement with a known
defect planted (scripts/gpu_check.PLANTS, or the workload's capture-illegal call); a check
whose control does not FAIL is INCONCLUSIVE. Here the same plants and the same figure
readers and judges run over a simulated device (tests/device/_standins.py: streams on a
timeline, events that complete when the work before them has, stand-in graphs that break
when an illegal call reaches them), so each check is shown to PASS on the plugin as it is and
to FAIL with its defect planted: a GPU run has a check that can fail."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys

import pytest
import torch

import otel_coldstart
from _standins import MS, Described, DescribedStorage, Timeline, TimelineStream, make_event_class, stand_in_cuda_runtime
from otel_coldstart import semconv, session as _session
from otel_coldstart.patches import _device_windows, tensor_ops

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", os.path.join(ROOT, "scripts", "gpu_check.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def device(traced, monkeypatch):
    """A simulated CUDA device under the real wrappers (instrumented first: patch() binds
    what it finds): stand-in events and streams on a timeline whose host clock is the
    wrappers' clock. A host wait moves the host clock."""
    line = Timeline()
    line.Event = make_event_class(line, host_waits=True)
    line.current = TimelineStream(torch.device("cuda", 0))
    monkeypatch.setattr(torch.cuda, "Event", line.Event)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: line.current)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(tensor_ops, "time", line)
    monkeypatch.setattr(_device_windows, "_clock_ns", line.time_ns)
    monkeypatch.setattr(tensor_ops, "_cuda_possible", True)

    monkeypatch.setattr(_session.ACTIVE.state(tensor_ops.__name__, tensor_ops._CudaSeen), "up", True)  # per start-up
    yield line


def _records(gpu_check):
    """ready(), then the start-up's spans as the analyzer reads them."""
    active = _session.ACTIVE
    otel_coldstart.ready()
    return gpu_check.Trace(active.records())


def _queued(line, result, device_ns, host_ns=10_000):
    """A call that queues ``device_ns`` of work on the current stream and returns."""
    def call(*args, **kwargs):
        line.host_ns += host_ns
        line.queue(line.current, device_ns)  # queued as the call returns
        return result
    return call


def _blocking(line, result, device_ns):
    """A blocking copy: the host waits for everything queued before it, then for the copy."""
    def call(*args, **kwargs):
        line.queue(line.current, device_ns)
        line.wait_for(line.current)
        return result
    return call


# --- stall: a planted host wait at an aggregate's end must show in the wall time -------------------

def _load(line, traced_run: bool, shards=4, tensors=8, host_ns=2 * MS, device_ns=2 * MS) -> int:
    """Simulated wall time of the pinned non-blocking loader: each tensor is read and pinned on
    the host, then queued; each shard ends (its span ends, as safe_open.__exit__ does)."""
    source = Described(torch.ones(1024, dtype=torch.bfloat16), "cpu", pinned=True)
    result = Described(torch.ones(1024, dtype=torch.bfloat16), "cuda:0")
    wrapper = tensor_ops._tensor_move("to")
    began = line.host_ns
    for shard in range(shards):
        with otel_coldstart.phase(f"shard_{shard}") if traced_run else contextlib.nullcontext():
            for _ in range(tensors):
                line.host_ns += host_ns
                call = _queued(line, result, device_ns)
                if traced_run:
                    wrapper(call, source, ("cuda:0",), {"non_blocking": True})
                else:
                    call()
    line.wait_for(line.current)  # torch.cuda.synchronize() at the end of the load
    return line.host_ns - began


def test_stall_passes_and_its_planted_host_wait_fails(gpu_check, device, traced):
    measured, control = {}, {}
    for variant, device_ns in (("device_as_is", 200_000), ("device_at_host_pace", 2 * MS)):
        plain = _load(device, False, device_ns=device_ns)
        instrumented = _load(device, True, device_ns=device_ns)
        with gpu_check.plant_host_sync():
            planted = _load(device, True, device_ns=device_ns)
        measured[variant] = {"plain_s": plain / 1e9, "instrumented_s": instrumented / 1e9}
        control[variant] = {"plain_s": plain / 1e9, "instrumented_s": planted / 1e9}
    assert gpu_check.judge_stall(control).status == "FAIL"  # the control can fail...
    assert gpu_check.judge("stall", {"measured": measured, "control": control}).status == "PASS"  # ...and did


# --- throughput: bandwidth from busy time (planted) must be told from device time ------------------

PINNED_NS_PER_MIB = 40_000  # 26 GB/s
PAGEABLE_NS_PER_MIB = 100_000  # 10.5 GB/s


def test_throughput_passes_and_its_planted_launch_bandwidth_fails(gpu_check, device, traced):
    tensors, mib = 16, 1 << 20
    source = Described(torch.ones(mib // 2, dtype=torch.bfloat16), "cpu")
    pinned = Described(torch.ones(mib // 2, dtype=torch.bfloat16), "cpu", pinned=True)
    result = Described(torch.ones(mib // 2, dtype=torch.bfloat16), "cuda:0")
    wrapper = tensor_ops._tensor_move("to")
    with otel_coldstart.phase("pageable"):
        for _ in range(tensors):
            wrapper(_blocking(device, result, PAGEABLE_NS_PER_MIB), source, ("cuda:0",), {})
    for name, plant in (("pinned", contextlib.nullcontext), ("pinned_planted", gpu_check.plant_launch_bandwidth)):
        with plant(), otel_coldstart.phase(name):
            for _ in range(tensors):
                wrapper(_queued(device, result, PINNED_NS_PER_MIB), pinned, ("cuda:0",), {"non_blocking": True})
            device.wait_for(device.current)
    figures = gpu_check.throughput_figures(_records(gpu_check), tensors * mib, tensors)
    figures.update(bulk_pinned_gbps=mib / PINNED_NS_PER_MIB, reference_pageable_gbps=mib / PAGEABLE_NS_PER_MIB)
    assert figures["accounting_failures"] == []
    assert figures["plugin_pinned_gbps"] == pytest.approx(mib / PINNED_NS_PER_MIB, rel=0.01)
    assert figures["planted_pinned_gbps"] > 3 * figures["plugin_pinned_gbps"]  # launch speed
    result = gpu_check.throughput_result(figures)
    assert gpu_check.judge_throughput(result["control"]).status == "FAIL"
    assert gpu_check.judge("throughput", result).status == "PASS"


# --- bytes: the Copy.cu table through the wrappers; the planted miscount must fail ---------------

def _run_byte_case(gpu_check, device, case) -> None:
    def described(spec):
        return Described(gpu_check.host_tensor(torch, spec), "cuda:0" if spec.device == "cuda" else "cpu",
                         pinned=spec.pinned)

    if case.op == "load":  # torch.load(map_location="cuda"): UntypedStorage.to per storage
        for nbytes in (gpu_check.N * gpu_check.BF16, gpu_check.COLS * gpu_check.F32):
            tensor_ops._storage_to(_blocking(device, DescribedStorage(nbytes, "cuda:0"), 10_000),
                                   DescribedStorage(nbytes, "cpu"), (), {"device": torch.device("cuda", 0)})
        return
    source = described(case.source)
    call = _queued if case.non_blocking else _blocking
    if case.op == "copy_":
        destination = described(case.destination)
        tensor_ops._tensor_copy(call(device, destination, 10_000), destination, (source, case.non_blocking), {})
        return
    target = "cpu" if case.op == "cpu" or case.to[0] == "cpu" else "cuda:0"
    dtype = getattr(torch, case.to[1]) if len(case.to) > 1 else source.dtype
    result = Described(source._real.to(dtype), target)  # .to() keeps a dense layout's strides
    args = () if case.op == "cpu" else (target,) + ((dtype,) if len(case.to) > 1 else ())
    kwargs = {"non_blocking": True} if case.non_blocking else {}
    tensor_ops._tensor_move(case.op)(call(device, result, 10_000), source, args, kwargs)


def test_bytes_pass_over_the_whole_table_and_the_planted_miscount_fails(gpu_check, device, traced, monkeypatch):
    monkeypatch.setattr(tensor_ops, "_strided", torch.strided)
    for prefix, plant in (("bytes_", contextlib.nullcontext), ("planted_", gpu_check.plant_byte_miscount)):
        with plant():
            for case in gpu_check.BYTE_CASES:
                with otel_coldstart.phase(prefix + case.name):
                    _run_byte_case(gpu_check, device, case)
            device.wait_for(device.current)
    trace = _records(gpu_check)
    failures, measured = gpu_check.byte_failures(trace, prefix="bytes_")
    assert failures == [] and len(measured) == len(gpu_check.BYTE_CASES)
    planted_failures, _ = gpu_check.byte_failures(trace, prefix="planted_")
    # The first round's rule is wrong exactly where Copy.cu converts or relayouts on the host.
    assert {f.split(":")[0] for f in planted_failures} == {
        "to_cast_blocking", "copy_transposed_into_param", "copy_sliced_into_param", "copy_broadcast",
        "copy_cast_blocking", "copy_cast_into_pinned_non_blocking"}
    result = {"measured": {"failures": failures, "cases": measured},
              "control": {"failures": planted_failures, "cases": measured}}
    assert gpu_check.judge("bytes", result).status == "PASS"


# --- capture_race: the workload itself, on stand-in graphs that break on an illegal call -----------

class _Capture:
    open = False
    invalidated = False


class _StrictEvent:
    """A CUDA event whose calls, made while a (global-mode) capture is open on any thread,
    invalidate it, as the CUDA runtime does: the capture then fails at its end."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def _call(self) -> None:
        if _Capture.open:
            _Capture.invalidated = True
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")

    def record(self, stream=None) -> None:
        self._call()

    def query(self) -> bool:
        self._call()
        return True


@pytest.fixture
def strict_graphs(graph_standins, monkeypatch):
    class StrictGraph(graph_standins):
        def capture_begin(self, *args, **kwargs):
            super().capture_begin(*args, **kwargs)
            _Capture.open, _Capture.invalidated = True, False

        def capture_end(self):
            _Capture.open = False
            super().capture_end()
            if _Capture.invalidated:
                raise RuntimeError("CUDA error: operation failed due to a previous error during capture")

    monkeypatch.setattr(torch.cuda, "CUDAGraph", StrictGraph)
    monkeypatch.setattr(torch.cuda, "Event", _StrictEvent)
    yield
    _Capture.open = _Capture.invalidated = False


def test_capture_race_passes_and_its_planted_illegal_call_breaks_the_capture(gpu_check, strict_graphs):
    otel_coldstart.uninstrument()
    runs = {mode: gpu_check.child_capture_race({"mode": mode, "device": "cpu", "hidden": 64})
            for mode in ("plain", "instrumented", "planted")}
    instrumented = runs["instrumented"]
    assert "error" not in instrumented and instrumented["failures"] == [], instrumented
    # Every capture had a copy inside it (the handshake), and every copy was counted.
    assert instrumented["captures_while_copying"] == len(gpu_check.CAPTURE_SIZES) * gpu_check.CAPTURE_ROUNDS
    assert "operation" in runs["planted"]["error"]
    result = {"measured": {"plain": runs["plain"], "instrumented": instrumented},
              "control": {"plain": runs["plain"], "instrumented": runs["planted"]}}
    assert gpu_check.judge_capture_race(result["control"]).status == "FAIL"
    assert gpu_check.judge("capture_race", result).status == "PASS"


# --- cast_copy: device time of GPU work, and a blocking copy behind queued work ----------------------

def _cast_copy_pass(gpu_check, device, prefix: str) -> tuple[dict, dict]:
    bf16 = Described(torch.ones(1024, dtype=torch.bfloat16), "cuda:0")
    fp32 = Described(torch.ones(1024, dtype=torch.float32), "cuda:0")
    pinned = Described(torch.ones(1024, dtype=torch.bfloat16), "cpu", pinned=True)
    small = Described(torch.ones(256), "cpu")
    small_result = Described(torch.ones(256), "cuda:0")
    cast, copy = tensor_ops._tensor_move("to"), tensor_ops._tensor_copy
    main_stream, side_stream = device.current, TimelineStream(7)

    def casts():
        for _ in range(16):
            cast(_queued(device, fp32, 1 * MS), bf16, (torch.float32,), {})

    def d2d():
        for _ in range(16):
            copy(_queued(device, bf16, 500_000), bf16, (bf16,), {})

    def side_d2d():
        device.current = side_stream
        try:
            d2d()
        finally:
            device.current = main_stream

    def params():
        for _ in range(16):
            copy(_queued(device, bf16, 200_000), bf16, (pinned, True), {})

    truths = {}
    for name, work, stream in (("gpu_cast", casts, main_stream), ("d2d_copy", d2d, main_stream),
                               ("side_stream_copy", side_d2d, side_stream), ("param_copy", params, main_stream)):
        with otel_coldstart.phase(prefix + name):
            device.wait_for(stream)
            began = device.host_ns
            work()
            device.wait_for(stream)
            truths[name] = (device.host_ns - began) / 1e9
    with otel_coldstart.phase(prefix + "h2d_behind_cast"):
        began = device.host_ns
        device.queue(main_stream, 200 * MS)  # torch.cuda._sleep: not ours, untimed
        casts()
        launched_s = (device.host_ns - began) / 1e9
        cast(_blocking(device, small_result, 100_000), small, ("cuda:0",), {})
    behind = {"sleep_s": 0.2, "cast_truth_s": truths["gpu_cast"], "launched_s": launched_s,
              "expected_wait_s": 0.2 + truths["gpu_cast"] - launched_s}
    return truths, behind


def test_cast_copy_passes_and_its_planted_launch_timing_fails(gpu_check, device, traced):
    measured = _cast_copy_pass(gpu_check, device, "")
    with gpu_check.plant_no_events():
        planted = _cast_copy_pass(gpu_check, device, "planted_")
    trace = _records(gpu_check)
    result = {"measured": gpu_check.cast_copy_figures(trace, *measured),
              "control": gpu_check.cast_copy_figures(trace, *planted, prefix="planted_")}
    behind = result["measured"]["h2d_behind_cast"]
    assert behind["h2d_busy_s"] == pytest.approx(0.0001, abs=1e-5)  # the copy's own device time
    assert behind["h2d_waited_s"] == pytest.approx(behind["expected_wait_s"], rel=0.01)
    control = gpu_check.judge_cast_copy(result["control"])
    assert control.status == "FAIL" and any("charged" in r for r in control.reasons)
    assert gpu_check.judge("cast_copy", result).status == "PASS"


# --- runtime_init: a copy that initialises CUDA inside its clock (planted) must be caught ---------

def _first_touch(gpu_check, monkeypatch, traced, planted: bool) -> dict:
    """Stand-in driver start (0.15 s) and lazy init (0.1 s) under the real wrappers; the first
    CUDA touch is a copy whose call initialises CUDA, as torch's first CUDA tensor does."""
    import time

    with monkeypatch.context() as patch:
        stand_in_cuda_runtime(patch)
        patch.setattr(tensor_ops, "_cuda_possible", True)
        traced.reinstrument()  # a new start-up: CUDA not seen up yet (Startup.cuda_up)
        source = Described(torch.ones(1024), "cpu")
        result = Described(torch.ones(1024), "cuda:0")

        def first_copy(*args, **kwargs):
            torch.cuda._lazy_init()  # the first CUDA tensor initialises CUDA
            time.sleep(0.005)
            return result

        torch.cuda.is_available()
        with gpu_check.plant_init_in_copy() if planted else contextlib.nullcontext():
            with otel_coldstart.phase("first_touch"):
                tensor_ops._tensor_move("to")(first_copy, source, ("cuda:0",), {})
        figures = gpu_check.runtime_init_figures(_records(gpu_check))
        otel_coldstart.uninstrument()
    return figures


def test_runtime_init_passes_and_its_planted_init_in_copy_fails(gpu_check, monkeypatch, traced):
    plain = {"is_available_s": 0.15, "lazy_init_s": 0.1, "first_alloc_and_copy_s": 0.005}
    result = {"measured": {"plain": plain, "instrumented": _first_touch(gpu_check, monkeypatch, traced, False)},
              "control": {"plain": plain, "instrumented": _first_touch(gpu_check, monkeypatch, traced, True)}}
    assert result["control"]["instrumented"]["init_overlaps_copy"] is True
    assert gpu_check.judge_runtime_init(result["control"]).status == "FAIL"
    assert gpu_check.judge("runtime_init", result).status == "PASS", result


# --- vllm: the span checks with the captures taken out must fail -----------------------------------

def test_vllm_control_blind_to_captures_fails(gpu_check):
    from otel_coldstart.analyze.model import Span

    spec = importlib.util.spec_from_file_location("gpu_check_vllm", os.path.join(ROOT, "scripts", "gpu_check_vllm.py"))
    vllm_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vllm_check)

    def span(index, phase, **attributes):
        return Span(trace_id="1" * 32, span_id=f"{index:016x}", parent_id=None, name=f"coldstart.{phase}",
                    start_ns=0, end_ns=1_000_000, attributes={semconv.PHASE: phase, **attributes},
                    resource={"process.pid": 7})

    spans = [span(1, semconv.PHASE_DESERIALIZE), span(2, semconv.PHASE_RUNTIME_INIT), span(3, semconv.PHASE_COMPILE),
             span(4, semconv.PHASE_GRAPH_CAPTURE, **{semconv.CALLS: 4, semconv.GRAPH_BATCH_SIZES: (8, 4, 2, 1)})]
    failures, _ = vllm_check.check_decoder(spans)
    control = vllm_check.control_failures(spans)
    assert failures == [] and any("graph capture" in f for f in control)
    result = {"measured": {"failures": failures, "exit_code": 0}, "control": {"failures": control, "exit_code": 0}}
    assert gpu_check.judge("vllm", result).status == "PASS"
