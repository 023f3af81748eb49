"""The Run:ai Model Streamer (runai-model-streamer 0.17, the real one) reading a generated
multi-shard safetensors checkpoint from local disk in fresh processes: one deserialize span
per file with its bytes, under one stream span; its storage evidence cold (files evicted) and
with the files resident (the streamer reads with O_DIRECT where the filesystem serves it, so
resident pages do not spare it the reads: the figure must say what the process read, checked
against /proc/self/io read by the child itself); tensors bit-identical to safetensors'
load_file; the caller's casts nested under the files."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from otel_coldstart import semconv
from otel_coldstart.analyze.breakdown import breakdowns
from otel_coldstart.analyze.readers import read_trace_file
from otel_coldstart.floor import evict

pytest.importorskip("runai_model_streamer")
pytestmark = pytest.mark.process  # starts fresh Python processes: not in `make test-fast`

CHILD = r"""
import json, sys
import otel_coldstart
otel_coldstart.instrument()
import torch
from runai_model_streamer import SafetensorsStreamer

def process_read_bytes():  # the child's own reading of the kernel's counter
    for line in open("/proc/self/io"):
        if line.startswith("read_bytes:"):
            return int(line.split(":")[1])

paths = sys.argv[1:]
before = process_read_bytes()
streamed = {}
with SafetensorsStreamer() as streamer:
    streamer.stream_files(paths)
    for name, tensor in streamer.get_tensors():
        streamed[name] = tensor.to(torch.float16)  # the caller's work on each tensor, as vLLM's copy
read = process_read_bytes() - before
otel_coldstart.ready()
from safetensors.torch import load_file
expected = {}
for path in paths:
    expected.update(load_file(path))
identical = sorted(streamed) == sorted(expected) and all(
    torch.equal(streamed[k], expected[k].to(torch.float16)) for k in expected)
print(json.dumps({"trace": otel_coldstart.trace_file(), "process_read_bytes": read, "identical": identical}))
"""


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    import torch
    from safetensors.torch import save_file

    directory = tmp_path_factory.mktemp("runai")
    generator = torch.Generator().manual_seed(7)
    paths = []
    for shard in range(4):
        tensors = {f"layers.{shard}.{name}": torch.randn(rows, 512, generator=generator).to(torch.bfloat16)
                   for name, rows in (("q", 1024), ("k", 768), ("v", 1536), ("o", 512))}
        path = str(directory / f"model-{shard + 1:05d}-of-00004.safetensors")
        save_file(tensors, path)
        paths.append(path)
    return paths


def _run(tmp_path, paths):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(OTEL_COLDSTART_OUTPUT_DIR=str(tmp_path / "traces"), OTEL_COLDSTART_SUMMARY="0")
    done = subprocess.run([sys.executable, "-c", CHILD, *paths], env=env, capture_output=True, text=True,
                          timeout=180, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "internal error" not in done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    spans = read_trace_file(report["trace"])
    [b] = breakdowns(spans)
    files = [s for s in spans if s.phase == semconv.PHASE_DESERIALIZE  # (load_file after ready() checks the tensors)
             and s.attributes.get(semconv.FILE_API) == "runai_model_streamer.SafetensorsStreamer"]
    return report, spans, b, files


def _storage_bytes(files) -> int:
    return sum(s.attributes.get(semconv.CACHE_STORAGE_READ_BYTES, 0) for s in files)


def _common(report, spans, b, files, paths):
    assert report["identical"] is True  # the host's tensors, bit for bit
    assert sorted(s.attributes[semconv.FILE_PATH] for s in files) == sorted(paths)
    [stream] = [s for s in spans if s.name == semconv.SPAN_RUNAI_STREAM]
    assert all(s.parent_id == stream.span_id for s in files)
    for span in files:
        size = os.path.getsize(span.attributes[semconv.FILE_PATH])
        assert span.attributes[semconv.FILE_SIZE] == size
        assert 0.95 * size <= span.attributes[semconv.BYTES] <= size  # tensor bytes: the file less its header
        assert span.attributes[semconv.FILE_API] == "runai_model_streamer.SafetensorsStreamer"
        assert span.attributes[semconv.SHARD_COUNT] == 4
    casts = [s for s in spans if s.phase == semconv.PHASE_CAST]
    assert casts and {c.parent_id for c in casts} <= {s.span_id for s in files}  # the caller's casts, per file
    assert b.phase(semconv.PHASE_DESERIALIZE).spans == 4 and len(b.shards) == 4


def test_cold_files_read_from_storage(tmp_path, checkpoint):
    evicted, _ = evict(checkpoint)
    if not evicted:
        pytest.skip("the page cache cannot be evicted here")
    report, spans, b, files = _run(tmp_path, checkpoint)
    _common(report, spans, b, files, checkpoint)
    total = sum(os.path.getsize(p) for p in checkpoint)
    assert abs(_storage_bytes(files) - total) <= 0.05 * total  # every byte came from storage
    assert abs(_storage_bytes(files) - report["process_read_bytes"]) <= 0.05 * total
    assert {s.attributes[semconv.CACHE_STATE] for s in files} == {semconv.CACHE_COLD}
    assert all(s.attributes[semconv.CACHE_RESIDENT_RATIO] <= 0.01 for s in files)


def test_resident_files_say_what_the_stream_read(tmp_path, checkpoint):
    for path in checkpoint:  # every page in the page cache before the start
        with open(path, "rb") as handle:
            while handle.read(1 << 20):
                pass
    report, spans, b, files = _run(tmp_path, checkpoint)
    _common(report, spans, b, files, checkpoint)
    assert all(s.attributes[semconv.CACHE_RESIDENT_RATIO] >= 0.99 for s in files)
    total = sum(os.path.getsize(p) for p in checkpoint)
    # O_DIRECT (ext4, xfs): read from storage all the same; buffered (a filesystem without it): not at all
    assert abs(_storage_bytes(files) - report["process_read_bytes"]) <= 0.05 * total
    expected_state = semconv.CACHE_COLD if report["process_read_bytes"] >= 0.95 * total else semconv.CACHE_WARM
    assert {s.attributes[semconv.CACHE_STATE] for s in files} == {expected_state}


def test_patch_surface_restores_the_originals():
    """Same surface as every patch module; unpatch() puts back the exact functions (in this
    process: the streamer module imports torch, already imported by the suite)."""
    from runai_model_streamer.safetensors_streamer import safetensors_streamer as module

    from otel_coldstart import patches
    from otel_coldstart.patches import runai_streamer

    assert runai_streamer in patches.ALL and runai_streamer.HOT_PATH is False
    assert runai_streamer.get_version().startswith("0.17")
    originals = {name: module.SafetensorsStreamer.__dict__[name] for name in ("stream_files", "get_tensors")}
    try:
        runai_streamer.patch()
        runai_streamer.patch()  # idempotent: one layer
        for name, original in originals.items():
            wrapped = module.SafetensorsStreamer.__dict__[name]
            assert wrapped is not original and wrapped.__wrapped__ is original
    finally:
        runai_streamer.unpatch()
    assert all(module.SafetensorsStreamer.__dict__[n] is o for n, o in originals.items())
