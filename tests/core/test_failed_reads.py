"""Failed reads are marked failed on their span (issue 21.4, the runtime's side): status ERROR
and the OTel ``error.type`` attribute with the exception's type, for a missing file, a
truncated one and a directory, on load_file, safe_open and torch.load. And two start-ups of
one process within a second never share a trace file (issue 21.9)."""

from __future__ import annotations

import os

import pytest
import safetensors.torch
import torch
from safetensors import safe_open

import otel_coldstart
from otel_coldstart import semconv


def _truncated(tmp_path, name, save):
    path = str(tmp_path / name)
    save(path)
    with open(path, "r+b") as handle:
        handle.truncate(os.path.getsize(path) // 2)
    return path


LOADERS = {
    "load_file": lambda p: safetensors.torch.load_file(p),
    "safe_open": lambda p: safe_open(p, framework="pt").get_tensor("w"),
    "torch.load": lambda p: torch.load(p, weights_only=True),
}


@pytest.mark.parametrize("loader", sorted(LOADERS))
@pytest.mark.parametrize("case", ["missing", "truncated", "directory"])
def test_a_read_that_raises_is_marked_failed_with_its_type(traced, tmp_path, loader, case):
    if case == "missing":
        path = str(tmp_path / "nowhere.safetensors")
    elif case == "directory":
        path = str(tmp_path / "a-directory.safetensors")
        os.mkdir(path)
    elif loader == "torch.load":
        path = _truncated(tmp_path, "w.pt", lambda p: torch.save({"w": torch.ones(1 << 16)}, p))
    else:
        path = _truncated(tmp_path, "w.safetensors", lambda p: safetensors.torch.save_file({"w": torch.ones(1 << 16)}, p))
    with pytest.raises(Exception) as raised:
        LOADERS[loader](path)
    otel_coldstart.ready()
    spans = traced.by_phase(semconv.PHASE_DESERIALIZE)
    if loader == "safe_open" and not spans:
        return  # the handle was never made: no read began, nothing to mark
    (span,) = spans
    assert span.status.status_code.name == "ERROR"
    expected = type(raised.value)
    name = expected.__qualname__ if expected.__module__ == "builtins" else f"{expected.__module__}.{expected.__qualname__}"
    assert span.attributes[semconv.ERROR_TYPE] == name


def test_two_start_ups_within_a_second_write_two_files(tmp_path):
    otel_coldstart.uninstrument()
    paths = []
    try:
        for _ in range(2):
            otel_coldstart.instrument(start_at="instrument", summary=False, handle_sigterm=False,
                                      output_dir=str(tmp_path))
            with otel_coldstart.phase("step"):
                pass
            otel_coldstart.ready()
            paths.append(otel_coldstart.trace_file())
            otel_coldstart.uninstrument()
    finally:
        otel_coldstart.uninstrument()
    assert paths[0] != paths[1]
    assert all(os.path.getsize(p) > 0 for p in paths)  # neither "NOT written: File exists"
