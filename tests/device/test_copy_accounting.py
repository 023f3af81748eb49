"""Bytes that cross the bus and the memory they come from, as Copy.cu decides (torch 2.13):
a pure function over the copy's dtypes, layout, pinning and blocking flag, checked over a
table of cases, plus the layout facts read from real tensors."""

from __future__ import annotations

import pytest
import torch

from _standins import Described
from otel_coldstart.patches import _cuda_copy, tensor_ops
from otel_coldstart.patches._cuda_copy import CONVERTED_ON_DEVICE, CONVERTED_ON_HOST, D2H, H2D

N = 1000
F32, BF16 = 4, 2

# (direction, src itemsize, dst itemsize, one block, host contiguous, pinned, non_blocking)
#   -> (bytes over the bus, pinned, converted on)
CASES = [
    # Same dtype, one contiguous block: one direct memcpy of the caller's memory.
    ((H2D, F32, F32, True, True, True, False), (N * F32, True, None)),
    ((H2D, F32, F32, True, True, False, False), (N * F32, False, None)),
    ((H2D, BF16, BF16, True, True, True, True), (N * BF16, True, None)),
    # Blocking H2D with a dtype change: converted on the CPU into a pageable temporary; the
    # destination dtype's bytes cross the bus (fp32 -> bf16: half the source's bytes).
    ((H2D, F32, BF16, True, True, True, False), (N * BF16, False, CONVERTED_ON_HOST)),
    ((H2D, F32, BF16, True, True, False, False), (N * BF16, False, CONVERTED_ON_HOST)),
    ((H2D, BF16, F32, True, True, True, False), (N * F32, False, CONVERTED_ON_HOST)),
    # Non-blocking H2D with a dtype change: the source's bytes, from its own (pinned) memory;
    # the cast runs on the device afterwards.
    ((H2D, F32, BF16, True, True, True, True), (N * F32, True, CONVERTED_ON_DEVICE)),
    ((H2D, F32, BF16, False, False, True, True), (N * F32, False, CONVERTED_ON_DEVICE)),
    # Same dtype, non-contiguous source: .contiguous() makes a pageable copy first.
    ((H2D, F32, F32, False, False, True, False), (N * F32, False, None)),
    ((H2D, F32, F32, False, False, True, True), (N * F32, False, None)),
    # Same dtype, contiguous source, non-contiguous destination: the source is used as is.
    ((H2D, F32, F32, False, True, True, False), (N * F32, True, None)),
    # D2H mirrors it: the host side is the destination.
    ((D2H, F32, F32, True, True, True, True), (N * F32, True, None)),
    ((D2H, BF16, F32, True, True, True, False), (N * BF16, False, CONVERTED_ON_HOST)),
    ((D2H, F32, BF16, True, True, True, True), (N * BF16, True, CONVERTED_ON_DEVICE)),
]


@pytest.mark.parametrize("case, expected", CASES)
def test_bus_bytes_and_pinned_follow_copy_cu(case, expected):
    direction, src_size, dst_size, one_block, host_contiguous, pinned, non_blocking = case
    moved = _cuda_copy.bus_copy(direction, N, src_size, dst_size, src_size == dst_size and True,
                                one_block, host_contiguous, pinned, non_blocking)
    assert tuple(moved) == expected


def test_same_size_different_dtypes_still_convert():
    moved = _cuda_copy.bus_copy(H2D, N, 2, 2, False, True, True, True, False)  # fp16 -> bf16, blocking
    assert moved == (N * 2, False, CONVERTED_ON_HOST)


def test_not_a_bus_direction_is_refused():
    with pytest.raises(ValueError):
        _cuda_copy.bus_copy("d2d", N, 4, 4, True, True, True, True, True)


@pytest.mark.parametrize("make_source, make_destination, expected", [
    (lambda: torch.ones(8, 8), lambda: torch.empty(8, 8), (True, True)),
    # A transposed source and a destination with its strides (what .to() allocates): one block.
    (lambda: torch.ones(8, 4).t(), lambda: torch.empty(8, 4).t(), (True, False)),
    # Transposed into a contiguous parameter (vLLM's param.data.copy_(w.t())): temporaries.
    (lambda: torch.ones(8, 4).t(), lambda: torch.empty(4, 8), (False, False)),
    # A slice with gaps: not dense.
    (lambda: torch.ones(8, 8)[:, :4], lambda: torch.empty(8, 4), (False, False)),
    # A broadcast copy_: the source is expanded, so not one block.
    (lambda: torch.ones(1, 8), lambda: torch.empty(8, 8), (False, False)),
])
def test_layout_facts_from_real_tensors(make_source, make_destination, expected):
    source, destination = make_source(), make_destination()
    assert tensor_ops._layout(source, destination, source) == expected


# --- the wrappers' recording path feeds the model: tensors described as torch describes them ---

class _Recorder:
    def __init__(self) -> None:
        self.calls = []

    def add(self, phase, detail, detail_attrs, nbytes, start, end, read_bytes, major_faults, pinned=None,
            non_blocking=False, on_add=None):
        self.calls.append((phase, nbytes, pinned, non_blocking))


class _Session:
    def __init__(self) -> None:
        self.recorder = _Recorder()


@pytest.mark.parametrize("non_blocking, expected", [
    (False, ("h2d", 64 * 2, False, False)),  # converted on the host: bf16 bytes, from a pageable temporary
    (True, ("h2d", 64 * 4, True, True)),  # fp32 bytes from the pinned source, cast on the device
])
def test_h2d_with_a_dtype_change_is_counted_as_copy_cu_moves_it(non_blocking, expected, monkeypatch):
    monkeypatch.setattr(tensor_ops, "_strided", torch.strided)
    source = Described(torch.ones(8, 8, dtype=torch.float32), "cpu", pinned=True)
    destination = Described(torch.empty(8, 8, dtype=torch.bfloat16), "cuda:0")
    session = _Session()
    tensor_ops._record_tensors(session, source, destination, 0, 10, None, None, tensor_ops._untimed(non_blocking))
    assert session.recorder.calls == [expected]


def test_transposed_source_into_a_contiguous_parameter_is_pageable_even_if_pinned(monkeypatch):
    monkeypatch.setattr(tensor_ops, "_strided", torch.strided)
    """vLLM's ``param.data.copy_(w)`` with a transposed checkpoint tensor: .contiguous() first."""
    source = Described(torch.ones(8, 4).t(), "cpu", pinned=True)
    destination = Described(torch.empty(4, 8), "cuda:0")
    session = _Session()
    tensor_ops._record_tensors(session, source, destination, 0, 10, None, None, tensor_ops._untimed(False))
    assert session.recorder.calls == [("h2d", 32 * 4, False, False)]
