"""Runtime init, compile and pinning on CPU-only torch: what can run is tested for real; what
needs a device is covered by scripts/gpu_check.py."""

from __future__ import annotations

import os

import pytest
import torch

import otel_coldstart
from otel_coldstart import semconv, session as _session
from otel_coldstart.patches import runtime, tensor_ops
from otel_coldstart.patches._wrapping import ColdstartWrapper

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="pinned memory needs a CUDA (or other accelerator) build and device")


# --- runtime_init ------------------------------------------------------------------------------

@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine can initialise CUDA")
def test_failed_cuda_init_is_one_error_span_and_the_host_gets_its_exception(traced):
    # A CPU build raises AssertionError ("Torch not compiled with CUDA enabled"); a CUDA build
    # on a machine without a driver, RuntimeError ("Found no NVIDIA driver on your system").
    failures = (AssertionError, RuntimeError)
    otel_coldstart.uninstrument()
    with pytest.raises(failures) as plain:
        torch.cuda._lazy_init()
    traced.reinstrument()
    for _ in range(2):
        with pytest.raises(failures) as instrumented:
            torch.cuda._lazy_init()
        assert type(instrumented.value) is type(plain.value) and str(instrumented.value) == str(plain.value)
    otel_coldstart.ready()
    (span,) = traced.by_phase(semconv.PHASE_RUNTIME_INIT)  # once per start-up, not per retry
    assert span.status.status_code.name == "ERROR"
    assert type(plain.value).__name__ in (span.status.description or "") or any(
        e.name == "exception" and e.attributes.get("exception.type") == type(plain.value).__name__
        for e in span.events)
    assert span.attributes[semconv.RUNTIME_BACKEND] == "cuda"


def test_first_successful_init_is_one_span_and_the_wrapper_removes_itself(monkeypatch, request):
    """torch's _lazy_init cannot succeed without a GPU: a stand-in that flips torch's
    "initialised" answer takes its place, under our real wrapper."""
    state = {"initialised": False, "calls": 0}

    def stand_in_lazy_init():
        state["calls"] += 1
        state["initialised"] = True

    otel_coldstart.uninstrument()
    monkeypatch.setattr(runtime, "_initialised_seen", False)
    monkeypatch.setattr(torch.cuda, "_lazy_init", stand_in_lazy_init)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: state["initialised"])
    traced = request.getfixturevalue("traced")
    assert runtime.is_patched()
    torch.cuda._lazy_init()
    assert torch.cuda._lazy_init is stand_in_lazy_init  # removed at once: nothing left to see
    torch.cuda._lazy_init()
    otel_coldstart.ready()
    (span,) = traced.by_phase(semconv.PHASE_RUNTIME_INIT)
    assert span.status.status_code.name == "UNSET"
    assert semconv.RUNTIME_DEVICE_COUNT in span.attributes
    assert state["calls"] == 2


# --- compile -----------------------------------------------------------------------------------

def _cast_and_scale(x):
    return x.to(torch.float16) * 3


def test_fullgraph_compile_of_a_cast_gives_the_same_result_and_a_compile_span(traced):
    import torch._dynamo

    torch._dynamo.reset()
    x = torch.randn(8, 8, dtype=torch.bfloat16)
    otel_coldstart.uninstrument()
    expected = _cast_and_scale(x)
    traced.reinstrument()
    compiled = torch.compile(_cast_and_scale, fullgraph=True, backend="aot_eager")  # a graph break raises
    result = compiled(x)
    otel_coldstart.ready()
    assert result.dtype == expected.dtype and torch.equal(result, expected)
    (span,) = traced.by_phase(semconv.PHASE_COMPILE)
    assert span.attributes[semconv.COMPILE_TRIGGER] == "dynamo"
    assert span.attributes[semconv.COMPILE_ID]
    # Fake and functional tensors flowed through Tensor.to while tracing: none recorded.
    assert traced.by_phase(semconv.PHASE_CAST) == []


def test_compile_after_ready_is_marked(traced):
    import torch._dynamo

    torch._dynamo.reset()
    otel_coldstart.ready()
    torch.compile(_cast_and_scale, fullgraph=True, backend="eager")(torch.randn(3))
    spans = traced.by_phase(semconv.PHASE_COMPILE)
    assert spans and all(s.attributes[semconv.AFTER_READY] is True for s in spans)


def test_compiling_during_start_up_never_recompiles_after_ready(traced):
    """dynamo guards on the identity of torch.empty when it traces through it: the allocator
    wrappers are taken off before the first compilation, so ready() restoring the originals
    invalidates nothing. Tensor methods are not guarded that way."""
    import torch._dynamo

    from otel_coldstart.patches import pinning

    torch._dynamo.reset()
    traced.reinstrument()  # FRAME_COUNTER is 0 again: the allocator wrappers go back on
    assert pinning._allocator_patches, "the allocator wrappers were not installed"

    def fill(x):
        return x.to(torch.float16) + torch.zeros(x.shape[0]) + torch.empty(x.shape[0]).fill_(2)

    compiled = torch.compile(fill, fullgraph=True, backend="aot_eager")
    x = torch.randn(5)
    first = compiled(x)
    assert not pinning._allocator_patches  # taken off before dynamo traced
    assert isinstance(vars(torch.Tensor)["pin_memory"], ColdstartWrapper)  # the rest stays until ready
    otel_coldstart.ready()
    second = compiled(x)
    assert torch.equal(first, second) and torch.equal(first, fill(x))
    compiles = traced.by_phase(semconv.PHASE_COMPILE)
    assert len(compiles) == 1 and not compiles[0].attributes.get(semconv.AFTER_READY)


# --- pinning ------------------------------------------------------------------------------------

@pytest.mark.skipif(torch.cuda.is_available(), reason="pinning works here: see the CUDA test")
def test_pinning_without_an_accelerator_raises_the_host_error_unchanged(traced):
    def attempts():
        errors = []
        for attempt in (lambda: torch.randn(4).pin_memory(), lambda: torch.empty(4, pin_memory=True),
                        lambda: torch.zeros(2, 2, pin_memory=True)):
            with pytest.raises(RuntimeError) as raised:
                attempt()
            errors.append((type(raised.value), str(raised.value)))
        return errors

    instrumented = attempts()
    otel_coldstart.uninstrument()
    assert instrumented == attempts()
    assert traced.by_phase(semconv.PHASE_PIN) == []


def test_allocations_without_pin_memory_pass_through_silently(traced):
    a = torch.empty(3, 3)
    b = torch.zeros(4, pin_memory=False)
    c = torch.tensor([1.0, 2.0])
    otel_coldstart.ready()
    assert a.shape == (3, 3) and torch.equal(b, torch.zeros(4)) and c.tolist() == [1.0, 2.0]
    assert traced.by_phase(semconv.PHASE_PIN) == []


@needs_cuda
def test_pinning_is_one_aggregate_per_kind_with_bytes(traced):
    sources = [torch.randn(256) for _ in range(10)]
    pinned = [s.pin_memory() for s in sources]
    buffers = [torch.empty(1024, dtype=torch.uint8, pin_memory=True) for _ in range(3)]
    assert all(p.is_pinned() for p in pinned + buffers)
    assert all(torch.equal(p, s) for p, s in zip(pinned, sources))
    assert pinned[0].pin_memory() is pinned[0]  # already pinned: a no-op, not counted
    otel_coldstart.ready()
    by_kind = {s.attributes[semconv.PIN_KIND]: s for s in traced.by_phase(semconv.PHASE_PIN)}
    assert by_kind[semconv.PIN_KIND_COPY].attributes[semconv.BYTES] == 10 * 256 * 4
    assert by_kind[semconv.PIN_KIND_COPY].attributes[semconv.CALLS] == 10
    assert by_kind[semconv.PIN_KIND_ALLOC].attributes[semconv.BYTES] == 3 * 1024


# --- the driver's start (cuInit through is_available) and a copy as the first CUDA touch -------

@pytest.fixture
def stand_in_cuda(monkeypatch, request):
    """torch's CUDA entry points with stand-ins that take real time: the device count (the
    driver's start, ``cudaGetDeviceCount``) and ``_lazy_init``. Our real wrappers go on top."""
    from _standins import stand_in_cuda_runtime

    state = stand_in_cuda_runtime(monkeypatch)
    traced = request.getfixturevalue("traced")
    yield traced, state
    otel_coldstart.uninstrument()


def test_driver_start_through_is_available_is_its_own_runtime_init_span(stand_in_cuda):
    traced, state = stand_in_cuda
    assert torch.cuda.is_available()
    assert torch.cuda.is_available()  # asked again: the wrapper is gone, nothing more recorded
    assert not isinstance(torch._C._cuda_getDeviceCount, ColdstartWrapper)
    torch.cuda._lazy_init()
    otel_coldstart.ready()
    spans = sorted(traced.by_phase(semconv.PHASE_RUNTIME_INIT), key=lambda s: s.start_time)
    assert [s.attributes[semconv.RUNTIME_STEP] for s in spans] == ["driver", "lazy_init"]
    driver, init = spans
    assert (driver.end_time - driver.start_time) / 1e9 >= 0.14
    assert driver.attributes[semconv.RUNTIME_DEVICE_COUNT] == 1
    # The lazy init's own time only: the driver was already up.
    assert 0.09 <= (init.end_time - init.start_time) / 1e9 < 0.14
    assert state["count_calls"] >= 3  # is_available twice, _lazy_init (and device_count for the span)


def test_driver_start_inside_lazy_init_is_not_a_second_span(stand_in_cuda):
    traced, _ = stand_in_cuda
    torch.cuda._lazy_init()
    otel_coldstart.ready()
    (span,) = traced.by_phase(semconv.PHASE_RUNTIME_INIT)
    assert span.attributes[semconv.RUNTIME_STEP] == "lazy_init"
    assert (span.end_time - span.start_time) / 1e9 >= 0.24  # driver start and init, once


def test_a_copy_that_is_the_first_cuda_touch_initialises_cuda_before_its_clock(stand_in_cuda, monkeypatch):
    """``t.to("cuda")`` as the first CUDA call: the init happens before the copy is timed (a
    CPU build then fails the copy itself, which reaches the caller unchanged)."""
    traced, state = stand_in_cuda
    monkeypatch.setattr(_session.ACTIVE.state(tensor_ops.__name__, tensor_ops._CudaSeen), "up", False)
    order = []
    real_timed_call = tensor_ops._timed_call

    def timed_call(*args, **kwargs):
        order.append(("timed", state["initialised"]))
        return real_timed_call(*args, **kwargs)

    monkeypatch.setattr(tensor_ops, "_timed_call", timed_call)
    try:
        torch.ones(4).to("cuda")
    except (RuntimeError, AssertionError):
        pass  # no CUDA in this torch build: the host's own error
    assert order == [("timed", True)]  # initialised before the copy's clock started
    otel_coldstart.ready()
    (init,) = traced.by_phase(semconv.PHASE_RUNTIME_INIT)
    assert init.attributes[semconv.RUNTIME_STEP] == "lazy_init"


def test_a_host_cast_does_not_initialise_cuda(stand_in_cuda, monkeypatch):
    traced, state = stand_in_cuda
    monkeypatch.setattr(_session.ACTIVE.state(tensor_ops.__name__, tensor_ops._CudaSeen), "up", False)
    torch.ones(4).to(torch.float16)
    torch.ones(4).to("cpu", torch.float64)
    assert state["init_calls"] == 0


def test_driver_already_loaded_and_answering_at_once_is_no_span(stand_in_cuda, monkeypatch):
    """libcuda already mapped at instrument(): a first device-count call of microseconds means
    the driver was up before; only a slow one (a real cuInit) is recorded."""
    traced, state = stand_in_cuda
    state["driver_started"] = True  # answers at once
    otel_coldstart.uninstrument()
    monkeypatch.setattr(runtime, "_driver_loaded", lambda: True)
    traced.reinstrument()
    assert torch.cuda.is_available()
    assert not isinstance(torch._C._cuda_getDeviceCount, ColdstartWrapper)
    otel_coldstart.ready()
    assert traced.by_phase(semconv.PHASE_RUNTIME_INIT) == []


def test_the_init_span_names_the_host_link_and_its_bound(stand_in_cuda, monkeypatch):
    """The bound every h2d/d2h bandwidth of the start-up is held against (patches/_host_link):
    here no GPU is in sysfs, so the documented upper bound for an unknown link."""
    from otel_coldstart.patches import _host_link

    traced, _ = stand_in_cuda
    monkeypatch.setattr(_host_link, "pcie_link", lambda sys_root="/sys": None)
    torch.cuda._lazy_init()
    otel_coldstart.ready()
    (span,) = traced.by_phase(semconv.PHASE_RUNTIME_INIT)
    assert span.attributes[semconv.RUNTIME_LINK] == "unknown"
    assert span.attributes[semconv.RUNTIME_LINK_BPS] == _host_link.UNKNOWN_LINK_BPS
    assert span.attributes[semconv.RUNTIME_BACKEND] == "cuda"


def test_rocm_build_names_its_backend_and_finds_a_started_driver_by_dev_kfd(stand_in_cuda, monkeypatch, tmp_path):
    """torch.version.hip: the torch.cuda API runs on HIP. The HIP runtime is linked into torch
    (mapped from import on), so a started driver shows as an open /dev/kfd, not a library."""
    traced, _ = stand_in_cuda
    monkeypatch.setattr(torch.version, "hip", "7.0.0")
    fds = tmp_path / "fd"
    fds.mkdir()
    os.symlink("/dev/null", fds / "3")
    assert runtime._kfd_open(str(fds)) is False
    os.symlink("/dev/kfd", fds / "4")
    assert runtime._kfd_open(str(fds)) is True
    assert torch.cuda.is_available()
    torch.cuda._lazy_init()
    otel_coldstart.ready()
    spans = traced.by_phase(semconv.PHASE_RUNTIME_INIT)
    assert {s.attributes[semconv.RUNTIME_BACKEND] for s in spans} == {"rocm"}


def test_rocm_driver_detection_does_not_look_for_libcuda(monkeypatch):
    monkeypatch.setattr(torch.version, "hip", "7.0.0")
    monkeypatch.setattr(runtime, "_kfd_open", lambda fd_dir="/proc/self/fd": True)
    assert runtime._driver_loaded() is True
    monkeypatch.setattr(runtime, "_kfd_open", lambda fd_dir="/proc/self/fd": False)
    assert runtime._driver_loaded() is False
