"""The GPU check on a machine without CUDA: its exits, its help and estimate, and its judges.
The judges are pure functions over figures: each is shown healthy figures (PASS) and the
figures each defect would produce (FAIL), so the check can fail on each of them when a GPU
runs it; a passing measurement whose negative control did not fail is INCONCLUSIVE. The
controls themselves run on CPU stand-ins in test_gpu_check_controls.py."""

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


@pytest.mark.process
@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
@pytest.mark.parametrize("entry", ["python", "shell"])
def test_without_cuda_it_says_so_and_exits_3(entry):
    command = [sys.executable, "scripts/gpu_check.py"] if entry == "python" else ["bash", "scripts/gpu-check.sh"]
    result = _run(*command)
    assert result.returncode == 3, result.stderr
    assert result.stderr.strip() == (
        "gpu-check: no CUDA device: this check needs a CUDA GPU (the CPU tests cover the rest)")
    assert "Traceback" not in result.stderr and result.stdout == ""


@pytest.mark.process
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
    healthy = {"device_at_host_pace": {"plain_s": 1.00, "instrumented_s": 1.01}}
    assert gpu_check.judge_stall(healthy).status == "PASS"
    # The defect: a host synchronize at each shard's end, as the old aggregate resolution did.
    stalled = {"device_at_host_pace": {"plain_s": 1.00, "instrumented_s": 1.58}}
    verdict = gpu_check.judge_stall(stalled)
    assert verdict.status == "FAIL" and "+58.0%" in verdict.reasons[0]


def test_a_pass_whose_negative_control_also_passes_is_inconclusive(gpu_check):
    """The planted wait cost nothing measurable in any variant: the check could not have seen
    the real one either."""
    measured = {"device_as_is": {"plain_s": 1.0, "instrumented_s": 1.0}}
    insensitive = {"device_as_is": {"plain_s": 1.0, "instrumented_s": 1.005}}
    verdict = gpu_check.judge("stall", {"measured": measured, "control": insensitive})
    assert verdict.status == "INCONCLUSIVE" and "host_sync" in verdict.reasons[0]
    sensitive = dict(insensitive, device_at_host_pace={"plain_s": 1.0, "instrumented_s": 1.5})
    measured["device_at_host_pace"] = {"plain_s": 1.0, "instrumented_s": 1.0}
    assert gpu_check.judge("stall", {"measured": measured, "control": sensitive}).status == "PASS"
    # A failed measurement stays failed, whatever the control.
    failed = {"device_as_is": {"plain_s": 1.0, "instrumented_s": 1.5}}
    assert gpu_check.judge("stall", {"measured": failed, "control": insensitive}).status == "FAIL"


def test_every_check_has_a_judge_a_runner_a_control_and_help(gpu_check):
    assert set(gpu_check.JUDGES) == set(gpu_check.RUNNERS) == set(gpu_check.CONTROLS) == set(gpu_check.CHECKS)
    assert set(gpu_check.CHECK_HELP) == set(gpu_check.CHECKS)
    planted_in_plugin = {c for c, plant in gpu_check.CONTROLS.items() if plant in gpu_check.PLANTS}
    assert planted_in_plugin == set(gpu_check.CHECKS) - {"capture_race", "vllm"}


@pytest.mark.process
def test_help_documents_every_check_and_its_control():
    result = _run(sys.executable, "scripts/gpu_check.py", "--help")
    assert result.returncode == 0 and "Traceback" not in result.stderr
    gpu_check = _module("gpu_check")
    for check in gpu_check.CHECKS:
        assert f"  {check}: " in result.stdout, check
        assert gpu_check.CONTROLS[check] in result.stdout
    assert "negative control" in result.stdout and "exit codes" in result.stdout
    assert "estimated run time" in result.stdout


def test_the_default_run_is_estimated_at_half_the_limit_or_less(gpu_check):
    """scripts/gpu-check.sh stops at 600 s; the default sizes leave half of it spare, vLLM
    included."""
    estimate = gpu_check.estimate_s(gpu_check.CHECKS, vllm_installed=True)
    assert set(estimate) == {"setup", *gpu_check.CHECKS}
    assert sum(estimate.values()) <= gpu_check.HALF_OF_THE_LIMIT_S == 300
    # More data costs more: the estimate follows the sizes asked for.
    bigger = gpu_check.estimate_s(gpu_check.CHECKS, shards=8, shard_mib=512)
    assert bigger["stall"] > estimate["stall"] and bigger["setup"] > estimate["setup"]


def _throughput(**changes):
    figures = {"plugin_pinned_gbps": 48.0, "bulk_pinned_gbps": 52.0, "plugin_pageable_gbps": 14.0,
               "reference_pageable_gbps": 13.0, "accounting_failures": [], "link": "pcie gen5 x16",
               "link_gbps": 63.0}
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
    # The sysfs bound is wrong (a Gen4 bound on a link that did Gen5 speed).
    (dict(link_gbps=31.5, plugin_pinned_gbps=30.0, plugin_pageable_gbps=14.0), "the bound is wrong"),
    # A figure above the link: the analyzer would flag it as a timing error.
    (dict(plugin_pinned_gbps=70.0, bulk_pinned_gbps=62.0), "above the host link bound"),
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
               "h2d_behind_cast": {"sleep_s": 0.2, "cast_truth_s": 0.004, "launched_s": 0.001,
                                   "expected_wait_s": 0.203, "h2d_busy_s": 0.0001, "h2d_waited_s": 0.2}}
    for key, value in changes.items():
        figures[key] = {**figures[key], **value}
    return figures


@pytest.mark.parametrize("changes, fragment", [
    # Host launch time instead of device time (the old timing of GPU casts).
    (dict(gpu_cast={"plugin_device_s": 0.0006}), "gpu_cast"),
    (dict(d2d_copy={"plugin_device_s": 0.0002}), "d2d_copy"),
    # The queued device work landing on the next synchronising copy.
    (dict(h2d_behind_cast={"h2d_busy_s": 0.2031, "h2d_waited_s": 0.0}), "charged"),
])
def test_cast_copy_fails_on_host_timing_and_inflation(gpu_check, changes, fragment):
    assert gpu_check.judge_cast_copy(_cast_copy()).status == "PASS"
    verdict = gpu_check.judge_cast_copy(_cast_copy(**changes))
    assert verdict.status == "FAIL" and any(fragment in r for r in verdict.reasons)


def test_cast_copy_is_inconclusive_when_the_copy_had_nothing_to_wait_for(gpu_check):
    """The first round's workload: the host queued the casts slower than the device ran them,
    so the expected wait was about 0 and a charged wait could not be told from none."""
    figures = _cast_copy(h2d_behind_cast={"expected_wait_s": 0.001, "h2d_busy_s": 0.0001, "h2d_waited_s": 0.0})
    assert gpu_check.judge_cast_copy(figures).status == "INCONCLUSIVE"


def test_bytes_verdicts(gpu_check):
    assert gpu_check.judge_bytes({"failures": [], "cases": {"to_pinned": ("h2d", 1, 1, 0)}}).status == "PASS"
    assert gpu_check.judge_bytes({"failures": ["copy_broadcast: ..."], "cases": {"x": ()}}).status == "FAIL"
    assert gpu_check.judge_bytes({"failures": [], "cases": {}}).status == "FAIL"


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
    assert "| check | verdict | wall s | estimated s | reasons |" in open(first[1]).read()


def test_exit_code_is_5_when_nothing_failed_but_a_check_was_skipped(gpu_check, monkeypatch, tmp_path):
    """The parent's flow with stand-in runners (no GPU): verdicts, files, exit code."""
    monkeypatch.setattr(gpu_check, "write_shards", lambda *a: [])
    monkeypatch.setattr(gpu_check, "environment", lambda: {"device": "stand-in", "device_count": 1, "torch": "x",
                                                           "cuda": None, "loadavg": None})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setitem(gpu_check.RUNNERS, "vllm", lambda *a: {"skipped": "no vLLM"})
    control = {"v": {"plain_s": 1.0, "instrumented_s": 2.0}}
    monkeypatch.setitem(gpu_check.RUNNERS, "stall", lambda *a: {
        "measured": {"v": {"plain_s": 1.0, "instrumented_s": 1.0}}, "control": control})
    assert gpu_check.main(["--only", "stall", "--only", "vllm", "--out-dir", str(tmp_path)]) == 5
    monkeypatch.setitem(gpu_check.RUNNERS, "stall", lambda *a: {
        "measured": {"v": {"plain_s": 1.0, "instrumented_s": 1.5}}, "control": control})
    assert gpu_check.main(["--only", "stall", "--out-dir", str(tmp_path)]) == 1
    monkeypatch.setitem(gpu_check.RUNNERS, "stall", lambda *a: {
        "measured": {"v": {"plain_s": 1.0, "instrumented_s": 1.0}}, "control": control})
    assert gpu_check.main(["--only", "stall", "--out-dir", str(tmp_path)]) == 0
    assert len(list(tmp_path.iterdir())) == 6  # three runs, JSON and Markdown each
    reports = [json.loads(p.read_text()) for p in tmp_path.iterdir() if p.suffix == ".json"]
    assert all(r["estimated_s"] > 0 and all(c["wall_s"] is not None for c in r["checks"]) for r in reports)


# --- the vLLM check's decoder model and its span checks ---------------------------------------------

@pytest.mark.process
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


def _windows_figures(**changes):
    figures = {"failures": [], "noop_events": 0, "capture_errors": [],
               "shared_stream": {"plugin_s": 0.101, "truth_s": 0.100},
               "idle_start": {"plugin_s": 0.011, "truth_s": 0.010, "host_prep_s": 0.050},
               "blocking_waits": {"reps": 10, "with_wait": 10}}
    figures.update(changes)
    return figures


def test_windows_passes_healthy_figures_and_fails_each_defect(gpu_check):
    assert gpu_check.judge_windows(_windows_figures()).status == "PASS"
    defects = {
        "noop_events": 300,  # finding 8: events for no-op moves
        "shared_stream": {"plugin_s": 0.200, "truth_s": 0.100},  # finding 4: each thread the whole stream
        "idle_start": {"plugin_s": 0.060, "truth_s": 0.010, "host_prep_s": 0.050},  # finding 7
        "blocking_waits": {"reps": 10, "with_wait": 7},  # finding 3: waits lost now and then
        "capture_errors": ["RuntimeError: operation not permitted when stream is capturing"],  # finding 6
    }
    for key, value in defects.items():
        verdict = gpu_check.judge_windows(_windows_figures(**{key: value}))
        assert verdict.status == "FAIL", key
    quick = _windows_figures(idle_start={"plugin_s": 0.010, "truth_s": 0.010, "host_prep_s": 0.001})
    assert gpu_check.judge_windows(quick).status == "INCONCLUSIVE"  # the control could not show
    measured = _windows_figures()
    control = _windows_figures(idle_start={"plugin_s": 0.060, "truth_s": 0.010, "host_prep_s": 0.050})
    assert gpu_check.judge("windows", {"measured": measured, "control": control}).status == "PASS"
    assert gpu_check.judge("windows", {"measured": measured, "control": measured}).status == "INCONCLUSIVE"
