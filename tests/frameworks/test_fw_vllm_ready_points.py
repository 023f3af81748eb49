"""patches/vllm.py: vLLM's ready points, proved on a stand-in ``vllm`` package laid out as
vLLM 0.x is (vLLM itself is not installable on the CPU CI machine), in fresh processes.
The module has the surface of every patch module, is armed only by the vLLM plugin, and
unpatches to the exact originals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from framework_checks import stand_in_package
from otel_coldstart import patches, semconv
from otel_coldstart.analyze.readers import read_trace_file
from otel_coldstart.patches import vllm as vllm_patch

pytestmark = pytest.mark.process  # starts fresh Python processes: not in `make test-fast`

ENGINE_CORE = textwrap.dedent("""
    import torch

    class EngineCore:
        def __init__(self, fail=False):
            torch.ones(16).to(torch.float16)  # loading weights, as far as the trace cares
            if fail:
                raise RuntimeError("engine failed to start")
            self.started = True
""")

WORKER = textwrap.dedent("""
    class Worker:
        def compile_or_warm_up_model(self):
            return "warmed"
""")


@pytest.fixture
def fake_vllm(tmp_path):
    return stand_in_package(tmp_path / "site", {"vllm/v1/engine/core.py": ENGINE_CORE,
                                                "vllm/v1/worker/gpu_worker.py": WORKER})


SCRIPT = textwrap.dedent("""
    import json, sys
    import otel_coldstart
    from otel_coldstart import vllm_plugin
    from otel_coldstart.controller import CONTROLLER
    from otel_coldstart.patches import vllm as vllm_patch
    order = sys.argv[1]
    report = {}
    if order == "import_first":
        import vllm.v1.engine.core as core
        vllm_plugin.register()
    elif order == "plugin_first":
        vllm_plugin.register()
        import vllm.v1.engine.core as core
    else:  # no plugin: the host instruments and decides when it is ready
        otel_coldstart.instrument()
        import vllm.v1.engine.core as core
    original = core.EngineCore.__dict__["__init__"].__wrapped__ if vllm_patch.is_patched() else None
    report["patched"] = vllm_patch.is_patched()
    try:
        core.EngineCore(fail=True)
    except RuntimeError as error:
        report["host_error"] = str(error)
    report["ready_after_failure"] = CONTROLLER.session.ended
    engine = core.EngineCore()
    report["started"] = engine.started
    report["ready"] = CONTROLLER.session.ended
    import vllm.v1.worker.gpu_worker as worker
    report["warm"] = worker.Worker().compile_or_warm_up_model()
    report["trace"] = otel_coldstart.trace_file()
    otel_coldstart.uninstrument()
    report["restored"] = original is None or core.EngineCore.__dict__["__init__"] is original
    report["unpatched"] = not vllm_patch.is_patched()
    print(json.dumps(report))
""")


def _run(tmp_path, fake_vllm, order):
    env = dict(os.environ, PYTHONPATH=str(fake_vllm), OTEL_COLDSTART_VLLM="1", OTEL_COLDSTART_SUMMARY="0",
               OTEL_COLDSTART_OUTPUT_DIR=str(tmp_path / "traces"))
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    env.pop("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", None)
    result = subprocess.run([sys.executable, "-c", SCRIPT, order], env=env, cwd=str(tmp_path), capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "internal error" not in result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_surface_and_registration():
    assert vllm_patch in patches.ALL
    assert vllm_patch.TARGETS and all(t.startswith("vllm.") for t in vllm_patch.TARGETS)
    assert vllm_patch.HOT_PATH is False
    for name in ("patch", "unpatch", "is_patched", "get_version"):
        assert callable(getattr(vllm_patch, name)), name
    assert vllm_patch.get_version() is None  # not installed here; asking never imports it
    assert "vllm" not in sys.modules


@pytest.mark.parametrize("order", ["import_first", "plugin_first"])
def test_the_plugin_ends_the_startup_where_vllm_can_serve(tmp_path, fake_vllm, order):
    report = _run(tmp_path, fake_vllm, order)
    assert report["patched"] is True
    assert report["host_error"] == "engine failed to start"  # vLLM's exception, untouched
    assert report["ready_after_failure"] is False  # a failed __init__ is not ready
    assert report["started"] is True and report["ready"] is True
    assert report["warm"] == "warmed"
    assert report["restored"] is True and report["unpatched"] is True
    spans = read_trace_file(report["trace"])
    (root,) = [s for s in spans if s.name == semconv.SPAN_ROOT]
    assert root.attributes[semconv.READY] is True
    assert [s for s in spans if s.phase == semconv.PHASE_CAST]


def test_without_the_plugin_nothing_is_patched(tmp_path, fake_vllm):
    report = _run(tmp_path, fake_vllm, "host_instruments")
    assert report["patched"] is False
    assert report["ready"] is False  # the host calls ready() where it decides
