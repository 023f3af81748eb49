"""The GPU check on a machine without CUDA: its exits, and its judges. The judges are pure
functions over figures: each is shown healthy figures (PASS) and the figures each defect of
issue 17 would produce (FAIL), so the check can fail on each of them when a GPU runs it."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(*args, **kwargs):
    env = dict(os.environ, PYTHONPATH=ROOT, PYTHON=sys.executable)
    return subprocess.run(list(args), cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, **kwargs)


def _module(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "scripts", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gpu_check():
    return _module("gpu_check")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
@pytest.mark.parametrize("entry", ["python", "shell"])
def test_without_cuda_it_says_so_and_exits_3(entry):
    command = [sys.executable, "scripts/gpu_check.py"] if entry == "python" else ["bash", "scripts/gpu-check.sh"]
    result = _run(*command)
    assert result.returncode == 3, result.stderr
    assert result.stderr.strip() == (
        "gpu-check: no CUDA device: this check needs a CUDA GPU (the CPU tests cover the rest)")
    assert "Traceback" not in result.stderr and result.stdout == ""


@pytest.mark.parametrize("args, message", [
    (["--shards", "1"], "--shards"),
    (["--shard-mib", "1"], "--shard-mib"),
    (["--only", "nonsense"], "invalid choice"),
])
def test_bad_arguments_exit_2(args, message):
    result = _run(sys.executable, "scripts/gpu_check.py", *args)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr


# --- the judges ----------------------------------------------------------------------------------

def test_stall_passes_within_2_percent_and_fails_on_an_added_wait(gpu_check):
    healthy = {"device_at_host_pace": {"plain_s": 1.00, "instrumented_s": 1.01, "defect_s": 1.60}}
    assert gpu_check.judge_stall(healthy).status == "PASS"
    # The defect: a host synchronize at each shard's end, as the old aggregate resolution did.
    stalled = {"device_at_host_pace": {"plain_s": 1.00, "instrumented_s": 1.58, "defect_s": 1.60}}
    verdict = gpu_check.judge_stall(stalled)
    assert verdict.status == "FAIL" and "+58.0%" in verdict.reasons[0]


def test_stall_is_inconclusive_when_no_variant_could_see_a_wait(gpu_check):
    insensitive = {"device_as_is": {"plain_s": 1.0, "instrumented_s": 1.0, "defect_s": 1.005}}
    assert gpu_check.judge_stall(insensitive).status == "INCONCLUSIVE"
    one_sensitive = dict(insensitive, device_at_host_pace={"plain_s": 1.0, "instrumented_s": 1.0, "defect_s": 1.5})
    assert gpu_check.judge_stall(one_sensitive).status == "PASS"


def _throughput(**changes):
    figures = {"plugin_pinned_gbps": 48.0, "bulk_pinned_gbps": 52.0, "plugin_pageable_gbps": 14.0,
               "reference_pageable_gbps": 13.0, "accounting_failures": []}
    figures.update(changes)
    return figures


@pytest.mark.parametrize("changes, fragment", [
    # Launch-time-only timing of queued copies: an absurd bandwidth the old 0.2 GB/s-2 TB/s window let through.
    (dict(plugin_pinned_gbps=900.0), "pinned non-blocking"),
    # Init or casts charged to a blocking copy: bandwidth depressed.
    (dict(plugin_pageable_gbps=6.0), "pageable blocking"),
    (dict(plugin_pinned_gbps=15.0, bulk_pinned_gbps=15.0), "1.5x pageable"),
    # Copy.cu's bytes: a blocking fp32->bf16 copy counted at the source's bytes.
    (dict(accounting_failures=["blocking bf16->fp32 H2D: 4 bytes"]), "blocking bf16->fp32"),
])
def test_throughput_fails_on_each_defect(gpu_check, changes, fragment):
    assert gpu_check.judge_throughput(_throughput()).status == "PASS"
    verdict = gpu_check.judge_throughput(_throughput(**changes))
    assert verdict.status == "FAIL" and any(fragment in r for r in verdict.reasons)


def test_capture_race_verdicts(gpu_check):
    ok = {"copies": 500, "captures_while_copying": 40, "failures": []}
    assert gpu_check.judge_capture_race({"plain": dict(ok), "instrumented": dict(ok)}).status == "PASS"
    broken = dict(ok, error="capture: RuntimeError: operation not permitted when stream is capturing")
    assert gpu_check.judge_capture_race({"plain": dict(ok), "instrumented": broken}).status == "FAIL"
    assert gpu_check.judge_capture_race({"plain": broken, "instrumented": broken}).status == "INCONCLUSIVE"
    miscounted = dict(ok, failures=["captures: 2 aggregate(s), 26 calls"])
    assert gpu_check.judge_capture_race({"plain": dict(ok), "instrumented": miscounted}).status == "FAIL"
    no_overlap = dict(ok, captures_while_copying=0)
    assert gpu_check.judge_capture_race({"plain": dict(ok), "instrumented": no_overlap}).status == "INCONCLUSIVE"


def _cast_copy(**changes):
    figures = {"failures": [],
               "gpu_cast": {"truth_s": 0.016, "plugin_device_s": 0.0155},
               "d2d_copy": {"truth_s": 0.008, "plugin_device_s": 0.0079},
               "h2d_behind_cast": {"cast_truth_s": 0.032, "expected_wait_s": 0.024, "h2d_busy_s": 0.0001,
                                   "h2d_waited_s": 0.023}}
    for key, value in changes.items():
        figures[key] = {**figures[key], **value}
    return figures


@pytest.mark.parametrize("changes, fragment", [
    # Host launch time instead of device time (the old timing of GPU casts).
    (dict(gpu_cast={"plugin_device_s": 0.0006}), "gpu_cast"),
    (dict(d2d_copy={"plugin_device_s": 0.0002}), "d2d_copy"),
    # The casts' device time landing on the next synchronising copy.
    (dict(h2d_behind_cast={"h2d_busy_s": 0.024, "h2d_waited_s": 0.0}), "charged"),
])
def test_cast_copy_fails_on_host_timing_and_inflation(gpu_check, changes, fragment):
    assert gpu_check.judge_cast_copy(_cast_copy()).status == "PASS"
    verdict = gpu_check.judge_cast_copy(_cast_copy(**changes))
    assert verdict.status == "FAIL" and any(fragment in r for r in verdict.reasons)


def test_runtime_init_fails_on_a_missing_driver_start_and_on_double_counting(gpu_check):
    plain = {"is_available_s": 0.40, "lazy_init_s": 0.25, "first_alloc_and_copy_s": 0.15}
    healthy = {"failures": [], "driver_s": 0.41, "lazy_init_s": 0.27, "first_copy_busy_s": 0.16,
               "init_overlaps_copy": False}
    assert gpu_check.judge_runtime_init({"plain": plain, "instrumented": healthy}).status == "PASS"
    no_driver = dict(healthy, driver_s=None, failures=["runtime_init steps ['lazy_init']"])
    assert gpu_check.judge_runtime_init({"plain": plain, "instrumented": no_driver}).status == "FAIL"
    inside_copy = dict(healthy, first_copy_busy_s=0.80, init_overlaps_copy=True)
    verdict = gpu_check.judge_runtime_init({"plain": plain, "instrumented": inside_copy})
    assert verdict.status == "FAIL" and len(verdict.reasons) == 2


def test_vllm_verdicts(gpu_check):
    assert gpu_check.judge_vllm({"skipped": "vLLM is not installed"}).status == "SKIP"
    assert gpu_check.judge_vllm({"failures": [], "exit_code": 0}).status == "PASS"
    assert gpu_check.judge_vllm({"failures": ["no coldstart.compile span"], "exit_code": 1}).status == "FAIL"


def test_report_files_are_never_overwritten(gpu_check, tmp_path):
    report = {"started": "2026-12-01T04:00:00Z", "wall_s": 1.0, "checks": [],
              "environment": {"device": "stand-in", "device_count": 1, "torch": torch.__version__,
                              "cuda": None, "loadavg": None}}
    first = gpu_check.write_report(str(tmp_path), report)
    second = gpu_check.write_report(str(tmp_path), report)
    assert first != second and all(os.path.exists(p) for p in first + second)
    assert json.loads(open(first[0]).read())["started"] == report["started"]
    assert "| check | verdict | reasons |" in open(first[1]).read()


def test_exit_code_is_5_when_nothing_failed_but_a_check_was_skipped(gpu_check, monkeypatch, tmp_path):
    """The parent's flow with stand-in runners (no GPU): verdicts, files, exit code."""
    monkeypatch.setattr(gpu_check, "write_shards", lambda *a: [])
    monkeypatch.setattr(gpu_check, "environment", lambda: {"device": "stand-in", "device_count": 1, "torch": "x",
                                                           "cuda": None, "loadavg": None})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setitem(gpu_check.RUNNERS, "vllm", lambda *a: {"skipped": "no vLLM"})
    monkeypatch.setitem(gpu_check.RUNNERS, "stall", lambda *a: {
        "v": {"plain_s": 1.0, "instrumented_s": 1.0, "defect_s": 2.0}})
    assert gpu_check.main(["--only", "stall", "--only", "vllm", "--out-dir", str(tmp_path)]) == 5
    monkeypatch.setitem(gpu_check.RUNNERS, "stall", lambda *a: {
        "v": {"plain_s": 1.0, "instrumented_s": 1.5, "defect_s": 2.0}})
    assert gpu_check.main(["--only", "stall", "--out-dir", str(tmp_path)]) == 1
    assert len(list(tmp_path.iterdir())) == 4  # two runs, JSON and Markdown each


# --- the vLLM check's decoder model and its span checks ---------------------------------------------

def test_vllm_check_without_vllm_exits_4():
    pytest.importorskip("opentelemetry.proto")
    try:
        import vllm  # noqa: F401
        pytest.skip("vLLM is installed here")
    except ImportError:
        pass
    result = _run(sys.executable, "scripts/gpu_check_vllm.py", "--decoder")
    assert result.returncode == 4 and "vllm" in result.stderr and "Traceback" not in result.stderr


def test_generated_decoder_is_a_loadable_llama(tmp_path):
    from safetensors.torch import load_file

    vllm_check = _module("gpu_check_vllm")
    directory = vllm_check.write_decoder(str(tmp_path / "decoder"))
    config = json.loads(open(os.path.join(directory, "config.json")).read())
    weights = load_file(os.path.join(directory, "model.safetensors"))
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert weights["model.embed_tokens.weight"].shape == (config["vocab_size"], config["hidden_size"])
    assert config["num_attention_heads"] * config["head_dim"] == config["hidden_size"]
    assert all(torch.isfinite(t.float()).all() for t in weights.values())
    assert float(weights["model.layers.0.mlp.up_proj.weight"].float().std()) == pytest.approx(0.02, rel=0.1)


def test_decoder_span_checks(tmp_path):
    from otel_coldstart import semconv
    from otel_coldstart.analyze.model import Span

    vllm_check = _module("gpu_check_vllm")

    def span(name, phase, **attributes):
        attributes[semconv.PHASE] = phase
        return Span(trace_id="1" * 32, span_id=f"{len(spans) + 1:016x}", parent_id=None, name=name,
                    start_ns=0, end_ns=1_000_000, attributes=attributes, resource={"process.pid": 7})

    spans = []
    spans.append(span("coldstart.deserialize", semconv.PHASE_DESERIALIZE))
    spans.append(span("coldstart.runtime_init", semconv.PHASE_RUNTIME_INIT))
    spans.append(span("coldstart.compile", semconv.PHASE_COMPILE))
    spans.append(span("coldstart.graph_capture", semconv.PHASE_GRAPH_CAPTURE,
                      **{semconv.CALLS: 4, semconv.GRAPH_BATCH_SIZES: (8, 4, 2, 1)}))
    failures, figures = vllm_check.check_decoder(spans)
    assert failures == [] and figures["graph_captures"] == 4 and figures["batch_sizes"] == [1, 2, 4, 8]
    failures, _ = vllm_check.check_decoder([s for s in spans if s.phase != semconv.PHASE_COMPILE][:2])
    assert any("graph capture" in f for f in failures) and any("compile" in f for f in failures)


def test_checks_past_the_time_budget_are_inconclusive_not_failed(gpu_check, monkeypatch, tmp_path):
    monkeypatch.setattr(gpu_check, "write_shards", lambda *a: [])
    monkeypatch.setattr(gpu_check, "environment", lambda: {"device": "stand-in", "device_count": 1, "torch": "x",
                                                           "cuda": None, "loadavg": None})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert gpu_check.main(["--only", "throughput", "--budget-s", "1", "--out-dir", str(tmp_path)]) == 5
    (report,) = [p for p in tmp_path.iterdir() if p.suffix == ".json"]
    (check,) = json.loads(report.read_text())["checks"]
    assert check["status"] == "INCONCLUSIVE" and "budget" in check["reasons"][0]
