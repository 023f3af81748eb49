"""Other platforms, simulated in fresh processes: the OS probes the plugin uses are taken
away before it is imported (macOS: no ``resource.RUSAGE_THREAD``, no /proc, no
``posix_fadvise``; Windows: no ``resource`` module at all, no /proc, no ``os.sysconf``).
The host's results must be bit-identical to a plain run's, the spans must be exported, and
the missing evidence must be absent with its reason on the root."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from otel_coldstart import semconv
from otel_coldstart.analyze.readers import read_trace_file

pytestmark = pytest.mark.process  # starts fresh Python processes: not in `make test-fast`

PRELUDE = {
    "macos": r"""
import builtins, os, resource
del resource.RUSAGE_THREAD
del os.posix_fadvise
""",
    "windows": r"""
import builtins, os, sys
sys.modules["resource"] = None  # "import resource" raises ImportError
del os.posix_fadvise
del os.sysconf
""",
}

NO_PROC = r"""
_real_open, _real_listdir, _real_readlink = builtins.open, os.listdir, os.readlink

def _no_proc(path):
    try:
        return os.fsdecode(path).startswith("/proc")
    except TypeError:
        return False

def _open(file, *args, **kwargs):
    if _no_proc(file):
        raise FileNotFoundError(2, "No such file or directory", file)
    return _real_open(file, *args, **kwargs)

def _listdir(path="."):
    if _no_proc(path):
        raise FileNotFoundError(2, "No such file or directory", path)
    return _real_listdir(path)

def _readlink(path, *args, **kwargs):
    if _no_proc(path):
        raise FileNotFoundError(2, "No such file or directory", path)
    return _real_readlink(path, *args, **kwargs)

builtins.open, os.listdir, os.readlink = _open, _listdir, _readlink
"""

WORKLOAD = r"""
import hashlib, json, sys
instrumented = sys.argv[1] == "plugin"
if instrumented:
    import otel_coldstart
    otel_coldstart.instrument()
import torch
import safetensors.torch
from safetensors import safe_open
torch.set_num_threads(1)
shards = sys.argv[2:]
digest = hashlib.sha256()

def phase(name):
    import contextlib
    return otel_coldstart.phase(name) if instrumented else contextlib.nullcontext()

with phase("build_model"):
    model = torch.nn.Linear(64, 64)
    with torch.no_grad():
        model.weight.copy_(torch.arange(64 * 64, dtype=torch.float32).reshape(64, 64) / 100)
state = safetensors.torch.load_file(shards[0])
with safe_open(shards[1], framework="pt") as handle:
    for name in handle.keys():
        state[name] = handle.get_tensor(name)
for name in sorted(state):
    tensor = state[name].to(torch.float16).float()
    out = torch.empty_like(tensor)
    out.copy_(tensor)
    digest.update(out.numpy().tobytes())
model.half()
digest.update(model.weight.detach().float().numpy().tobytes())
if instrumented:
    otel_coldstart.ready()
print(json.dumps({"digest": digest.hexdigest(), "trace": otel_coldstart.trace_file() if instrumented else None}))
"""


def _run(tmp_path, platform, mode, shards):
    script = PRELUDE[platform] + NO_PROC + WORKLOAD
    env = dict(os.environ, OTEL_COLDSTART_OUTPUT_DIR=str(tmp_path / "traces"), OTEL_COLDSTART_SUMMARY="1")
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    return subprocess.run([sys.executable, "-c", script, mode, *shards], env=env, cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=180)


@pytest.mark.parametrize("platform", ["macos", "windows"])
def test_without_the_os_probes_the_host_is_unchanged_and_spans_flow(tmp_path, small_checkpoint, platform):
    plain = _run(tmp_path, platform, "plain", small_checkpoint[:2])
    assert plain.returncode == 0, plain.stderr
    plugin = _run(tmp_path, platform, "plugin", small_checkpoint[:2])
    assert plugin.returncode == 0, plugin.stderr
    assert "Traceback" not in plugin.stderr and "internal error" not in plugin.stderr
    assert json.loads(plugin.stdout)["digest"] == json.loads(plain.stdout)["digest"]
    assert "[otel-coldstart] start-up breakdown" in plugin.stderr

    spans = read_trace_file(json.loads(plugin.stdout)["trace"])
    (root,) = [s for s in spans if s.name == semconv.SPAN_ROOT]
    assert root.attributes[semconv.READY] is True
    # No /proc: the root starts at instrument(), and says so.
    assert root.attributes[semconv.PROCESS_START_SOURCE] == "instrument"
    missing = root.attributes[semconv.EVIDENCE_UNAVAILABLE]
    expected_thread_io = ("thread_io: resource.RUSAGE_THREAD is missing" if platform == "macos"
                          else "thread_io: the resource module is missing")
    assert expected_thread_io in missing
    assert any(m.startswith("process_start: /proc is not readable") for m in missing)
    assert "evict_from_page_cache: os.posix_fadvise is missing" in missing

    shards = [s for s in spans if s.phase == semconv.PHASE_DESERIALIZE]
    assert len(shards) == 2
    assert [s for s in spans if s.name == "coldstart.build_model"]
    casts = [s for s in spans if s.phase == semconv.PHASE_CAST and s.attributes.get(semconv.AGGREGATE)]
    assert casts and sum(s.attributes[semconv.CALLS] for s in casts) > 0
    assert [s for s in spans if s.phase == semconv.PHASE_H2H]  # the copy_ calls
    # The evidence that needs the missing probes is absent, not zero.
    for span in spans:
        assert semconv.IO_READ_BYTES not in span.attributes, span.name
        assert semconv.IO_MAJOR_FAULTS not in span.attributes, span.name
