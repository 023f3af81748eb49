"""No code change: ``opentelemetry-instrument python app.py`` (the real OpenTelemetry distro)
and ``otel-coldstart run -- python app.py`` (no distro) both trace the start-up."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from framework_checks import assert_no_orphans, attrs, by_phase, clean_env, read_trace_dir, run_python
from otel_coldstart import semconv

pytestmark = pytest.mark.process  # starts fresh Python processes: not in `make test-fast`

BIN = os.path.dirname(sys.executable)

# The app never imports the plugin before the start-up; it asks at the end whether it was
# instrumented, and checks that ready() put the per-tensor hooks back.
APP = textwrap.dedent("""
    import json, sys
    import torch
    from safetensors.torch import load_file, save_file
    save_file({"w": torch.arange(256, dtype=torch.float32).reshape(16, 16)}, sys.argv[1])
    weights = {k: v.to(torch.float16) for k, v in load_file(sys.argv[1]).items()}
    import otel_coldstart
    instrumented = otel_coldstart.ColdstartInstrumentor().is_instrumented_by_opentelemetry
    # Tensor.to is torch._C.TensorBase's: patched during the start-up, the original after it.
    patched = torch.Tensor.to is not torch._C.TensorBase.to
    otel_coldstart.ready()
    print(json.dumps({"instrumented": instrumented, "patched": patched,
                      "to_restored": torch.Tensor.to is torch._C.TensorBase.to,
                      "sum": float(weights["w"].float().sum())}), file=sys.stderr)
    sys.exit(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
""")


@pytest.fixture
def app(tmp_path):
    path = tmp_path / "app.py"
    path.write_text(APP)
    return str(path)


def _report(stderr: str) -> dict:
    return json.loads([line for line in stderr.splitlines() if line.startswith("{")][-1])


def _console_spans(stdout: str) -> list[dict]:
    """The console exporter prints each span as an indented JSON object."""
    decoder, spans, index = json.JSONDecoder(), [], 0
    while True:
        start = stdout.find("{", index)
        if start < 0:
            return spans
        span, index = decoder.raw_decode(stdout, start)
        spans.append(span)


opentelemetry_instrument = shutil.which("opentelemetry-instrument", path=BIN)
needs_distro = pytest.mark.skipif(
    opentelemetry_instrument is None or not os.path.exists(os.path.join(BIN, "python")),
    reason="opentelemetry-distro/-instrumentation (opentelemetry-instrument) are not installed")


@needs_distro
def test_opentelemetry_instrument_enables_the_plugin(app, tmp_path):
    env = clean_env(OTEL_TRACES_EXPORTER="console", OTEL_METRICS_EXPORTER="none", OTEL_LOGS_EXPORTER="none",
                    OTEL_SERVICE_NAME="zero-code-test", OTEL_COLDSTART_OUTPUT_DIR=str(tmp_path / "not-used"))
    result = _run([opentelemetry_instrument, sys.executable, app, str(tmp_path / "w.safetensors")], env, str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    report = _report(result.stderr)
    assert report == {"instrumented": True, "patched": True, "to_restored": True, "sum": 32640.0}
    spans = _console_spans(result.stdout)
    roots = [s for s in spans if s["name"] == semconv.SPAN_ROOT]
    assert len(roots) == 1
    assert roots[0]["attributes"][semconv.READY] is True
    # The distro's tracer provider carried them (its resource), not our embedded default.
    assert roots[0]["resource"]["attributes"]["service.name"] == "zero-code-test"
    assert not (tmp_path / "not-used").exists()
    shards = [s for s in spans if s["attributes"].get(semconv.PHASE) == semconv.PHASE_DESERIALIZE]
    assert [s["attributes"][semconv.FILE_PATH] for s in shards] == [str(tmp_path / "w.safetensors")]
    assert {s["context"]["trace_id"] for s in spans} == {roots[0]["context"]["trace_id"]}


@needs_distro
def test_opentelemetry_disabled_instrumentations_turns_it_off(app, tmp_path):
    env = clean_env(OTEL_TRACES_EXPORTER="console", OTEL_METRICS_EXPORTER="none", OTEL_LOGS_EXPORTER="none",
                    OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="coldstart")
    result = _run([opentelemetry_instrument, sys.executable, app, str(tmp_path / "w.safetensors")], env, str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert _report(result.stderr) == {"instrumented": False, "patched": False, "to_restored": True, "sum": 32640.0}
    assert not [s for s in _console_spans(result.stdout) if s["name"] == semconv.SPAN_ROOT]


def _run(command, env, cwd):
    return subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)


def _otel_coldstart_run(args, tmp_path, **env):
    return run_python(["-m", "otel_coldstart", "run", *args], clean_env(OTEL_COLDSTART_SUMMARY="0", **env),
                      cwd=str(tmp_path))


def test_run_enables_the_plugin_and_joins_one_trace(app, tmp_path):
    traces = tmp_path / "traces"
    result = _otel_coldstart_run(["--output-dir", str(traces), "--", sys.executable, app,
                                  str(tmp_path / "w.safetensors")], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert _report(result.stderr) == {"instrumented": True, "patched": True, "to_restored": True, "sum": 32640.0}
    spans = read_trace_dir(str(traces))
    launch = [s for s in spans if s.name == semconv.SPAN_LAUNCH]
    roots = [s for s in spans if s.is_root]
    assert len(launch) == 1 and len(roots) == 1
    assert roots[0].parent_id == launch[0].span_id
    assert roots[0].attributes[semconv.READY] is True
    assert roots[0].attributes[semconv.PROCESS_START_SOURCE] == "proc"
    assert [attrs(s)[semconv.FILE_PATH] for s in by_phase(spans, semconv.PHASE_DESERIALIZE)] == [
        str(tmp_path / "w.safetensors")]
    assert_no_orphans(spans)


def test_run_passes_the_exit_status_and_honours_disabling(app, tmp_path):
    result = _otel_coldstart_run(["--no-launch-span", "--output-dir", str(tmp_path / "t"), "--", sys.executable, app,
                                  str(tmp_path / "w.safetensors"), "3"], tmp_path,
                                 OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="coldstart")
    assert result.returncode == 3
    assert _report(result.stderr)["instrumented"] is False
    assert not (tmp_path / "t").exists()


def test_run_keeps_the_sitecustomize_it_shadows(app, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nos.environ['SHADOWED_SITECUSTOMIZE_RAN'] = '1'\n")
    probe = "import os, otel_coldstart; print(os.environ.get('SHADOWED_SITECUSTOMIZE_RAN'), " \
            "otel_coldstart.ColdstartInstrumentor().is_instrumented_by_opentelemetry)"
    result = _otel_coldstart_run(["--no-launch-span", "--output-dir", str(tmp_path / "t"), "--", sys.executable,
                                  "-c", probe], tmp_path, PYTHONPATH=str(site))
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["1", "True"]


def test_run_bad_command_lines(tmp_path):
    missing = _otel_coldstart_run(["--", "no-such-command-xyz"], tmp_path)
    assert missing.returncode == 127
    assert missing.stderr.strip().splitlines() == ["otel-coldstart: error: command not found: no-such-command-xyz"]
    empty = _otel_coldstart_run([], tmp_path)
    assert empty.returncode == 2
    assert "Traceback" not in empty.stderr and len(empty.stderr.strip().splitlines()) == 1
