"""Copies the CUDA rules do not describe (issue 23, finding 9): another accelerator (MPS: no
pinned or pageable memory, no events to time its queued work) and copies between two GPUs
with a dtype change (a copy, not a cast). Tensors are described as the recording path reads
them; the wrappers run for real."""

from __future__ import annotations

import pytest
import torch

import otel_coldstart
from _standins import Described
from otel_coldstart import semconv
from otel_coldstart.patches import tensor_ops


class _Recorder:
    def __init__(self) -> None:
        self.calls = []

    def add(self, phase, detail, detail_attrs, nbytes, start, end, read_bytes, major_faults, pinned=None,
            non_blocking=False, on_add=None):
        self.calls.append({"phase": phase, "detail_attrs": detail_attrs, "bytes": nbytes, "pinned": pinned,
                           "non_blocking": non_blocking, "on_add": on_add})


class _Session:
    def __init__(self) -> None:
        self.recorder = _Recorder()


@pytest.fixture
def strided(monkeypatch):
    monkeypatch.setattr(tensor_ops, "_strided", torch.strided)


@pytest.mark.parametrize("pinned", [True, False])
def test_a_copy_to_mps_is_not_put_through_copy_cu(strided, pinned):
    """Copy.cu's temporaries and pinned/pageable are CUDA's. A blocking bf16 -> fp32 copy to
    MPS counted by them would be fp32 bytes from "pageable" memory; is_pinned() is not asked."""
    source = Described(torch.ones(8, 8, dtype=torch.bfloat16), "cpu", pinned=pinned)
    destination = Described(torch.empty(8, 8, dtype=torch.float32), "mps")
    session = _Session()
    tensor_ops._record_tensors(session, source, destination, 0, 10, None, None, tensor_ops._untimed(False))
    (call,) = session.recorder.calls
    assert (call["phase"], call["bytes"], call["pinned"]) == ("h2d", 64 * 2, None)
    assert source.pinned_asked == 0


def test_a_storage_moved_to_mps_is_not_asked_about_pinning(traced):
    from _standins import DescribedStorage

    storage = DescribedStorage(4096, "cpu", pinned=True)
    result = DescribedStorage(4096, "mps")
    asked = []
    storage.is_pinned = lambda: asked.append(1) or True
    with otel_coldstart.phase("load"):
        tensor_ops._storage_to(lambda *a, **k: result, storage, (), {"device": "mps"})
    otel_coldstart.ready()
    (h2d,) = traced.by_phase(semconv.PHASE_H2D)
    assert h2d.attributes[semconv.BYTES] == 4096 and asked == []
    assert semconv.COPY_PINNED_BYTES not in h2d.attributes


@pytest.mark.parametrize("method, args, kwargs, expected", [
    ("to", (torch.float16,), {}, "untimed"),  # a cast on MPS: queued, no events for it
    ("half", (), {}, "untimed"),
    ("to", ("cpu",), {}, "host"),  # a blocking copy to the host waits for the device
    ("cpu", (), {}, "host"),
    ("to", ("cpu",), {"non_blocking": True}, "untimed"),
])
def test_work_on_a_device_without_events_is_untimed_unless_the_host_waits_for_it(method, args, kwargs, expected):
    instance = Described(torch.ones(4), "mps")
    plan = tensor_ops._plan_move(method, instance, args, kwargs, False)
    assert (plan.timed and plan.mark is None) == (expected == "untimed")


def test_an_mps_cast_has_no_bandwidth_from_its_launch_time(traced):
    """Its call returns once the kernel is queued: the aggregate says untimed, and carries no
    coldstart.throughput (the analyzer then leaves its bytes out of the bandwidth)."""
    source = Described(torch.ones(1024, dtype=torch.float32), "mps")
    result = Described(torch.ones(1024, dtype=torch.float16), "mps")
    wrapper = tensor_ops._tensor_move("to")
    with otel_coldstart.phase("mps_casts"):
        for _ in range(3):
            assert wrapper(lambda *a, **k: result, source, (torch.float16,), {}) is result
    otel_coldstart.ready()
    (cast,) = traced.by_phase(semconv.PHASE_CAST)
    assert cast.attributes[semconv.COPY_UNTIMED_CALLS] == 3
    assert semconv.THROUGHPUT not in cast.attributes and semconv.COPY_ASYNC_S not in cast.attributes


@pytest.mark.parametrize("source_device, destination_device, phase", [
    ("cuda:0", "cuda:1", semconv.PHASE_D2D),  # .to("cuda:1", torch.float32): between GPUs, with its cast
    ("cuda:0", "cuda:0", semconv.PHASE_CAST),  # the same GPU: a cast
    ("cpu", "cpu", semconv.PHASE_CAST),
])
def test_a_cast_between_two_gpus_is_a_device_to_device_copy_with_its_cast(strided, source_device,
                                                                          destination_device, phase):
    source = Described(torch.ones(16, dtype=torch.bfloat16), source_device)
    destination = Described(torch.empty(16, dtype=torch.float32), destination_device)
    session = _Session()
    tensor_ops._record_tensors(session, source, destination, 0, 10, None, None, tensor_ops._untimed(False))
    (call,) = session.recorder.calls
    assert call["phase"] == phase and call["bytes"] == 16 * 2
    assert call["detail_attrs"] == {semconv.CAST_FROM: "bfloat16", semconv.CAST_TO: "float32"}
