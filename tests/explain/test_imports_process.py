"""Imports after instrument(), as a user meets them: a fresh process that instruments first and
then imports torch and safetensors, read back by ``otel-coldstart analyze``."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from otel_coldstart import demo, semconv
from otel_coldstart.analyze.readers import read_trace_file

pytestmark = pytest.mark.process

SHAPE = "demo.LlamaShape(vocab=1024, hidden=128, intermediate=256, layers=2, shards=2)"

# The demo's loading, without its "import_libraries" phase: what a user's script looks like.
SCRIPT = textwrap.dedent(f"""
    import json, os, sys
    import otel_coldstart
    otel_coldstart.instrument()
    import torch
    from safetensors import safe_open
    from otel_coldstart import demo

    directory = sys.argv[1]
    shape = {SHAPE}
    with otel_coldstart.phase("build_model"):
        model = demo.build_model(shape)
    with open(os.path.join(directory, "model.safetensors.index.json"), encoding="utf-8") as handle:
        names = sorted(set(json.load(handle)["weight_map"].values()))
    state = {{}}
    for name in names:
        with safe_open(os.path.join(directory, name), framework="pt") as shard:
            for key in shard.keys():
                state[key] = shard.get_tensor(key)
    model.load_state_dict(state, assign=True)
    model.to(torch.float16)
    otel_coldstart.ready()
""")


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_COLDSTART_SUMMARY"] = "0"
    return env


def _analyze(trace_file: str) -> dict:
    completed = subprocess.run([sys.executable, "-m", "otel_coldstart", "analyze", "--format", "json", trace_file],
                               capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)


def test_imports_after_instrument_are_import_time_not_unattributed(tmp_path):
    checkpoint = tmp_path / "checkpoint"
    demo.generate_checkpoint(str(checkpoint), eval(SHAPE, {"demo": demo}))
    script = tmp_path / "load.py"
    script.write_text(SCRIPT)
    completed = subprocess.run([sys.executable, str(script), str(checkpoint)], cwd=tmp_path, env=_env(),
                               capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr
    (trace_file,) = glob.glob(str(tmp_path / "otel-coldstart-traces" / "*.otlp.jsonl"))

    spans = read_trace_file(trace_file)
    (torch_span,) = [s for s in spans if s.attributes.get(semconv.IMPORT_MODULE) == "torch"]
    assert torch_span.attributes[semconv.IMPORT_MODULES] > 100
    assert torch_span.attributes[semconv.IMPORT_IMPORTER] == f"__main__:{SCRIPT.splitlines().index('import torch') + 1}"
    assert "torch" in torch_span.attributes[semconv.IMPORT_PACKAGES]
    # safetensors' import is a couple of milliseconds: it is in a batch of fast imports.
    batched = [s for s in spans if s.phase == "import" and s.attributes.get(semconv.AGGREGATE)]
    assert any("safetensors" in s.attributes[semconv.IMPORT_PACKAGES] for s in batched)

    (startup,) = _analyze(trace_file)["startups"]
    phases = {p["phase"]: p for p in startup["phases"]}
    assert phases["import"]["busy_s"] >= torch_span.duration_ns / 1e9
    assert startup["dominant_phase"] == "import"
    assert startup["unattributed_share"] < 0.10, startup["unattributed_s"]
    # torch builds a meta-device model's parameters through its reference implementations,
    # which import torch._dynamo (torch 2.13): torch's own import, made inside build_model.
    slow = {i["module"]: i for i in startup["imports"]["slow"]}
    late = [s for s in spans if s.attributes.get(semconv.IMPORT_MODULE) == "torch._dynamo"]
    if late:
        assert slow["torch._dynamo"]["importer"].startswith("torch.")
        assert slow["torch"]["importer"].startswith("__main__:")


SIGTERM_DURING_IMPORT = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    import otel_coldstart
    otel_coldstart.instrument()
    import sleeps_while_importing
""")


def _signal_during_an_import(tmp_path, how: int, after_s: float, env: dict) -> int:
    """Run SIGTERM_DURING_IMPORT and send ``how`` ``after_s`` into its import; its exit status."""
    marker = tmp_path / "inside"
    (tmp_path / "sleeps_while_importing.py").write_text(
        f"import time\nopen({str(marker)!r}, 'w').close()\ntime.sleep(60)\n")
    script = tmp_path / "main.py"
    script.write_text(SIGTERM_DURING_IMPORT)
    child = subprocess.Popen([sys.executable, str(script), str(tmp_path)], cwd=tmp_path, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert child.poll() is None and time.monotonic() < deadline, child.stderr.read() if child.poll() else ""
            time.sleep(0.05)
        time.sleep(after_s)
        child.send_signal(how)
        return child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()


def test_a_start_up_stopped_by_sigterm_during_an_import_says_it_was_importing(tmp_path):
    _signal_during_an_import(tmp_path, signal.SIGTERM, 0.1, _env())
    (trace_file,) = glob.glob(str(tmp_path / "otel-coldstart-traces" / "*.otlp.jsonl"))
    spans = read_trace_file(trace_file)
    (span,) = [s for s in spans if s.attributes.get(semconv.IMPORT_MODULE) == "sleeps_while_importing"]
    assert span.attributes[semconv.INTERRUPTED] is True
    assert span.duration_ns >= 100_000_000
    # Where the import was made survives the cut: the script's own line.
    line = SIGTERM_DURING_IMPORT.splitlines().index("import sleeps_while_importing") + 1
    assert span.attributes[semconv.IMPORT_IMPORTER] == f"__main__:{line}"
    (root,) = [s for s in spans if s.is_root]
    assert root.attributes[semconv.END_REASON] == semconv.END_SIGTERM
    assert root.attributes[semconv.END_PHASE] == "import"


def test_a_start_up_killed_during_an_import_names_the_import_running(tmp_path):
    """SIGKILL runs no handler: the progress records say what was running, and the import is
    named by its module (issue 38), not "unattributed"."""
    env = {**_env(), "OTEL_COLDSTART_PROGRESS_INTERVAL_S": "0.25"}
    # 1.5 s: a few progress records written during the import.
    assert _signal_during_an_import(tmp_path, signal.SIGKILL, 1.5, env) == -signal.SIGKILL
    (trace_file,) = glob.glob(str(tmp_path / "otel-coldstart-traces" / "*.otlp.jsonl"))
    completed = subprocess.run([sys.executable, "-m", "otel_coldstart", "analyze", "--format", "json", trace_file],
                               capture_output=True, text=True, timeout=300)
    assert completed.returncode == 11, completed.stderr  # docs/cli.md: a start-up was killed
    (startup,) = json.loads(completed.stdout)["startups"]
    killed = startup["killed"]
    assert killed["phase"] == "import"
    assert killed["running"]["module"] == "sleeps_while_importing"
    assert killed["running"]["elapsed_s"] >= 1.0
    completed = subprocess.run([sys.executable, "-m", "otel_coldstart", "analyze", trace_file],
                               capture_output=True, text=True, timeout=300)
    assert ": in import sleeps_while_importing for" in completed.stdout, completed.stdout
