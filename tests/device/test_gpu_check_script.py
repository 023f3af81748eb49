"""The GPU check script on a machine without CUDA: a clear message and its own exit code."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(*args, **kwargs):
    env = dict(os.environ, PYTHONPATH=ROOT, PYTHON=sys.executable)
    return subprocess.run(list(args), cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, **kwargs)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
@pytest.mark.parametrize("entry", ["python", "shell"])
def test_without_cuda_it_says_so_and_exits_3(entry):
    command = [sys.executable, "scripts/gpu_check.py"] if entry == "python" else ["bash", "scripts/gpu-check.sh"]
    result = _run(*command)
    assert result.returncode == 3, result.stderr
    assert result.stderr.strip() == (
        "gpu-check: no CUDA device: this check needs a CUDA GPU (the CPU tests cover the rest)")
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_bad_arguments_and_an_existing_output_are_refused_with_exit_2(tmp_path):
    existing = tmp_path / "trace.jsonl"
    existing.write_text("keep me")
    result = _run(sys.executable, "scripts/gpu_check.py", "--trace-out", str(existing))
    assert result.returncode == 2 and "exists" in result.stderr
    assert existing.read_text() == "keep me"
    result = _run(sys.executable, "scripts/gpu_check.py", "--shards", "1")
    assert result.returncode == 2 and "--shards" in result.stderr


# --- the script's trace checks, on hand-built analyzer records ----------------------------------

def _gpu_check_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_check", os.path.join(ROOT, "scripts", "gpu_check.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Trace:
    def __init__(self):
        from otel_coldstart import semconv

        self.semconv = semconv
        self.spans = []
        self.root = self.add("model.startup", None, None)

    def add(self, name, phase, parent, duration_ns=1_000_000, **attributes):
        from otel_coldstart.analyze.model import Span

        if phase is not None:
            attributes[self.semconv.PHASE] = phase
        start = 1_000_000_000 + len(self.spans) * 10_000_000
        span = Span(trace_id="1" * 32, span_id=f"{len(self.spans) + 1:016x}",
                    parent_id=parent.span_id if parent is not None else None, name=name,
                    start_ns=start, end_ns=start + duration_ns, attributes=attributes)
        self.spans.append(span)
        return span

    def phase(self, name, parent=None):
        return self.add(f"coldstart.{name}", name, parent or self.root)


def _healthy_trace(model_bytes=4096, tensors=8, torch_bytes=1024, split_pinned=None):
    t = _Trace()
    sc = t.semconv
    start = t.phase("cuda_start")
    t.add("coldstart.runtime_init", "runtime_init", start, **{sc.RUNTIME_DEVICE_COUNT: 1})
    pageable = t.phase("load_pageable")
    t.add("coldstart.h2d", "h2d", pageable, **{sc.AGGREGATE: True, sc.BYTES: model_bytes, sc.CALLS: tensors,
                                                sc.COPY_PAGEABLE_BYTES: model_bytes, sc.COPY_PINNED_BYTES: 0,
                                                sc.THROUGHPUT: 5e9, sc.BUSY_S: model_bytes / 5e9})
    pinned = t.phase("load_pinned")
    t.add("coldstart.pin", "pin", pinned, **{sc.AGGREGATE: True, sc.BYTES: model_bytes, sc.THROUGHPUT: 8e9})
    pinned_bytes = model_bytes if split_pinned is None else split_pinned
    t.add("coldstart.h2d", "h2d", pinned, **{sc.AGGREGATE: True, sc.BYTES: model_bytes, sc.CALLS: tensors,
                                              sc.COPY_PINNED_BYTES: pinned_bytes,
                                              sc.COPY_PAGEABLE_BYTES: model_bytes - pinned_bytes,
                                              sc.COPY_NON_BLOCKING_CALLS: tensors, sc.COPY_ASYNC_S: 1e-6,
                                              sc.THROUGHPUT: 40e9})
    load_torch = t.phase("load_torch")
    t.add("coldstart.h2d", "h2d", load_torch, **{sc.AGGREGATE: True, sc.BYTES: torch_bytes, sc.CALLS: 2,
                                                  sc.THROUGHPUT: 5e9})
    cast = t.phase("cast_model")
    t.add("coldstart.cast", "cast", cast, **{sc.AGGREGATE: True, sc.BYTES: model_bytes, sc.CALLS: tensors})
    loop = t.phase("capture_batch_sizes")
    t.add("coldstart.graph_capture", "graph_capture", loop, **{
        sc.AGGREGATE: True, sc.CALLS: 6, sc.GRAPH_BATCH_SIZES: (1, 2, 4, 8, 16, 32), sc.BUSY_S: 0.01})
    accel = t.phase("capture_accelerator")
    t.add("coldstart.graph_capture", "graph_capture", accel, **{
        sc.AGGREGATE: True, sc.CALLS: 1, sc.GRAPH_API: "torch.accelerator.Graph"})
    graphed_phase = t.phase("make_graphed")
    graphed = t.add(sc.SPAN_MAKE_GRAPHED_CALLABLES, "graph_capture", graphed_phase)
    t.add("coldstart.graph_capture", "graph_capture", graphed, **{sc.AGGREGATE: True, sc.CALLS: 2})
    t.add("coldstart.graph_capture", "graph_capture", t.root, **{sc.AFTER_READY: True})
    return t.spans


def test_trace_checks_pass_on_a_healthy_trace_and_render():
    gpu_check = _gpu_check_module()
    captures = {"batch_sizes": [1, 2, 4, 8, 16, 32]}
    facts = gpu_check.check_trace(_healthy_trace(), 4096, 1024, 8, captures)
    assert facts["graph_captures"] == 9
    assert facts["pinned_gbps"] == pytest.approx(40.0) and facts["pageable_gbps"] == pytest.approx(5.0)
    facts.update(wall_s=1.0, device="stand-in", torch=torch.__version__)
    assert "graph captures" in gpu_check.render(facts)


@pytest.mark.parametrize("broken,message", [
    (dict(split_pinned=1024), "pinned/pageable split"),
    (dict(torch_bytes=1000), "torch.load"),
])
def test_trace_checks_fail_on_a_wrong_trace(broken, message):
    gpu_check = _gpu_check_module()
    spans = _healthy_trace(**broken)
    with pytest.raises(gpu_check.CheckFailed, match=message):
        gpu_check.check_trace(spans, 4096, 1024, 8, {"batch_sizes": [1, 2, 4, 8, 16, 32]})


def test_the_checkpoint_it_writes_is_multi_shard_with_a_tied_view(tmp_path):
    from safetensors.torch import load_file

    gpu_check = _gpu_check_module()
    files, torch_file, expected = gpu_check.write_checkpoint(str(tmp_path), 2, 8 * 1024 * 1024)
    assert [os.path.basename(f) for f in files] == ["model-00001-of-00002.safetensors",
                                                    "model-00002-of-00002.safetensors"]
    assert (tmp_path / "model.safetensors.index.json").exists()
    loaded = {}
    for path in files:
        loaded.update(load_file(path))
    assert loaded.keys() == expected.keys()
    assert all(torch.equal(loaded[k], expected[k]) and loaded[k].dtype == torch.bfloat16 for k in expected)
    saved = torch.load(torch_file)
    base, view = saved[gpu_check.TIED_BASE], saved[gpu_check.TIED_VIEW]
    assert view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
