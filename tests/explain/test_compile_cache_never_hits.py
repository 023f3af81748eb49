"""A compile cache that can never hit (issue 39, item 5): a torch.compile'd module called with
grad enabled (outside inference_mode()/no_grad()) compiles a training graph, whose AOTAutograd
entry torch writes only once the backward is compiled: served, it never is, so the second
start-up with the same, kept TORCHINDUCTOR_CACHE_DIR misses again. The report says the
directory already held entries, why it still missed, and the lever that works (serve under
inference_mode()), not "put the cache directory on a volume", which is already done. The same
module served under inference_mode() hits the second time: the lever is the one that works.

Fresh processes, real Inductor on CPU (~10-20 s a compilation here)."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import textwrap

import pytest

from otel_coldstart import semconv

pytestmark = [pytest.mark.process, pytest.mark.slow]
# Two independent start-up pairs with real Inductor (a C++ compile each): one per worker.
SPREAD_OVER_WORKERS = True

SCRIPT = textwrap.dedent("""
    import sys
    import otel_coldstart
    otel_coldstart.instrument()
    import torch

    torch.manual_seed(0)
    # One Linear: an extern matmul, no C++ kernel to build (12 s a start-up with a ReLU, 3.7 s
    # without), and the caches behave the same: the graph is cached, or not, whatever it holds.
    model = torch.nn.Sequential(torch.nn.Linear(16, 4))
    compiled = torch.compile(model)
    x = torch.ones(2, 16)
    if sys.argv[1] == "inference":
        with torch.inference_mode():
            out = compiled(x)
    else:
        out = compiled(x)  # grad enabled, as a server that never wrapped its calls
    assert torch.allclose(out, model(x).detach(), atol=1e-5)
    otel_coldstart.ready()
""")


def _start_up(tmp_path, name: str, mode: str, cache_dir) -> str:
    out_dir = tmp_path / name
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TORCHINDUCTOR_", "TORCH_COMPILE"))}
    env.update(OTEL_COLDSTART_SUMMARY="0", OTEL_COLDSTART_OUTPUT_DIR=str(out_dir),
               TORCHINDUCTOR_CACHE_DIR=str(cache_dir))
    completed = subprocess.run([sys.executable, str(tmp_path / "serve.py"), mode], cwd=tmp_path, env=env,
                               capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    (trace_file,) = glob.glob(str(out_dir / "*.otlp.jsonl"))
    return trace_file


def _analyze(*files: str) -> dict:
    completed = subprocess.run([sys.executable, "-m", "otel_coldstart", "analyze", "--format", "json", *files],
                               capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-2000:]
    return json.loads(completed.stdout)


def _compile_spans(trace_file: str) -> list:
    from otel_coldstart.analyze.readers import read_trace_file

    return [s for s in read_trace_file(trace_file) if s.attributes.get(semconv.PHASE) == semconv.PHASE_COMPILE]


def test_a_module_compiled_with_grad_enabled_misses_every_time_and_the_report_says_why(tmp_path):
    (tmp_path / "serve.py").write_text(SCRIPT)
    cache_dir = tmp_path / "kept-cache"
    first = _start_up(tmp_path, "first", "grad", cache_dir)
    second = _start_up(tmp_path, "second", "grad", cache_dir)

    # What the runtime recorded: an empty directory, then a filled one; grad on; no entry written.
    [before] = _compile_spans(first)[:1]
    assert before.attributes[semconv.compile_cache_attribute("fx_graph", "entries_at_start")] == 0
    assert before.attributes[semconv.COMPILE_GRAD_ENABLED] is True
    assert before.attributes[semconv.compile_cache_attribute("aot_autograd", "saved")] == 0
    [again] = _compile_spans(second)[:1]
    assert again.attributes[semconv.compile_cache_attribute("fx_graph", "entries_at_start")] > 0
    assert again.attributes[semconv.compile_cache_attribute("aot_autograd", "misses")] >= 1

    [finding] = [f for f in _analyze(second)["findings"] if f["rule"] == "compile_cache"]
    text = " ".join(finding["evidence"])
    assert "already held entries at the start" in text and "grad enabled" in text
    assert "inference_mode()" in finding["lever"] and "already kept" in finding["lever"]
    assert "on a volume that outlives the pod" not in finding["lever"]

    # The first start-up, whose directory was empty: persisting alone would not help either.
    [finding] = [f for f in _analyze(first)["findings"] if f["rule"] == "compile_cache"]
    assert "inference_mode()" in finding["lever"] and "persisted alone, this cache would miss" in finding["lever"]


def test_the_same_module_served_under_inference_mode_hits_the_second_time(tmp_path):
    (tmp_path / "serve.py").write_text(SCRIPT)
    cache_dir = tmp_path / "kept-cache"
    _start_up(tmp_path, "first", "inference", cache_dir)
    second = _start_up(tmp_path, "second", "inference", cache_dir)
    [span] = _compile_spans(second)[:1]
    assert span.attributes[semconv.COMPILE_GRAD_ENABLED] is False
    assert span.attributes[semconv.COMPILE_CACHE_MISSES] == 0 and span.attributes[semconv.COMPILE_CACHE_HITS] >= 1
    assert [f for f in _analyze(second)["findings"] if f["rule"] == "compile_cache"] == []


BYPASSED = textwrap.dedent("""
    import otel_coldstart
    otel_coldstart.instrument()
    import torch

    torch.manual_seed(0)
    x = torch.ones(2, 16)
    plain = torch.compile(torch.nn.Linear(16, 4))
    with torch.inference_mode():
        plain(x)  # cacheable: fills the kept directory at the first start-up, hits at the second
    torch._inductor.config.post_grad_custom_post_pass = lambda graph: None  # a custom pass with no uuid()
    custom = torch.compile(torch.nn.Linear(16, 16))  # another graph; no C++ kernel to build
    with torch.inference_mode():
        custom(x)
    otel_coldstart.ready()
""")


def test_a_graph_torch_will_not_cache_misses_with_a_filled_directory_and_the_report_quotes_torch(tmp_path):
    """Issue 39: the kept directory is filled (another graph hits from it), yet one graph is
    compiled from scratch again: torch bypasses its caches for it. The compile span records
    torch's reason, and the second start-up's finding quotes it and gives the lever that lifts
    it (a CustomGraphPass with a uuid()), not "persist the directory"."""
    (tmp_path / "serve.py").write_text(BYPASSED)
    cache_dir = tmp_path / "kept-cache"
    _start_up(tmp_path, "first", "-", cache_dir)
    second = _start_up(tmp_path, "second", "-", cache_dir)

    plain, custom = _compile_spans(second)[:2]
    assert plain.attributes[semconv.COMPILE_CACHE_HITS] >= 1 and plain.attributes[semconv.COMPILE_CACHE_MISSES] == 0
    assert custom.attributes[semconv.compile_cache_attribute("fx_graph", "entries_at_start")] > 0
    assert custom.attributes[semconv.compile_cache_attribute("fx_graph", "bypasses")] >= 1
    reason = "Unsupported post grad custom pass"
    assert custom.attributes[semconv.compile_cache_attribute("fx_graph", "bypass_reason")] == reason
    assert semconv.compile_cache_attribute("fx_graph", "bypass_reason") not in plain.attributes

    [finding] = [f for f in _analyze(second)["findings"] if f["rule"] == "compile_cache"]
    text = " ".join(finding["evidence"])
    assert "already held entries at the start" in text and f'Inductor FX graph cache: "{reason}"' in text
    assert f'("{reason}")' in finding["lever"] and "CustomGraphPass" in finding["lever"]
    assert "cannot help" in finding["lever"] and "on a volume that outlives the pod" not in finding["lever"]
